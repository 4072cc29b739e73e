"""Where a measurement runs: a child process of its own, confined to its memory size, one at a
time on this machine.

`measure(spec)` takes the machine's measurement lock, starts `measuring.measure`
inside a cgroup with the memory size's CPU share and memory cap (`confinement.py`), and
returns its report plus how it ran (confined or why not, vCPUs, threads, the machine's load).
A measurement that fails raises `MeasurementFailed` with a reason: "out of memory at N MB"
when the kernel killed it at its cap (or, unconfined, when its peak passed the memory size),
a crash, a timeout. Isolation lives here; the measuring code does not know about it.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import structlog

from core import measurement_lock
from measuring import host_speed, sandbox
from measuring.confinement import (
    ConfinementUnavailable,
    Limits,
    MeasurementGroup,
    unavailable_reason,
)
from measuring.environment import host_environment
from measuring.machine_load import LoadSample, host_cores, load_report
from schemas.documents import MeasurementReport
from schemas.lambda_limits import lambda_threads, lambda_vcpus
from schemas.reasons import from_traceback, whole

RESULT_MARKER = "@@RESULT@@"

log = structlog.get_logger()


class MeasurementFailed(Exception):
    def __init__(self, reason: str, peak_rss_mb: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.peak_rss_mb = peak_rss_mb


class MachineBusy(MeasurementFailed):
    """The machine's measurement lock stayed busy: measure again later (not a failure)."""


@dataclass
class MeasureSpec:
    optimizer: str
    workload: str
    artifact_path: Path
    reference_path: Path
    memory_mb: int
    time_cap_s: float = 12.0  # timing; warming up takes at most a quarter more: 15 s of overhead at most
    tuning_cap_s: float | None = None  # the cap the session search's budget follows (None: time_cap_s)
    min_iterations: int = 10
    timeout_s: float = 900.0
    confine: bool = True  # False: run unconfined (e.g. under emulation), and say so
    threads_override: int | None = None  # for experiments only (bench/): threads other than the vCPUs'
    engine_settings: dict | None = None  # the engine's session settings; None: tuned first where the engine can be
    tune: bool = True  # try the engine's session settings under this confinement first (ONNX Runtime)
    profile_runs: int = 20  # inferences of a profiled pass (`profile`)
    trace_max_events: int | None = None  # its trace's bound (None: `core.profiles.MAX_TRACE_EVENTS`)
    # agreements already judged in this run for this artifact: each {"threads", "settings", "agreement",
    # "divergence", "judged_in"}; one of the same threads and engine settings is taken, not judged again
    agreements: list[dict] = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    @property
    def vcpus(self) -> float:
        """Lambda gives about 1 vCPU per 1,769 MB, at most 6."""
        return lambda_vcpus(self.memory_mb)

    @property
    def threads(self) -> int:
        """Engine threads: the whole vCPUs, at least 1, at most this machine's cores. Never
        more threads than the quota can run at once: 2 threads squeezed into 0.5 vCPU gave
        ResNet-18 a p99 of 180 ms against 85 ms with one."""
        if self.threads_override:
            return self.threads_override
        return min(host_cores(), lambda_threads(self.memory_mb))


ONE_THREAD_FOR_ITS_SIZE = "one_thread_for_its_size"  # the report's mark: one unconfined thread, to be estimated


def engine_env_extra(env_extra: dict | None = None) -> dict:
    """What a process that runs an engine's artifact adds to the sandbox's environment
    (`sandbox.environment`: thread pools sized there): TVM's runtime library only."""
    return {"TVM_USE_RUNTIME_LIB": "1", **(env_extra or {})}


def measure(spec: MeasureSpec, python_command: list[str] | None = None, env_extra: dict | None = None) -> dict:
    """Run one measurement in a fresh, confined process; its report (see `measure.py`) plus
    the settings it ran under: `confined`, `confinement_reason`, `vcpus`, `threads`, `load`,
    `lock_wait_s`, `measurement_s`. Where this machine cannot confine (`_estimates`) it measures
    one unconfined thread and says so (`ONE_THREAD_FOR_ITS_SIZE`): the caller turns that into the
    memory size's estimate (`core/lambda_model/unconfined.apply_estimate`)."""
    with machine_lock(spec.timeout_s) as lock_wait_s:
        tuning = _tune(spec, python_command, env_extra)
        if tuning is not None:
            spec = replace(spec, engine_settings=tuning["settings"])
        group, confined, reason = _confinement_for(spec)
        estimated = _estimates(spec, confined)
        if estimated:  # no cgroups here: one thread, unconfined, each memory size derived from it
            spec = replace(spec, threads_override=1)
        known = known_agreement(spec)
        try:
            report = _run_child(spec, group, python_command, env_extra, agreement=known)
        finally:
            if group is not None:
                group.remove()
    if tuning is not None:
        report["engine_tuning"] = tuning
    available = host_cores()
    report.update(
        confined=confined,
        confinement_reason=reason,
        threads=spec.threads,
        vcpus=spec.vcpus,
        lock_wait_s=lock_wait_s,
        # Lambda would give this size more vCPUs than this host has: measured with fewer
        host_limited=spec.vcpus > available + 1e-9,
        vcpus_available=available,
        environment={**host_environment(), **report.pop("runtime", {})},
    )
    if estimated:  # what the caller makes of it is the Lambda model's (core/lambda_model/unconfined.py)
        report[ONE_THREAD_FOR_ITS_SIZE] = True
    return report


