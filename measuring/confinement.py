"""Confining one measuring process to a Lambda memory size, through the kernel's cgroups.

A Lambda function of M MB gets M/1,769 vCPUs of CPU time (6 at most) and dies when it uses
more than M MB. `MeasurementGroup.create(limits)` makes one cgroup per measurement with
exactly that: a CPU quota of `vcpus` cores (cgroup v2 `cpu.max`, v1 `cpu.cfs_quota_us`) and
a hard memory cap with no swap (v2 `memory.max` + `memory.swap.max`, v1
`memory.limit_in_bytes` + `memory.memsw.limit_in_bytes`), and the highest CPU weight, so other
work on the machine yields to it within its quota. The measuring process enters it
before it runs a line of Python (`wrap(command)` starts it through `/bin/sh`, which writes
its own pid into the group and then `exec`s the command), so the interpreter's start, the
imports and everything after run confined. Afterwards `outcome()` says whether the kernel
killed it for memory and its peak, and `remove()` deletes the group.

Groups nest under this process's own cgroup (v1), or next to it (v2, whose rule "no
processes in a group that hands controllers to its children" forbids nesting under a group
with processes), so confinement never lifts a limit the machine already set.

Where it is not possible (no cpu or memory controller, not root, a read-only hierarchy),
`unavailable_reason()` says why; the launcher then measures unconfined and says so.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from schemas.lambda_limits import CPU_PERIOD_US, MB_PER_VCPU, lambda_vcpus

MIN_CPU_QUOTA_US = 1_000  # the kernel's floor for a CFS quota
# The measurement's weight against other work on the machine (v1 cpu.shares' and v2
# cpu.weight's maximum): within its quota it runs first, as it would on a Lambda host.
V1_CPU_SHARES = 262_144
V2_CPU_WEIGHT = 10_000
ENTER_FAILED_EXIT = 97  # the wrapper's exit status when it could not enter the group

_names = itertools.count()


class ConfinementUnavailable(Exception):
    """Cgroups cannot confine a measurement here; the message says why."""


@dataclass(frozen=True)
class Limits:
    memory_mb: int
    vcpus: float

    @classmethod
    def for_memory(cls, memory_mb: int) -> Limits:
        return cls(memory_mb=memory_mb, vcpus=lambda_vcpus(memory_mb))

    @property
    def memory_bytes(self) -> int:
        return self.memory_mb * 1024 * 1024

    @property
    def cpu_quota_us(self) -> int:
        return max(MIN_CPU_QUOTA_US, round(self.vcpus * CPU_PERIOD_US))


@dataclass(frozen=True)
class Outcome:
    """What the kernel saw of one confined process."""

    oom_killed: bool
    peak_mb: float | None  # the group's peak memory (RSS + page cache), if the kernel reports it
    throttled_periods: int | None = None  # CFS periods in which the quota ran out
    periods: int | None = None


@dataclass(frozen=True)
class Hierarchy:
    """Where this machine's cgroups are: v2 (one directory for both controllers) or v1 (one
    per controller). `cpu_parent`/`memory_parent` are where measurement groups are created."""

    version: int
    cpu_parent: Path
    memory_parent: Path


def _read_mounts(mountinfo: Path) -> list[tuple[str, Path, str, set[str]]]:
    """(root inside the hierarchy, mount point, fs type, super options) of cgroup mounts."""
    mounts = []
    for line in mountinfo.read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        mounts.append((fields[3], Path(fields[4].replace("\\040", " ")), tail[0], set(tail[2].split(","))))
    return mounts


def _own_groups(proc_cgroup: Path) -> dict[str, str]:
    """This process's cgroup path per v1 controller, and under "" its v2 path."""
    groups = {}
    for line in proc_cgroup.read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            groups[controller] = path
    return groups


def _inside(mount_point: Path, mount_root: str, group: str) -> Path:
    relative = os.path.relpath(group, mount_root) if group.startswith(mount_root) else group.lstrip("/")
    return mount_point if relative in (".", "") else mount_point / relative


