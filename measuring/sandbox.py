"""The sandbox: the one way AYCI starts a process that touches a user's model.

A model is a stranger's: once intake has checked its bytes, everything that reads, converts,
runs or profiles it happens in a child process closed in by this module, never in a long-lived
process (the API server, a converter or inference worker, the endpoint):

- a wall-clock limit (its process group killed), a CPU-time limit (`RLIMIT_CPU`), an
  address-space limit (`RLIMIT_AS`), a file-size limit, no core dumps, and a memory cgroup where
  the machine has one (`measuring/confinement.py`);
- an environment built from an allow-list (`environment`): no AWS credentials, API keys or
  other secrets of the parent, `HOME`, `TMPDIR` and every cache in its own working folder;
- its own working folder (`Workspace`): inputs are linked in, outputs are taken back only as
  regular files inside it (never through a link the child planted);
- a network namespace of its own when root (no interfaces up), no new privileges, and, when
  started as root, the unprivileged user `nobody`.
The child applies the limits to itself before it runs a line of the caller's code
(`measuring/sandbox_entry.py`: no `preexec_fn`, which is unsafe in a process with threads).

Its death fails only what it was doing, with the reason (`SandboxFailed`: "timed out after
N s", "out of memory at N MB", "CPU time limit of N s reached", "killed by signal SIGSEGV");
the parent lives on. Three ways in: `call(target, kwargs)` runs a function and returns its
JSON result, `run(module, args)` runs a module to its end, `start(module, args)` a long-lived
one (the endpoint's workers).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import structlog

from measuring.confinement import (
    ENTER_FAILED_EXIT,
    ConfinementUnavailable,
    MeasurementGroup,
    Outcome,
    find_hierarchy,
    unavailable_reason,
)
from measuring.confinement import Limits as GroupLimits

REPO_ROOT = Path(__file__).resolve().parents[1]
SANDBOX_UID = 65534  # nobody: where the user namespace has no room for a user id per workspace
SANDBOX_UID_BASE, SANDBOX_UID_RANGE = 0x30000, 0x10000  # a user id per workspace, from these
ENTRY = "measuring.sandbox_entry"
PROGRESS_MARK = "@@SANDBOX-PROGRESS@@"
RESULT_FILE = "result.json"
ENTRY_REPORT = ".sandbox-entry.json"
OUTPUT_LIMIT = 1 << 20  # characters of a child's stdout / stderr kept
# Variables a child may inherit as they are: none of them holds a secret.
PASSED_VARIABLES = (
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "LD_LIBRARY_PATH",
    "TVM_LIBRARY_PATH",
    "CC",
    "CXX",
    "AYCI_ARM_SYSROOT",
    "AYCI_TVM_KEEP_LOGS",
)
SANDBOX_CPU_SHARES = 256  # cgroup v1: a quarter of one ordinary process's weight
SANDBOX_CPU_WEIGHT = 25  # cgroup v2: the sandboxes' parent, a quarter of the default 100
MEMORY_SIGNS = ("MemoryError", "bad_alloc", "Cannot allocate memory", "Failed to allocate", "out of memory")

log = structlog.get_logger()


class SandboxFailed(Exception):
    """The sandboxed child died or failed. `kind`: time, cpu, memory, signal, error (its own
    exception or exit status), start (it could not be started)."""

    def __init__(
        self, reason: str, kind: str = "error", peak_mb: float | None = None, stderr: str = "", error_type: str = ""
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind
        self.peak_mb = peak_mb
        self.stderr = stderr
        self.error_type = error_type  # the child's exception class, when it raised one (`call`)


@dataclass(frozen=True)
class SandboxLimits:
    """What a child may use. `memory_mb` caps it through a cgroup where there is one (and its
    CPU share is `vcpus`, default this machine's cores); `address_space_mb` through `RLIMIT_AS`
    (None: not at all, e.g. under qemu, whose own reservation would already pass it); `cpu_s`
    defaults to what the wall-clock limit allows on every core (a backstop if the parent dies)."""

    wall_s: float
    memory_mb: int | None = None
    address_space_mb: int | None = None
    cpu_s: float | None = None
    vcpus: float | None = None
    file_mb: int | None = 16384
    threads: int | None = 1  # every library's thread pool (None: their own defaults, e.g. for TVM tuning)
    network: bool = False  # True: keep the host's network (nothing in AYCI needs it)

    @property
    def cpu_limit_s(self) -> int:
        return int(self.cpu_s if self.cpu_s is not None else self.wall_s * (os.cpu_count() or 1) + 10)


@dataclass
class Finished:
    """A child that ran to its end (exit status 0)."""

    stdout: str
    stderr: str
    wall_s: float
    cpu_s: float  # user + system time of the child and the children it waited for
    outcome: Outcome | None  # what its cgroup saw (None: it had none)
    isolation: dict = field(default_factory=dict)  # what the entry could close (user, network)


def dropping_user() -> bool:
    """Children run as `nobody` when this process is root."""
    return os.geteuid() == 0


@functools.cache
def network_isolation() -> str | None:
    """None when children get a network namespace of their own; otherwise why not."""
    if not dropping_user():
        return "not root: a network namespace needs CAP_SYS_ADMIN"
    if not hasattr(os, "unshare") and not Path("/proc/self/ns/net").exists():
        return "this kernel has no network namespaces"
    return None


@functools.cache
def _reach() -> list[list[str]]:
    """`[hidden, path]` pairs the unprivileged child must reach to run this Python: its
    installation (`sys.base_prefix`), when a folder above it (e.g. /root) is closed to others."""
    pairs = []
    installation = Path(os.path.realpath(sys.base_prefix))
    for ancestor in reversed(installation.parents):
        if ancestor != Path("/") and not ancestor.stat().st_mode & stat.S_IXOTH:
            pairs.append([str(ancestor), str(installation)])
            break
    return pairs


def environment(threads: int | None = 1, home: Path | None = None, extra: dict | None = None) -> dict[str, str]:
    """A child's whole environment: built from an allow-list, never copied from this process's
    (which may hold AWS credentials, API keys, AYCI settings). `threads` sizes every library's
    thread pool (None: the libraries' own defaults); `home` is the child's working folder (HOME,
    TMPDIR and the caches there)."""
    env = {name: os.environ[name] for name in PASSED_VARIABLES if name in os.environ}
    env.setdefault("LANG", "C.UTF-8")
    home_dir = str(home) if home is not None else tempfile.gettempdir()
    env.update(
        PATH=os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
        HOME=home_dir,
        TMPDIR=home_dir,
        XDG_CACHE_HOME=str(Path(home_dir) / ".cache"),
        TORCHINDUCTOR_CACHE_DIR=str(Path(home_dir) / ".torchinductor"),  # not one shared by every sandbox
        PYTHONPATH=str(REPO_ROOT),
        PYTHONNOUSERSITE="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    if threads is not None:
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TVM_NUM_THREADS"):
            env[name] = str(threads)
    env.update(extra or {})
    return env


def _sandbox_root() -> Path:
    """Where workspaces go: a folder of this user's that others may cross but not list."""
    root = Path(tempfile.gettempdir()) / f"ayci-sandbox-{os.geteuid()}"
    try:
        root.mkdir(mode=0o711, exist_ok=True)
        info = root.lstat()
        if stat.S_ISDIR(info.st_mode) and not stat.S_ISLNK(info.st_mode) and info.st_uid == os.geteuid():
            root.chmod(0o711)
            return root
    except OSError:
        pass
    return Path(tempfile.mkdtemp(prefix="ayci-sandbox-"))  # someone else's folder was in the way


def _maps_range(map_file: str, first: int, count: int) -> bool:
    """Whether this user namespace maps ids `first`..`first + count - 1` (so setuid to them works)."""
    try:
        for line in Path(map_file).read_text().splitlines():
            inside, _, length = (int(v) for v in line.split())
            if inside <= first and first + count <= inside + length:
                return True
    except (OSError, ValueError):
        pass
    return False


_uids = itertools.count()


def _next_uid() -> int:
    """An unprivileged user id for one workspace: one of its own (no sandboxed child may signal,
    read or write another's) where the user namespace maps `SANDBOX_UID_RANGE`, else `nobody`."""
    if _maps_range("/proc/self/uid_map", SANDBOX_UID_BASE, SANDBOX_UID_RANGE) and _maps_range(
        "/proc/self/gid_map", SANDBOX_UID_BASE, SANDBOX_UID_RANGE
    ):
        return SANDBOX_UID_BASE + (os.getpid() * 97 + next(_uids)) % SANDBOX_UID_RANGE
    return SANDBOX_UID


class Workspace:
    """A child's own working folder, owned by the user id the child runs as (when dropping):
    it can write there and read what the parent put there (`bring`); the parent takes back only
    regular files inside it (`take`). `create` is a context manager; `make` and `remove` are for
    a long-lived child's."""

    def __init__(self, path: Path, uid: int | None) -> None:
        self.path = path
        self.uid = uid  # None: children keep this process's user (not root)

    @classmethod
    def make(cls, prefix: str = "sandbox-", parent: Path | None = None) -> Workspace:
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent or _sandbox_root()))
        workspace = cls(path, _next_uid() if dropping_user() else None)
        workspace.folder(".cache")
        workspace.own(path)
        return workspace

    @classmethod
    @contextlib.contextmanager
    def create(cls, prefix: str = "sandbox-", parent: Path | None = None) -> Iterator[Workspace]:
        workspace = cls.make(prefix, parent)
        try:
            yield workspace
        finally:
            workspace.remove()

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def own(self, path: Path) -> None:
        """Give `path` (not what is under it) to the child's user."""
        if self.uid is not None:
            os.chown(path, self.uid, self.uid, follow_symlinks=False)

    def folder(self, name: str) -> Path:
        """A folder the child can write (created if need be)."""
        path = self.path / name
        path.mkdir(parents=True, exist_ok=True)
        for item in [path, *path.rglob("*")]:
            self.own(item)
        return path

    def bring(self, source: Path, name: str | None = None) -> Path:
        """`source` (a file or a folder) inside the workspace, readable by the child: hard-linked
        where it can be (the same file system), copied otherwise. Returns its path there."""
        source = Path(source)
        target = self.path / (name or source.name)
        if source.resolve() == target.resolve():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, copy_function=_link_or_copy, symlinks=False)
        else:
            _link_or_copy(source, target)
        for item in [target, *(target.rglob("*") if target.is_dir() else [])]:
            mode = item.stat().st_mode
            wanted = 0o055 if item.is_dir() else 0o044
            try:
                item.chmod(mode | wanted)
            except PermissionError:  # a link to another user's file (an unprivileged run): readable already, or copied
                if mode & wanted != wanted:
                    item.unlink()
                    shutil.copyfile(source / item.relative_to(target) if source.is_dir() else source, item)
                    item.chmod(item.stat().st_mode | wanted)
        return target

    def take(self, path: Path | str) -> Path:
        """A file the child wrote, as a path the parent may read: a regular file inside the
        workspace, reached through no link (`SandboxFailed` otherwise: the child may have
        planted a link to one of the parent's files)."""
        path = self.path / path if not Path(path).is_absolute() else Path(path)
        try:
            inside = path.relative_to(self.path)
        except ValueError:
            raise SandboxFailed(f"{path} is not in the sandbox's workspace") from None
        current = self.path
        for part in inside.parts:
            current = current / part
            if current.is_symlink():
                raise SandboxFailed(f"the sandboxed child left a link at {inside}, not a file")
        if not path.is_file():
            raise SandboxFailed(f"the sandboxed child left no file {inside}")
        return path