def known_agreement(spec: MeasureSpec) -> dict | None:
    """An agreement this run already judged for the same artifact at the same engine threads and session
    settings (`MeasureSpec.agreements`): the same computation on the same inputs (the outputs depend on the
    artifact, the inputs, the threads and the settings, not on the CPU share), so the measuring process
    takes it instead of running every reference batch again. None: it judges for itself."""
    for known in spec.agreements:
        if known.get("threads") == spec.threads and (known.get("settings") or None) == (spec.engine_settings or None):
            return known
    return None


def _estimates(spec: MeasureSpec, confined: bool) -> bool:
    """Whether this measurement is the unconfined estimate (`core/lambda_model/unconfined.py`): this
    machine cannot confine (no root, no cgroups: `unavailable_reason`), the measurement was not asked to
    run unconfined (emulation) and does not run inside a Lambda function, and no thread count was forced."""
    return (
        not confined
        and spec.confine
        and not spec.threads_override
        and not os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE")
        and unavailable_reason() is not None
    )


def profile(spec: MeasureSpec, python_command: list[str] | None = None, env_extra: dict | None = None) -> dict:
    """A profiled pass of a combination (`measure.py profile`), in the same confinement as its
    measurement and under the machine's measurement lock, never used as its timing: the
    engine's Chrome trace (`trace`), its operator calls, the unprofiled and profiled p50, and
    whether it was confined."""
    with machine_lock(spec.timeout_s):
        group, confined, reason = _confinement_for(spec)
        try:
            report = _run_child(spec, group, python_command, env_extra, mode="profile")
        finally:
            if group is not None:
                group.remove()
    return {**report, "confined": confined, "confinement_reason": reason, "threads": spec.threads}


def _tune(spec: MeasureSpec, python_command: list[str] | None, env_extra: dict | None) -> dict | None:
    """The engine's session settings tried in a confined process of their own (a fresh group:
    the measurement's peak memory is its own), or None where there is nothing to tune, the
    timings would not be real (unconfined, emulated) or the tuning process failed (then the
    measurement keeps the default settings and says why)."""
    if (
        not spec.tune
        or spec.engine_settings is not None
        or spec.optimizer not in ("onnx", "onnx_int8")
        or not spec.confine
    ):
        return None
    group, confined, _ = _confinement_for(spec)
    try:
        if not confined:
            return None
        return _run_child(spec, group, python_command, env_extra, mode="tune")
    except MeasurementFailed as exc:
        log.info("engine_tuning_failed", reason=exc.reason)
        return {"settings": None, "failed": exc.reason}
    finally:
        if group is not None:
            group.remove()


def _confinement_for(spec: MeasureSpec) -> tuple[MeasurementGroup | None, bool, str | None]:
    """The group to measure in (None: none), whether the measurement is confined to its
    memory size, and why not (or by what, when not by a group of ours)."""
    if not spec.confine:
        return None, False, spec.extra.get("unconfined_reason", "confinement turned off for this measurement")
    lambda_mb = os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE")
    if lambda_mb:  # inside a Lambda function: the platform confines, to the function's size
        if int(lambda_mb) == spec.memory_mb:
            return None, True, f"by the Lambda function itself ({lambda_mb} MB)"
        return None, False, f"this Lambda function has {lambda_mb} MB, not {spec.memory_mb} MB"
    group, reason = confined_group(Limits.for_memory(spec.memory_mb))
    return group, group is not None, reason


@contextlib.contextmanager
def machine_lock(timeout_s: float) -> Iterator[float]:
    """The machine's measurement lock, held exclusively: one measuring process at a time on this machine.
    Yields the seconds it waited; raises `MachineBusy` where it stayed busy for `timeout_s`."""
    try:
        with measurement_lock.exclusive(timeout_s=timeout_s) as waited:
            yield waited
    except measurement_lock.LockTimeout as exc:
        raise MachineBusy(str(exc)) from exc


