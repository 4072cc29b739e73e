"""The first code a sandboxed child runs: `python -P -m measuring.sandbox_entry POLICY -m MODULE ARGS...`.

Started by `measuring/sandbox.py` (inside its cgroup when there is one), it closes the child in
before any of the user's model is read: resource limits (address space, CPU time, file size, no
core dumps), a network namespace of its own when the kernel allows it (root), no new privileges,
then the unprivileged user when started as root; it records what it could do in the policy's
`report` file and runs MODULE as `__main__`. Standard library only: the emulated aarch64 Python
runs it too, and nothing here should cost a measured cold start more than a few milliseconds.
"""

import ctypes
import json
import os
import resource
import runpy
import sys

CLONE_NEWNET = 0x40000000
CLONE_NEWNS = 0x00020000
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000
MNT_DETACH = 2
PR_SET_NO_NEW_PRIVS = 38


def _limit(name: str, soft: int | None, hard: int | None = None) -> None:
    if soft is None:
        return
    resource.setrlimit(getattr(resource, name), (soft, soft if hard is None else hard))


def close_in(policy: dict) -> dict:
    """Apply `policy` to this process; what was done (and why not, where it could not be)."""
    done: dict = {}
    _limit("RLIMIT_CORE", 0)
    _limit("RLIMIT_AS", policy.get("address_space_bytes"))
    cpu_s = policy.get("cpu_s")
    _limit("RLIMIT_CPU", cpu_s, None if cpu_s is None else cpu_s + 2)  # SIGXCPU, then SIGKILL 2 s later
    _limit("RLIMIT_FSIZE", policy.get("file_bytes"))
    libc = ctypes.CDLL(None, use_errno=True)
    if policy.get("isolate_network"):
        if libc.unshare(CLONE_NEWNET) == 0:
            done["network"] = "own namespace (no interfaces up)"
        else:
            done["network"] = f"shared: unshare(CLONE_NEWNET) failed: {os.strerror(ctypes.get_errno())}"
    else:
        done["network"] = "shared: " + policy.get("network_reason", "isolation not asked")
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    uid = policy.get("uid")
    if uid is not None and os.geteuid() == 0 and policy.get("reach"):
        why = _reach(libc, policy["reach"])
        if why:
            done["user_reason"] = why
            uid = None
    if uid is not None and os.geteuid() == 0:
        os.setgroups([])
        os.setgid(policy["gid"])
        os.setuid(uid)
        done["user"] = uid
    else:
        done["user"] = os.geteuid()
    return done


def _reach(libc, reach: list[list[str]]) -> str | None:
    """Make each `[hidden, path]` reachable by the unprivileged user: in a mount namespace of this
    process's own, the folder `hidden` (one others may not cross, e.g. /root holding the Python
    installation) is covered by an empty one they may cross, with only `path` bound back inside
    it. What else `hidden` holds is out of the child's sight. None, or why it could not."""
    if libc.unshare(CLONE_NEWNS) != 0:
        return f"unshare(CLONE_NEWNS) failed: {os.strerror(ctypes.get_errno())}"
    mount = libc.mount
    mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    if mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return f"making the mounts private failed: {os.strerror(ctypes.get_errno())}"
    fds = [(hidden, path, os.open(path, os.O_PATH)) for hidden, path in reach]  # opened in this namespace
    covered = []
    why = None
    for hidden in sorted({h for h, _, _ in fds}):
        if mount(b"tmpfs", hidden.encode(), b"tmpfs", 0, b"mode=0711,size=1m") != 0:
            why = f"covering {hidden} failed: {os.strerror(ctypes.get_errno())}"
            break
        covered.append(hidden)
    for _, path, fd in fds if why is None else []:
        os.makedirs(path, mode=0o755, exist_ok=True)
        if mount(f"/proc/self/fd/{fd}".encode(), path.encode(), None, MS_BIND | MS_REC, None) != 0:
            why = f"binding {path} failed: {os.strerror(ctypes.get_errno())}"
            break
    for _, _, fd in fds:
        os.close(fd)
    if why is not None:
        for hidden in covered:  # as it was: this process stays root and must see what it hid
            libc.umount2(hidden.encode(), MNT_DETACH)
    return why


def main(argv: list[str]) -> None:
    policy = json.loads(argv[1])
    done = close_in(policy)
    if policy.get("report"):
        try:
            with open(policy["report"], "w") as report:
                json.dump(done, report)
        except OSError:
            pass
    if argv[2] != "-m":
        raise SystemExit("usage: python -P -m measuring.sandbox_entry POLICY -m MODULE [ARGS...]")
    sys.argv = [argv[3], *argv[4:]]
    runpy.run_module(argv[3], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv)