def _link_or_copy(source, target) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _group_for(limits: SandboxLimits) -> tuple[MeasurementGroup | None, str | None]:
    if limits.memory_mb is None:
        return None, "no memory cap asked"
    lambda_mb = os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE")
    if lambda_mb:
        return None, f"inside a Lambda function of {lambda_mb} MB: the platform caps it"
    reason = unavailable_reason()
    if reason is None:
        try:
            hierarchy = find_hierarchy()
            if hierarchy.version == 2:  # beside the measurements' parent (whose weight is the highest), not in it
                sandboxes = hierarchy.cpu_parent.parent / "ayci-sandbox"
                hierarchy = replace(hierarchy, cpu_parent=sandboxes, memory_parent=sandboxes)
            vcpus = limits.vcpus if limits.vcpus is not None else float(os.cpu_count() or 1)
            group = MeasurementGroup.create(GroupLimits(memory_mb=limits.memory_mb, vcpus=vcpus), hierarchy)
            _yield_cpu(group)
            return group, None
        except (ConfinementUnavailable, OSError) as exc:
            reason = str(exc)
    return None, reason


def _yield_cpu(group: MeasurementGroup) -> None:
    """A sandbox that is not a measurement yields the CPU to everything else (the API server
    first): a measurement's group has the highest weight so that nothing disturbs its timing, a
    conversion's must not starve the process that answers users."""
    if group.hierarchy.version == 2:
        (group.cpu_dir.parent / "cpu.weight").write_text(str(SANDBOX_CPU_WEIGHT))
        (group.cpu_dir / "cpu.weight").write_text("100")
    else:
        (group.cpu_dir / "cpu.shares").write_text(str(SANDBOX_CPU_SHARES))