def confined_group(limits: Limits) -> tuple[MeasurementGroup | None, str | None]:
    """A fresh cgroup of `limits` (the caller removes it), or None and why this machine cannot confine."""
    reason = unavailable_reason()
    if reason is None:
        try:
            return MeasurementGroup.create(limits), None
        except ConfinementUnavailable as exc:
            reason = str(exc)
    return None, reason


@dataclass
class ChildRun:
    """A measuring child that ran to its end: what it printed after `RESULT_MARKER`, its wall time from
    its spawn, the machine's load around it (`load`: `machine_load.load_report`) and the sandbox's account."""

    result: str
    wall_s: float
    load: dict
    finished: sandbox.Finished


def run_confined_child(
    module: str,
    args: list[str],
    limits: sandbox.SandboxLimits,
    workspace: sandbox.Workspace,
    group: MeasurementGroup | None,
    *,
    needed_cores: float,
    failure: Callable[[sandbox.SandboxFailed], MeasurementFailed],
    python: list[str] | None = None,
    env_extra: dict | None = None,
    what: str = "measuring process",
    with_spawn_time: bool = False,
    on_progress: Callable[[str], None] | None = None,
) -> ChildRun:
    """Run `python -m module args` in the sandbox (in `group` where there is one) with an engine's environment
    (`engine_env_extra`), to its result: the frame every measuring child shares (`_run_child`,
    `paired_measure.measure_pair`). The caller holds the machine's lock (`machine_lock`) and owns the group and
    the workspace. `with_spawn_time`: the child's last argument is the moment it was spawned (its cold start's
    process start, `measure.py`). A sandbox failure is raised as `failure` makes it; a child that printed no
    result raises `MeasurementFailed` with its traceback's gist. `on_progress`: the child's progress lines
    (`sandbox.run`), as they come."""
    speed_before = host_speed.probe_ms()  # before the load's window opens: its CPU is not other work's
    before = LoadSample.now()
    spawned_at = time.time()
    try:
        finished = sandbox.run(
            module,
            [*args, repr(spawned_at)] if with_spawn_time else args,
            limits,
            workspace,
            python=python,
            group=group,
            env_extra=engine_env_extra(env_extra),
            on_progress=on_progress,
            what=what,
        )
    except sandbox.SandboxFailed as exc:
        raise failure(exc) from None
    wall_s = time.time() - spawned_at
    after = LoadSample.now()
    speed_after = host_speed.probe_ms()
    if RESULT_MARKER not in finished.stdout:
        raise MeasurementFailed(f"{what} exited with 0: {from_traceback(finished.stderr)}")
    speeds = host_speed.SpeedLog()
    speeds.add(speed_before)
    speeds.add(speed_after)
    slowdown = host_speed.slowdown(speed_before, speed_after, speeds.reference_ms())
    return ChildRun(
        result=finished.stdout.rsplit(RESULT_MARKER, 1)[1],
        wall_s=wall_s,
        load=load_report(before, after, finished.cpu_s, needed_cores=needed_cores, host_slowdown=slowdown),
        finished=finished,
    )


def measuring_address_space_mb(memory_mb: int) -> int:
    """A measuring process's address-space limit: its cgroup caps what it uses; this caps what
    it may reserve (the libraries reserve far more than they touch), where there is no cgroup too."""
    return max(8192, 4 * memory_mb)