def find_hierarchy(proc: Path = Path("/proc/self")) -> Hierarchy:
    """The cgroup hierarchy measurement groups go in; `ConfinementUnavailable` if none has
    both the cpu and the memory controller."""
    mounts = _read_mounts(proc / "mountinfo")
    own = _own_groups(proc / "cgroup")
    for root, point, fstype, _ in mounts:
        if fstype != "cgroup2" or "" not in own:
            continue
        controllers = (
            set((point / "cgroup.controllers").read_text().split())
            if (point / "cgroup.controllers").exists()
            else set()
        )
        if {"cpu", "memory"} <= controllers:
            mine = _inside(point, root, own[""])
            # a group with processes cannot hand controllers down: use the one above it
            parent = mine if mine == point else mine.parent
            return Hierarchy(version=2, cpu_parent=parent / "ayci-measure", memory_parent=parent / "ayci-measure")
    cpu = next(((r, p) for r, p, t, o in mounts if t == "cgroup" and "cpu" in o), None)
    memory = next(((r, p) for r, p, t, o in mounts if t == "cgroup" and "memory" in o), None)
    if cpu and memory:
        return Hierarchy(
            version=1,
            cpu_parent=_inside(cpu[1], cpu[0], own.get("cpu", "/")),
            memory_parent=_inside(memory[1], memory[0], own.get("memory", "/")),
        )
    return _unavailable("no cgroup hierarchy with both the cpu and the memory controller is mounted")


def _unavailable(reason: str):
    raise ConfinementUnavailable(reason)


