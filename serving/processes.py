"""The endpoint's side of a worker process (`worker.py`): started in the sandbox
(`measuring/sandbox.py`: its own workspace holding its artifact, an environment without
secrets, no network, an unprivileged user, an address-space limit) inside a cgroup with its
combination's memory size's CPU share and memory cap (`measuring/confinement.py`, as a
measurement is; the lowest CPU weight while it starts, an ordinary one once it is ready; where
cgroups are unavailable it runs unconfined and says so: `confined: false` with the reason), fed
one request at a time over a Unix socket, stopped by killing its process group and removing its
cgroup and workspace."""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import subprocess
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import structlog

from measuring import sandbox
from measuring.confinement import ConfinementUnavailable, Limits, MeasurementGroup, unavailable_reason
from measuring.launcher import engine_env_extra, measuring_address_space_mb
from schemas.reasons import from_traceback
from serving import wire
from serving.pool import InferenceFailed, WorkerLost

_numbers = itertools.count()
log = structlog.get_logger()


@dataclass(frozen=True)
class WorkerSpec:
    optimizer: str
    artifact_path: str
    threads: int
    memory_mb: int
    settings: dict | None = None  # the engine settings the measurement won with
    reference_path: str | None = None  # inputs run once before the worker says it is ready
    confine: bool = True


# A worker's CPU weight: an ordinary process's (v1 cpu.shares 1024, v2 cpu.weight 100), not a
# measurement's (256 times that, `measuring/confinement.py`). With a measurement's weight, workers
# cold-starting together (their quotas adding to more than the host's cores) took nearly all the
# CPU from the endpoint's own front end and the load generator, which run at an ordinary weight:
# the event loop stalled 0.3-0.9 s per burst of 4 starts on a quiet 2-core host, seconds on a
# loaded one (`bench/bench_traffic_truth.py`, docs/benchmarks.md). On Lambda neither the front end
# nor other instances share an instance's CPU; here the quota still caps each worker at its size's
# vCPUs and the front end keeps a fair share when the cores are short.
WORKER_CPU_SHARES = 1024
WORKER_CPU_WEIGHT = 100
# A starting worker's CPU weight, until it is ready: the lowest there is (v1 cpu.shares 2, v2 cpu.weight 1,
# and the group's `cpu.idle` where the kernel has it: SCHED_IDLE against its siblings). A start (the Python
# imports, ONNX Runtime's import and session, the first answer: 0.3-0.6 s of CPU) otherwise took its share of
# the cores from the warm workers, the endpoint's front end and the load generator at that moment: in a spiky
# burst on this 2-core host, the warm requests beside a start waited 50-120 ms in the front end and 20-60 ms
# in the queue (p50 5 ms) (`bench/bench_traffic_truth.py`, docs/benchmarks.md). On Lambda a cold start does
# not slow the instances already warm. The start is still timed from its beginning to ready (a busy host
# makes it longer, and the load test feeds the simulation the starts the pool really took).
STARTING_CPU_SHARES = 2
STARTING_CPU_WEIGHT = 1


def _set_weight(group: MeasurementGroup, starting: bool) -> None:
    """The group's CPU weight: a starting worker's (the lowest, idle where the kernel says so) or a
    ready one's (an ordinary process's). `OSError` if the weight cannot be written."""
    idle = group.cpu_dir / "cpu.idle"
    if not starting and idle.exists():  # out of idle first: an idle group's weight cannot be written
        idle.write_text("0")
    if group.hierarchy.version == 2:
        (group.cpu_dir / "cpu.weight").write_text(str(STARTING_CPU_WEIGHT if starting else WORKER_CPU_WEIGHT))
    else:
        (group.cpu_dir / "cpu.shares").write_text(str(STARTING_CPU_SHARES if starting else WORKER_CPU_SHARES))
    if starting and idle.exists():
        with contextlib.suppress(OSError):  # a kernel that refuses it: the lowest weight alone then
            idle.write_text("1")


def confinement(memory_mb: int, confine: bool = True) -> tuple[MeasurementGroup | None, str | None]:
    """A cgroup for one worker (its size's CPU quota and memory cap, a starting worker's CPU weight:
    `ready_weight` gives it an ordinary one once it is ready), or None and why there is none."""
    if not confine:
        return None, "confinement turned off"
    reason = unavailable_reason()
    if reason is None:
        try:
            group = MeasurementGroup.create(Limits.for_memory(memory_mb))
        except ConfinementUnavailable as exc:
            reason = str(exc)
        else:
            try:
                _set_weight(group, starting=True)
            except OSError as exc:
                group.remove()
                return None, f"cannot set the worker's CPU weight: {exc}"
            return group, None
    return None, reason


def ready_weight(group: MeasurementGroup | None) -> None:
    """A ready worker's CPU weight (an ordinary process's) on its group."""
    if group is not None:
        _set_weight(group, starting=False)