def _run_child(
    spec: MeasureSpec,
    group: MeasurementGroup | None,
    python_command: list[str] | None,
    env_extra: dict | None,
    mode: str = "measure",
    agreement: dict | None = None,
) -> dict:
    with sandbox.Workspace.create(prefix="measure-") as workspace:
        artifact = workspace.bring(spec.artifact_path)
        companion = Path(spec.artifact_path).with_suffix(".json")  # an AOTInductor package's call convention
        if companion.is_file():
            workspace.bring(companion)
        spec_path = workspace.path / "spec.json"
        # the agreement a measurement judges itself runs with its CPU quota lifted (`measure.quota_lifted`)
        lifting = mode == "measure" and group is not None and not agreement
        restored = workspace.path / QUOTA_RESTORED
        spec_path.write_text(
            json.dumps(
                {
                    "optimizer": spec.optimizer,
                    "workload": spec.workload,
                    "artifact_path": str(artifact),
                    "reference_path": str(workspace.bring(spec.reference_path, "reference.npz")),
                    "threads": spec.threads,
                    "time_cap_s": spec.time_cap_s,
                    "tuning_cap_s": spec.tuning_cap_s,  # None: the time cap (`measure.tuning_budget_s`)
                    "min_iterations": spec.min_iterations,
                    "mode": mode,
                    "settings": spec.engine_settings,
                    "profile_runs": spec.profile_runs,
                    "trace_max_events": spec.trace_max_events,
                    "trace_path": str(workspace.path / "trace.json"),
                    **({"known_agreement": agreement} if agreement else {}),
                    **(
                        {
                            "quota_lift": {
                                "mark": sandbox.PROGRESS_MARK,
                                "ack": str(restored),
                                "wait_s": QUOTA_RESTORE_WAIT_S,
                            }
                        }
                        if lifting
                        else {}
                    ),
                }
            )
        )
        limits = sandbox.SandboxLimits(
            wall_s=spec.timeout_s,
            # under qemu the emulator's own reservation would already pass any limit
            address_space_mb=None if python_command else measuring_address_space_mb(spec.memory_mb),
            threads=spec.threads,
        )
        child = run_confined_child(
            "measuring.measure",
            [str(spec_path)],
            limits,
            workspace,
            group,
            needed_cores=spec.vcpus if group is not None else spec.threads,
            failure=lambda exc: _measurement_failure(spec, exc),
            python=python_command,
            env_extra=env_extra,
            with_spawn_time=True,
            on_progress=_quota_switch(group, spec.vcpus, restored) if lifting else None,
        )
        trace = None
        if mode == "profile":
            try:
                trace = json.loads(workspace.take("trace.json").read_text())
            except (sandbox.SandboxFailed, ValueError):
                trace = None
    outcome = child.finished.outcome
    if mode == "tune":
        return json.loads(child.result)
    if mode == "profile":
        return {**json.loads(child.result), "trace": trace}
    try:  # the one place the measuring process's report is checked
        report = MeasurementReport.model_validate_json(child.result).model_dump(mode="json", exclude_unset=True)
    except ValueError as exc:
        raise MeasurementFailed(f"the measuring process's report does not fit the schema: {whole(exc)}") from exc
    if report["peak_rss_mb"] > spec.memory_mb:
        # A Lambda function whose resident memory passes its size dies. The cap alone may not
        # catch it: pages of libraries already cached are charged to whoever read them first.
        raise MeasurementFailed(
            f"out of memory at {spec.memory_mb} MB (peak {report['peak_rss_mb']:.0f} MB)", report["peak_rss_mb"]
        )
    report["measurement_s"] = child.wall_s
    report["load"] = child.load
    if outcome is not None:
        report["cgroup_peak_mb"] = outcome.peak_mb
        if outcome.periods:
            report["cpu_throttled_share"] = outcome.throttled_periods / outcome.periods
    return report


QUOTA_RESTORED = "quota-restored"  # the file that tells a measuring process its CPU quota is back
QUOTA_RESTORE_WAIT_S = 60.0  # how long a measuring process waits for it before it fails


def _quota_switch(group: MeasurementGroup, vcpus: float, restored: Path) -> Callable[[str], None]:
    """The measuring process's progress lines about its CPU quota (`measure.quota_lifted`): lift it for the
    agreement; restore it to `vcpus`, check the kernel has it and only then write `restored`, which the process
    waits for before its warm-up. A quota that cannot be restored is never acknowledged: the process fails."""

    def switch(message: str) -> None:
        if message == "quota:lift":
            try:
                group.set_cpu(None)
            except OSError as exc:  # the agreement is judged under the quota, only slower
                log.info("quota_not_lifted", reason=str(exc))
        elif message == "quota:restore":
            group.set_cpu(vcpus)
            expected = str(Limits(memory_mb=0, vcpus=vcpus).cpu_quota_us)
            if group.cpu_quota() != expected:
                raise MeasurementFailed(f"the CPU quota reads {group.cpu_quota()}, not {expected}")
            restored.write_text(expected)

    return switch


def _measurement_failure(spec: MeasureSpec, exc: sandbox.SandboxFailed) -> MeasurementFailed:
    """The sandbox's reason in a measurement's words."""
    if exc.kind == "memory":
        if exc.peak_mb:
            return MeasurementFailed(f"out of memory at {spec.memory_mb} MB (peak {exc.peak_mb:.0f} MB)", exc.peak_mb)
        tail = from_traceback(exc.stderr) if exc.stderr.strip() else ""
        return MeasurementFailed(f"out of memory at {spec.memory_mb} MB" + (f" ({tail})" if tail else ""))
    if exc.kind == "time":
        return MeasurementFailed(f"measurement timed out after {spec.timeout_s:.0f} s")
    if exc.kind == "start" and "cgroup" in exc.reason:
        return MeasurementFailed("the measuring process could not enter its cgroup")
    return MeasurementFailed(exc.reason)