def command(
    module: str,
    args: list[str],
    limits: SandboxLimits,
    workspace: Workspace,
    *,
    python: list[str] | None = None,
    group: MeasurementGroup | None = None,
) -> list[str]:
    """The argv that starts `python -m module args` closed in by `limits` (inside `group`)."""
    isolation_reason = None if limits.network else network_isolation()
    policy = {
        "address_space_bytes": limits.address_space_mb << 20 if limits.address_space_mb else None,
        "cpu_s": limits.cpu_limit_s,
        "file_bytes": limits.file_mb << 20 if limits.file_mb else None,
        "isolate_network": not limits.network and isolation_reason is None,
        "network_reason": "asked for" if limits.network else isolation_reason,
        "uid": workspace.uid,
        "gid": workspace.uid,
        "reach": _reach() if dropping_user() and python in (None, [sys.executable]) else [],
        "report": str(workspace.path / ENTRY_REPORT),
    }
    argv = [*(python or [sys.executable]), "-P", "-m", ENTRY, json.dumps(policy), "-m", module, *args]
    return group.wrap(argv) if group is not None else argv


def start(
    module: str,
    args: list[str],
    limits: SandboxLimits,
    workspace: Workspace,
    *,
    python: list[str] | None = None,
    group: MeasurementGroup | None = None,
    env_extra: dict | None = None,
    stdin=subprocess.DEVNULL,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
) -> subprocess.Popen:
    """Start `python -m module args` in the sandbox (in its own process group) and return it:
    for a long-lived child the caller talks to and stops (`stop`). `run` waits for one."""
    return subprocess.Popen(
        command(module, args, limits, workspace, python=python, group=group),
        cwd=workspace.path,
        env=environment(limits.threads, workspace.path, env_extra),
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        start_new_session=True,
    )