class ProcessWorker:
    def __init__(
        self,
        spec: WorkerSpec,
        child: subprocess.Popen,
        sock: socket.socket,
        group: MeasurementGroup | None,
        confinement_reason: str | None,
        workspace: sandbox.Workspace,
        load_ms: float,
        request_timeout_s: float,
    ) -> None:
        self.spec = spec
        self.pid = child.pid
        self.load_ms = load_ms
        self.confined = group is not None
        self.confinement_reason = confinement_reason
        self.request_timeout_s = request_timeout_s
        self._child, self._sock, self._group, self._workspace = child, sock, group, workspace
        self._work = workspace.path
        self._stopped = False
        self.steps: dict[str, float] = {}

    @classmethod
    def start(
        cls, spec: WorkerSpec, work_dir: Path, load_timeout_s: float = 300.0, request_timeout_s: float = 60.0
    ) -> ProcessWorker:
        """Start a worker and wait until it has loaded its model; `RuntimeError` with the
        reason (out of memory at its cap, a crash with its error, a timeout) if it does not.
        Its files live in a sandbox workspace of its own (`work_dir` is not used for them: a
        folder of the endpoint's is not one its unprivileged user may enter)."""
        begun = time.monotonic()
        workspace = sandbox.Workspace.make(prefix=f"w{next(_numbers)}-", parent=None)
        work = workspace.path
        spec = replace(
            spec,
            artifact_path=str(workspace.bring(Path(spec.artifact_path))),
            reference_path=str(workspace.bring(Path(spec.reference_path), "reference.npz"))
            if spec.reference_path
            else None,
        )
        (work / "spec.json").write_text(json.dumps(asdict(spec)))
        address = str(work / "s")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(address)
        workspace.own(Path(address))  # the worker's user connects to it
        listener.listen(1)
        listener.settimeout(0.2)
        prepared = time.monotonic()
        group, reason = confinement(spec.memory_mb, spec.confine)
        grouped = time.monotonic()
        stderr = open(work / "stderr", "w+")  # noqa: SIM115  (closed once the worker is ready)
        limits = sandbox.SandboxLimits(
            wall_s=load_timeout_s,  # the CPU-time backstop only: a worker lives as long as the endpoint keeps it
            cpu_s=10**7,
            address_space_mb=measuring_address_space_mb(spec.memory_mb),
            threads=spec.threads,
        )
        child = sandbox.start(
            "serving.worker",
            [address, str(work / "spec.json")],
            limits,
            workspace,
            group=group,
            env_extra=engine_env_extra(),
            stderr=stderr,
        )
        started = time.monotonic()
        worker = cls(spec, child, listener, group, reason, workspace, 0.0, request_timeout_s)
        try:
            sock = worker._accept(listener, started + load_timeout_s)
            connected = time.monotonic()
            worker._sock = sock
            sock.settimeout(max(1.0, started + load_timeout_s - time.monotonic()))
            kind, body = wire.receive(sock)
            if kind != wire.READY:
                raise ConnectionError(f"unexpected frame {kind!r}")
        except (OSError, ConnectionError, TimeoutError) as exc:
            why = worker._death(exc)
            worker.stop()
            raise RuntimeError(why) from None
        finally:
            listener.close()
            stderr.close()
        ready = json.loads(body)
        try:
            ready_weight(group)
        except OSError as exc:
            worker.stop()
            raise RuntimeError(f"worker {worker.pid}: cannot set its CPU weight once ready: {exc}") from None
        worker.load_ms = ready["load_ms"]
        # where a start's time went (ms): the endpoint's steps, then the worker's own (`worker.py`)
        worker.steps = {
            "workspace": (prepared - begun) * 1000,
            "cgroup": (grouped - prepared) * 1000,
            "spawn": (started - grouped) * 1000,
            "until_connected": (connected - started) * 1000,
            "until_ready": (time.monotonic() - connected) * 1000,
            **{f"worker_{k}": v for k, v in ready.get("steps", {}).items()},
        }
        log.info("worker_started", pid=worker.pid, **{k: round(v, 1) for k, v in worker.steps.items()})
        sock.settimeout(request_timeout_s)
        return worker

    def _accept(self, listener: socket.socket, deadline: float) -> socket.socket:
        while True:
            try:
                sock, _ = listener.accept()
                return sock
            except TimeoutError:
                if self._child.poll() is not None:
                    raise ConnectionError("the worker exited before connecting") from None
                if time.monotonic() > deadline:
                    raise TimeoutError("the worker did not connect in time") from None

    def _death(self, exc: BaseException) -> str:
        """Why the worker is gone: out of memory at its cap, its exit and last error, or `exc`."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._child.wait(timeout=2)
        if self._group is not None and self._group.outcome().oom_killed:
            return f"out of memory at {self.spec.memory_mb} MB"
        code = self._child.poll()
        if code is None:
            return f"worker {self.pid}: {exc}"
        tail = from_traceback((self._work / "stderr").read_text()) if (self._work / "stderr").exists() else ""
        killed = f"killed by signal {-code}" if code < 0 else f"exited with {code}"
        return f"worker {self.pid} {killed}" + (f": {tail}" if tail else "")

    def infer(self, payload: bytes) -> bytes:
        try:
            wire.send(self._sock, wire.INFER, payload)
            kind, body = wire.receive(self._sock)
        except TimeoutError:
            self.stop()
            raise WorkerLost(f"worker {self.pid} did not answer within {self.request_timeout_s:g} s") from None
        except (OSError, ConnectionError) as exc:
            raise WorkerLost(self._death(exc)) from None
        if kind == wire.ERROR:
            raise InferenceFailed(body.decode(errors="replace"))
        return body

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        with contextlib.suppress(OSError):
            self._sock.close()
        sandbox.stop(self._child)
        if self._group is not None:
            self._group.remove()
        self._workspace.remove()