def _write(path: Path, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(value)


def _read_keyed(path: Path) -> dict[str, int]:
    """A `key value` per line file (memory.events, cpu.stat, memory.oom_control)."""
    try:
        pairs = (line.split() for line in path.read_text().splitlines())
        return {p[0]: int(p[1]) for p in pairs if len(p) == 2 and p[1].lstrip("-").isdigit()}
    except OSError:
        return {}


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class MeasurementGroup:
    """One measurement's cgroup (one directory on v2, one per controller on v1)."""

    def __init__(self, hierarchy: Hierarchy, name: str) -> None:
        self.hierarchy = hierarchy
        self.name = name
        self.cpu_dir = hierarchy.cpu_parent / name
        self.memory_dir = hierarchy.memory_parent / name

    @property
    def dirs(self) -> list[Path]:
        return [self.cpu_dir] if self.cpu_dir == self.memory_dir else [self.cpu_dir, self.memory_dir]

    @classmethod
    def create(cls, limits: Limits, hierarchy: Hierarchy | None = None) -> MeasurementGroup:
        """A new group confined to `limits`; `ConfinementUnavailable` if it cannot be made."""
        hierarchy = hierarchy or find_hierarchy()
        _remove_stale_groups(hierarchy)
        group = cls(hierarchy, f"m-{os.getpid()}-{next(_names)}")
        try:
            if hierarchy.version == 2:
                group._create_v2(limits)
            else:
                group._create_v1(limits)
        except OSError as exc:
            group.remove()
            why = "not root" if exc.errno in (errno.EACCES, errno.EPERM) and os.geteuid() != 0 else exc.strerror
            raise ConfinementUnavailable(
                f"cannot set up cgroup v{hierarchy.version} {exc.filename or ''}: {why}"
            ) from exc
        return group

    def _create_v2(self, limits: Limits) -> None:
        parent = self.cpu_dir.parent
        for level in (parent.parent, parent):
            if level == parent:
                level.mkdir(exist_ok=True)
            enabled = set((level / "cgroup.subtree_control").read_text().split())
            missing = {"cpu", "memory"} - enabled
            if missing:
                _write(level / "cgroup.subtree_control", " ".join(f"+{c}" for c in sorted(missing)))
        self.cpu_dir.mkdir()
        for weighted in (parent, self.cpu_dir):
            _write(weighted / "cpu.weight", str(V2_CPU_WEIGHT))
        _write(self.cpu_dir / "cpu.max", f"{limits.cpu_quota_us} {CPU_PERIOD_US}")
        _write(self.cpu_dir / "memory.max", str(limits.memory_bytes))
        if (self.cpu_dir / "memory.swap.max").exists():
            _write(self.cpu_dir / "memory.swap.max", "0")

    def _create_v1(self, limits: Limits) -> None:
        self.cpu_dir.mkdir()
        _write(self.cpu_dir / "cpu.cfs_period_us", str(CPU_PERIOD_US))
        _write(self.cpu_dir / "cpu.cfs_quota_us", str(limits.cpu_quota_us))
        _write(self.cpu_dir / "cpu.shares", str(V1_CPU_SHARES))
        self.memory_dir.mkdir()
        _write(self.memory_dir / "memory.limit_in_bytes", str(limits.memory_bytes))
        if (self.memory_dir / "memory.memsw.limit_in_bytes").exists():  # no swapping past the cap
            _write(self.memory_dir / "memory.memsw.limit_in_bytes", str(limits.memory_bytes))

    def set_cpu(self, vcpus: float | None) -> None:
        """Set the group's CPU quota to `vcpus` cores, or lift it (None) while its process does work whose
        result does not depend on its CPU share (`launcher`: judging agreement). Raises `OSError`."""
        quota = "max" if vcpus is None else str(Limits(memory_mb=0, vcpus=vcpus).cpu_quota_us)
        if self.hierarchy.version == 2:
            _write(self.cpu_dir / "cpu.max", f"{quota} {CPU_PERIOD_US}")
        else:
            _write(self.cpu_dir / "cpu.cfs_quota_us", "-1" if vcpus is None else quota)

    def cpu_quota(self) -> str:
        """The group's CPU quota as the kernel has it (v2 `cpu.max`'s quota, v1 `cpu.cfs_quota_us`)."""
        if self.hierarchy.version == 2:
            return (self.cpu_dir / "cpu.max").read_text().split()[0]
        return (self.cpu_dir / "cpu.cfs_quota_us").read_text().strip()

    def wrap(self, command: list[str]) -> list[str]:
        """`command`, started so that it runs inside this group from its first instruction."""
        procs = [str(d / "cgroup.procs") for d in self.dirs]
        script = (
            f'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit {ENTER_FAILED_EXIT}; '
            'shift; n=$((n-1)); done; exec "$@"'
        )
        return ["/bin/sh", "-c", script, "ayci-confine", str(len(procs)), *procs, *command]

    def outcome(self) -> Outcome:
        if self.hierarchy.version == 2:
            events = _read_keyed(self.memory_dir / "memory.events")
            peak = _read_int(self.memory_dir / "memory.peak")
            cpu = _read_keyed(self.cpu_dir / "cpu.stat")
            oom = events.get("oom_kill", 0) > 0
        else:
            control = _read_keyed(self.memory_dir / "memory.oom_control")
            peak = _read_int(self.memory_dir / "memory.max_usage_in_bytes")
            cpu = _read_keyed(self.cpu_dir / "cpu.stat")
            oom = control.get("oom_kill", 0) > 0
        return Outcome(
            oom_killed=oom,
            peak_mb=peak / 2**20 if peak is not None else None,
            throttled_periods=cpu.get("nr_throttled"),
            periods=cpu.get("nr_periods"),
        )

    def remove(self) -> None:
        """Kill whatever is left in the group and delete it (best effort, never raises)."""
        for directory in self.dirs:
            for _ in range(50):
                if not directory.exists():
                    break
                try:
                    directory.rmdir()
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY:
                        break
                    for pid in (directory / "cgroup.procs").read_text().split():
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(int(pid), signal.SIGKILL)
                    time.sleep(0.02)


def _remove_stale_groups(hierarchy: Hierarchy) -> None:
    """Delete the empty groups a launcher that died left behind (named after its pid), so no
    hierarchy keeps children it does not know about."""
    for parent in {hierarchy.cpu_parent, hierarchy.memory_parent}:
        try:
            stale = [d for d in parent.glob("m-*-*") if d.is_dir() and not _alive(int(d.name.split("-")[1]))]
        except (OSError, ValueError):
            continue
        for directory in stale:
            with contextlib.suppress(OSError):
                directory.rmdir()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@functools.cache
def unavailable_reason() -> str | None:
    """Why measurements cannot be confined on this machine, or None when they can (checked
    once per process by creating and removing a group)."""
    try:
        MeasurementGroup.create(Limits.for_memory(MB_PER_VCPU)).remove()
    except ConfinementUnavailable as exc:
        return str(exc)
    except OSError as exc:  # an unreadable /proc or hierarchy
        return f"cannot read the cgroup hierarchy: {exc}"
    return None