def stop(child: subprocess.Popen, timeout_s: float = 5.0) -> None:
    """Kill a started child's whole process group and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=timeout_s)


def run(
    module: str,
    args: list[str],
    limits: SandboxLimits,
    workspace: Workspace,
    *,
    python: list[str] | None = None,
    group: MeasurementGroup | None = None,
    env_extra: dict | None = None,
    on_progress: Callable[[str], None] | None = None,
    what: str = "the sandboxed process",
) -> Finished:
    """Run `python -m module args` in the sandbox to its end. Returns its output when it exits
    with 0; raises `SandboxFailed` with the reason when it times out, runs out of memory or CPU
    time, is killed by a signal or exits otherwise. `group`: a cgroup the caller made (and
    removes); otherwise one is made for `limits.memory_mb` where possible. Lines the child
    prints starting with `PROGRESS_MARK` go to `on_progress` as they come."""
    own_group = group is None
    confinement_reason = None
    if own_group:
        group, confinement_reason = _group_for(limits)
    try:
        started = time.monotonic()
        try:
            child = start(
                module,
                args,
                limits,
                workspace,
                python=python,
                group=group,
                env_extra=env_extra,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except OSError as exc:
            raise SandboxFailed(f"{what} could not be started: {exc}", kind="start") from exc
        stdout: list[str] = []
        stderr: list[str] = []
        readers = [
            threading.Thread(target=_read, args=(child.stdout, stdout, on_progress), daemon=True),
            threading.Thread(target=_read, args=(child.stderr, stderr, None), daemon=True),
        ]
        for reader in readers:
            reader.start()
        status, usage, timed_out = _wait(child, limits.wall_s)
        for reader in readers:
            reader.join(timeout=5)
        wall_s = time.monotonic() - started
        outcome = group.outcome() if group is not None else None
    finally:
        if own_group and group is not None:
            group.remove()
    out, err = "".join(stdout), "".join(stderr)
    cpu_s = usage.ru_utime + usage.ru_stime
    returncode = os.waitstatus_to_exitcode(status)
    isolation = _entry_report(workspace)
    log.debug(
        "sandbox_finished",
        module=module,
        returncode=returncode,
        wall_s=round(wall_s, 2),
        cpu_s=round(cpu_s, 2),
        confined=group is not None,
        confinement_reason=confinement_reason,
        **isolation,
    )
    if returncode != 0 or timed_out:
        raise _failure(what, limits, returncode, timed_out, cpu_s, outcome, err, group is not None)
    return Finished(stdout=out, stderr=err, wall_s=wall_s, cpu_s=cpu_s, outcome=outcome, isolation=isolation)


def _read(stream, into: list[str], on_progress: Callable[[str], None] | None) -> None:
    kept = 0
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace")
        if on_progress is not None and line.startswith(PROGRESS_MARK):
            with contextlib.suppress(Exception):  # the caller's callback must not stop the reading
                on_progress(line[len(PROGRESS_MARK) :].strip())
            continue
        if kept < OUTPUT_LIMIT:
            into.append(line)
            kept += len(line)
    stream.close()


def _entry_report(workspace: Workspace) -> dict:
    try:
        return json.loads(workspace.take(ENTRY_REPORT).read_text())
    except (SandboxFailed, OSError, ValueError):
        return {}


def _failure(
    what: str,
    limits: SandboxLimits,
    returncode: int,
    timed_out: bool,
    cpu_s: float,
    outcome: Outcome | None,
    stderr: str,
    grouped: bool,
) -> SandboxFailed:
    """Why the child died, in the words a user reads."""
    from schemas.reasons import from_traceback

    tail = from_traceback(stderr) if stderr.strip() else ""
    peak = outcome.peak_mb if outcome is not None else None
    if outcome is not None and outcome.oom_killed:
        return SandboxFailed(
            f"{what} ran out of memory at {limits.memory_mb} MB" + (f" (peak {peak:.0f} MB)" if peak else ""),
            kind="memory",
            peak_mb=peak,
            stderr=stderr,
        )
    if timed_out:
        return SandboxFailed(f"{what} timed out after {limits.wall_s:g} s", kind="time", peak_mb=peak, stderr=stderr)
    if returncode == -signal.SIGXCPU or (returncode == -signal.SIGKILL and cpu_s >= limits.cpu_limit_s - 1):
        return SandboxFailed(
            f"{what} reached its CPU time limit of {limits.cpu_limit_s} s", kind="cpu", peak_mb=peak, stderr=stderr
        )
    if grouped and returncode == ENTER_FAILED_EXIT:
        return SandboxFailed(f"{what} could not enter its cgroup", kind="start", stderr=stderr)
    if any(sign in stderr for sign in MEMORY_SIGNS):
        cap = limits.address_space_mb or limits.memory_mb
        return SandboxFailed(
            f"{what} ran out of memory at {cap} MB" + (f" ({tail})" if tail else ""),
            kind="memory",
            peak_mb=peak,
            stderr=stderr,
        )
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.Signals._value2member_map_ else -returncode
        return SandboxFailed(
            f"{what} was killed by signal {name}" + (f" ({tail})" if tail else ""),
            kind="signal",
            peak_mb=peak,
            stderr=stderr,
        )
    return SandboxFailed(f"{what} exited with {returncode}: {tail}", kind="error", peak_mb=peak, stderr=stderr)


def _wait(child: subprocess.Popen, timeout_s: float):
    """Wait for `child`, killing its process group at `timeout_s`: its wait status, its resource
    usage and whether it timed out."""
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)

    timer = threading.Timer(timeout_s, kill)
    timer.daemon = True
    timer.start()
    try:
        while True:
            try:
                _, status, usage = os.wait4(child.pid, 0)
                break
            except InterruptedError:
                continue
    finally:
        timer.cancel()
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    with contextlib.suppress(ProcessLookupError, PermissionError):  # what it left behind in its group
        os.killpg(child.pid, signal.SIGKILL)
    return status, usage, timed_out.is_set()


def call(
    target: str,
    kwargs: dict,
    limits: SandboxLimits,
    workspace: Workspace,
    *,
    raise_as: type[Exception] = SandboxFailed,
    on_progress: Callable[[str], None] | None = None,
    expected: tuple[str, ...] = (),
    what: str = "the sandboxed process",
    env_extra: dict | None = None,
):
    """`module:function(**kwargs)` in the sandbox; its JSON result. Any failure is raised as
    `raise_as(reason)`: the function's own exception (its message alone when its class is named
    in `expected`, else "Class: message"), or the child's death (`SandboxFailed`'s reasons).
    The function may report progress with `progress(message)` from this module."""
    spec = workspace.path / "call.json"
    spec.write_text(json.dumps({"target": target, "kwargs": kwargs, "result": str(workspace.path / RESULT_FILE)}))
    try:
        run(
            "measuring.sandbox", [str(spec)], limits, workspace, on_progress=on_progress, what=what, env_extra=env_extra
        )
        return json.loads(workspace.take(RESULT_FILE).read_text())["result"]
    except SandboxFailed as exc:
        error = _raised(workspace)
        if error is not None and error[0] == "MemoryError":
            cap = limits.address_space_mb or limits.memory_mb
            exc = SandboxFailed(f"{what} ran out of memory at {cap} MB", kind="memory", stderr=exc.stderr)
            error = None
        if error is not None:
            kind, message = error
            reason = message if kind in expected else f"{kind}: {message}"
            failure = raise_as(reason)
        else:
            failure = raise_as(exc.reason)
        if raise_as is SandboxFailed:
            failure = SandboxFailed(failure.args[0], kind=exc.kind, peak_mb=exc.peak_mb, stderr=exc.stderr)
            failure.error_type = error[0] if error else ""
        raise failure from None


def _raised(workspace: Workspace) -> tuple[str, str] | None:
    try:
        error = json.loads(workspace.take(RESULT_FILE).read_text()).get("error")
    except (SandboxFailed, OSError, ValueError):
        return None
    return (str(error["type"]), str(error["message"])) if error else None


def progress(message: str) -> None:
    """Inside a sandboxed call: tell the parent how far it got (`call(on_progress=...)`)."""
    print(f"{PROGRESS_MARK}{message.replace(chr(10), ' ')}", flush=True)


def _child(spec_path: str) -> None:
    """The child's side of `call`: import the target, call it, write its result or its error."""
    import importlib

    spec = json.loads(Path(spec_path).read_text())
    module, _, name = spec["target"].partition(":")
    try:
        result = {"result": getattr(importlib.import_module(module), name)(**spec["kwargs"])}
        code = 0
    except Exception as exc:  # the user's model: any failure is reported, whole
        result = {"error": {"type": type(exc).__name__, "message": str(exc).strip()[:4000]}}
        code = 3
    Path(spec["result"]).write_text(json.dumps(result))
    sys.stdout.flush()
    os._exit(code)  # no interpreter teardown: a model's native threads must not hang it


if __name__ == "__main__":
    _child(sys.argv[1])
