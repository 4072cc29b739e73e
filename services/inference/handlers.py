"""Inference: measures one converted combination under its memory size and stores the result
(`results/{combo key}/{run id}.json`, `core/results.py`). A measurement that fails (out of memory, crash, timeout) is
that combination's failure; the run goes on.

Where it measures: here, in a confined child process (`launcher.py`), unless the deployment has
measuring Lambda functions (`deps.functions`, AWS: `AYCI_MEASURE_FUNCTION_INTEL` / `_ARM`): then
the combination is measured inside a function of its memory size and architecture
(`adapters/lambda_sizes.py`, `measuring_function.py`).

When the run's request asks (`profile`), or on `ProfileRequested`, a profiled pass of the
measured combination follows, confined alike (`profiling.py`); a profile that fails is logged,
never the combination's failure."""

from __future__ import annotations

import dataclasses
import functools
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import structlog

from core.ports import MeasurementRefused, MeasuringFunctions, NotFound, ObjectStore
from core.racing import QUICK_TIME_CAP_SHARE, converged_in_quick_pass, searched_as_in_full
from core.results import QUICK_SUFFIX, keep_result, stored_plan
from core.runtime import Delayed
from engines.targets import native_hardware
from measuring.launcher import ONE_THREAD_FOR_ITS_SIZE, MachineBusy, MeasurementFailed, MeasureSpec, measure
from schemas import keys
from schemas.combos import MEASUREMENT_VERSION, Hardware, reference_key
from schemas.cost import Cost, cost_block
from schemas.cost import default_region as default_price_region
from schemas.documents import ArtifactManifest, MeasuredResult, RunRecord
from schemas.events import (
    ComboFailed,
    Envelope,
    FailureStage,
    ModelConverted,
    Payload,
    ProfileRequested,
    RunPlanned,
    SchemaError,
)
from schemas.measuring import MeasureRequest
from services.inference.profiling import PROFILE_TIME_CAP_S, profile_result

log = structlog.get_logger()


@dataclass
class InferenceDeps:
    store: ObjectStore
    time_cap_s: float = 12.0  # warm iterations, per combination
    # the cap the session search's budget follows (None: `time_cap_s`): a quick pass searches as a full one does
    tuning_cap_s: float | None = None
    min_iterations: int = 10
    busy_retry_s: float = 60.0  # when the machine's measurement lock stays busy, try again after this
    disturbed_retry_s: float = 90.0  # a disturbed measurement is measured again after this (`measure_again_later`)
    measure: Callable[..., dict] = measure
    profile: Callable[..., object] = profile_result  # a profiled pass of a stored result (`profiling.profile_result`)
    work_dir: Path | None = None
    # how this worker runs code of a hardware: (python command, emulated) or None if it cannot
    runtime_for: Callable[[Hardware], tuple[list[str], bool] | None] = lambda hardware: native_runtime(hardware)
    # the measuring Lambda functions of this deployment (None: measure here, as locally)
    functions: MeasuringFunctions | None = None


def native_runtime(hardware: Hardware) -> tuple[list[str], bool] | None:
    """This machine's own Python for its own architecture; for arm on an x86 machine, the
    aarch64 Python under qemu (emulated: agreement is real, timings are not) if it is set up."""
    if hardware == native_hardware():
        return [sys.executable], False
    if hardware == Hardware.arm and _arm_emulation()[0]:
        from engines.arm_emulation import arm_python_command

        return arm_python_command(), True
    return None


@functools.cache
def _arm_emulation() -> tuple[bool, str]:
    from engines.arm_emulation import arm_available

    available, reason = arm_available()
    if not available:
        log.warning("arm_emulation_unavailable", reason=reason)
    return available, reason


def on_model_converted(event: Envelope, deps: InferenceDeps) -> list[Payload | Delayed]:
    converted: ModelConverted = event.payload
    bound = log.bind(run_id=event.run_id, combo_key=converted.combo_key, combo=converted.combo.label)
    if deps.store.exists(keys.summary(event.run_id)):  # the run is over (cancelled, or closed at its deadline)
        log.info("skipped_run_ended", run_id=event.run_id, combo_key=converted.combo_key)
        return []
    # a racing run's first pass is quick (a quarter of the timing); its refinement is exact
    plan = stored_plan(deps.store, event.run_id)
    racing = _run_precision(deps.store, plan, event.run_id, converted.combo_key) == "quick"
    quick = racing and not converted.refine
    if quick:
        # its samples a quarter of the time, its session search a full one's: settings a refinement would search
        # again are a refinement spent on settings alone (`core.racing.kept_quick`)
        deps = dataclasses.replace(
            deps, time_cap_s=deps.time_cap_s * QUICK_TIME_CAP_SHARE, tuning_cap_s=deps.time_cap_s
        )
    # a racing run judges each artifact's agreement once per threads and settings (`launcher.known_agreement`)
    agreements = judged_agreements(deps.store, plan, event.run_id, converted) if racing and plan else []
    outcome = _measure(event, deps, bound, agreements, quick)
    if not isinstance(outcome, list):
        outcome = measure_again_later(converted, outcome[0], deps, bound, quick) or _measured(
            event, outcome, deps, bound, quick
        )
    # a failed refinement is the refinement's end: the quick figures stand
    return [
        p.model_copy(update={"refine": True}) if isinstance(p, ComboFailed) and converted.refine else p for p in outcome
    ]


# A disturbed measurement (other work took cores it needed, or the host ran slow: `measuring/machine_load.py`) is
# measured again this many times, `InferenceDeps.disturbed_retry_s` apart: a slowdown from outside the machine
# lasted minutes (`measuring/host_speed.py`). The last one is kept, disturbed, and never recommended.
DISTURBED_MEASURED_AGAIN = 2


def measure_again_later(
    converted: ModelConverted, report: dict, deps: InferenceDeps, bound, quick: bool
) -> list[Delayed] | None:
    """The measurement again later, if `report` was disturbed and its tries are not spent (None: keep it). A
    racing run's quick pass keeps its disturbed measurements: the race measures them again after the pass
    (`services/archiver/racing.py race_figures`)."""
    load = report.get("load") or {}
    if quick or not load.get("disturbed") or converted.measured_again >= DISTURBED_MEASURED_AGAIN:
        return None
    bound.info(
        "measurement_disturbed_measured_again_later",
        other_busy_cores=load.get("other_busy_cores"),
        host_slowdown=load.get("host_slowdown"),
        retry_s=deps.disturbed_retry_s,
        measured_again=converted.measured_again + 1,
    )
    again = converted.model_copy(update={"measured_again": converted.measured_again + 1})
    return [Delayed(again, datetime.now(UTC) + timedelta(seconds=deps.disturbed_retry_s))]


def _measure(event: Envelope, deps: InferenceDeps, bound, agreements: list[dict], quick: bool = False) -> tuple | list:
    """(report, emulated), or what to emit instead (a failure, a retry later)."""
    converted: ModelConverted = event.payload
    if deps.functions is not None and deps.functions.serves(converted.combo.hardware.value):
        outcome = _measure_in_function(event, deps.functions, deps, bound)
        emulated = False
    else:
        outcome, emulated = _measure_here(converted, deps, bound, agreements, quick)
    return outcome if isinstance(outcome, list) else (outcome, emulated)


def _measured(event: Envelope, measured: tuple[dict, bool], deps: InferenceDeps, bound, quick: bool) -> list[Payload]:
    """Keep a measurement's result; its `InferenceDone`."""
    converted: ModelConverted = event.payload
    combo, model = converted.combo, converted.model
    report, emulated = measured
    rough = quick and not converged_in_quick_pass(report)
    if quick and not rough:
        bound.info("measurement_converged_in_quick_pass", iterations=report["latency_ms"].get("iterations"))
    result = MeasuredResult.model_validate(
        {
            "combo_key": converted.combo_key,
            "combo": combo,
            "model": model,
            "measurement_version": MEASUREMENT_VERSION,
            "measured_at": datetime.now(UTC).isoformat(),
            "run_id": event.run_id,
            "conversion_s": converted.conversion_s,
            "tuning_s": converted.tuning_s,
            "artifact_key": converted.artifact_key,
            "conversion": _conversion_details(deps.store, converted.artifact_key),
            "emulated": emulated,
            **report,
            # a size measured with fewer vCPUs than Lambda gives it is never costed as if it were that size
            "cost": None
            if emulated or report.get("host_limited")
            else result_cost(report, combo, default_price_region()),
            # rough figures of a racing run's first pass: kept apart, never reused (core/results.py); one that
            # converged before the quick cap is a full measurement (`converged_in_quick_pass`)
            **({"precision": "quick"} if rough else {}),
        }
    )
    if not result.confined:
        bound.info("measurement_unconfined", reason=result.confinement_reason)
    if result.host_limited:
        bound.info(
            "measurement_host_limited", vcpus_needed=round(result.vcpus or 0, 2), vcpus_available=result.vcpus_available
        )
    if result.load is not None and result.load.disturbed:
        bound.info(
            "measurement_disturbed",
            other_busy_cores=round(result.load.other_busy_cores or 0.0, 2),
            host_slowdown=result.load.host_slowdown,
            reason=result.load.disturbance,
        )
    lat = result.latency_ms
    bound.info("measurement_done", p50_ms=round(lat.p50, 2), p99_ms=round(lat.p99, 2), iterations=lat.iterations)
    # a quick result is profiled too (racing may stop it there); a refined one's profile replaces it
    if not emulated and _asks_profile(deps.store, event.run_id) and _profile(deps, result.to_dict(), bound):
        result.profile_key = keys.profile(
            result.combo_key, result.run_id
        )  # the result names its profile (which names its trace)
    key = keep_result(deps.store, result)
    done = result.inference_done(result_key=key, reused=False)
    # the pass that measured it (the result's own `precision` says whether its figures are rough)
    return [done.model_copy(update={"refine": converted.refine, "precision": "quick" if quick else "exact"})]


def judged_agreements(store: ObjectStore, plan: RunPlanned, run_id: str, converted: ModelConverted) -> list[dict]:
    """The agreements this run has judged so far for `converted`'s artifact (its other memory sizes, and
    its own quick pass for a refinement): each with the engine threads and settings it was judged at,
    for `launcher.known_agreement`. Only the plan's combinations of the same optimizer, hardware and batch
    are read (an artifact serves the memory sizes of one of those)."""
    combo, found = converted.combo, []
    for key, other in plan.combos.items():
        if (other.optimizer, other.hardware, other.batch_size) != (combo.optimizer, combo.hardware, combo.batch_size):
            continue
        for version in (f"{run_id}{QUICK_SUFFIX}", run_id):
            try:
                result = MeasuredResult.read(store.get_bytes(keys.result_version(key, version))).to_dict()
            except (NotFound, SchemaError):
                continue
            if result.get("artifact_key") != converted.artifact_key or result.get("emulated"):
                continue
            agreement = dict(result.get("agreement") or {})
            judged_in = (
                agreement.pop("judged_in", None) or f"{other.label} ({'quick pass' if version != run_id else 'exact'})"
            )
            tuning = result.get("engine_tuning") or {}
            found.append(
                {
                    "threads": result.get("threads"),
                    "settings": result.get("engine_settings") or None,
                    "agreement": agreement,
                    "divergence": result.get("divergence"),
                    "judged_in": judged_in,
                    "quick": version != run_id,
                    # where its session settings were tuned (None: not tuned, e.g. an engine without settings)
                    "tuned_at": tuning.get("tuned_at") or (other.label if tuning.get("settings") else None),
                    "searched_in_full": searched_as_in_full(tuning),
                }
            )
    return found


def quick_pass_settings(spec: MeasureSpec, agreements: list[dict]) -> dict | None:
    """In a racing run's quick pass, the session settings this run's quick pass already tuned for the same
    artifact at one engine thread, for another memory size at one thread (`judged_agreements`: its settings
    and where they were tuned); None: the launcher tunes (`launcher._tune`). One thread waits on no other, so
    a CPU quota slows every candidate alike and their ranking is the same at 512 as at 1769 MB; with more
    threads the quota changes how they contend, and each size tunes for itself. The refinement (a
    contender measured to full precision) always tunes at its own size."""
    if spec.threads != 1 or spec.engine_settings is not None or not spec.tune:
        return None
    for known in agreements:
        if known.get("quick") and known.get("threads") == 1 and known.get("settings") and known.get("tuned_at"):
            return known
    return None


def _run_precision(store: ObjectStore, plan: RunPlanned | None, run_id: str, combo_key: str) -> str:
    """The precision (`quick` or `exact`) the run measures `combo_key` with at first, from its stored
    `plan` or, before the archiver stored it, the run record; `exact` if neither is stored. Only the
    planned combinations race: a predicted pick the archiver checks is measured in full."""
    if plan is not None:
        return plan.request.precision if combo_key in plan.combos else "exact"
    try:
        return (RunRecord.read(store.get_bytes(keys.run_record(run_id))).request or {}).get("precision") or "exact"
    except (NotFound, SchemaError):
        return "exact"


def _asks_profile(store: ObjectStore, run_id: str) -> bool:
    """Whether the run's request asks for profiles: read from its stored plan, or, when the
    archiver has not stored it yet, from the run record the API wrote at submission (neither
    stored reads as no)."""
    plan = stored_plan(store, run_id)
    if plan is not None:
        return plan.request.profile
    try:
        return bool((RunRecord.read(store.get_bytes(keys.run_record(run_id))).request or {}).get("profile"))
    except (NotFound, SchemaError):
        return False


def _conversion_details(store: ObjectStore, artifact_key: str) -> dict | None:
    """What the artifact's conversion chose (onnx_int8: the recipe and every recipe's figures),
    from its manifest; None where it says nothing."""
    try:
        return ArtifactManifest.read(store.get_bytes(keys.manifest(artifact_key))).details or None
    except (NotFound, SchemaError):
        return None


def _profile(deps: InferenceDeps, result: dict, bound) -> bool:
    """Profile a measured result (stored or about to be); whether it was profiled. Where the
    deployment has measuring functions, the pass runs in the one of the result's architecture
    and size, as its measurement did: the user's model never runs in the inference function."""
    try:
        if deps.functions is not None and deps.functions.serves(MeasuredResult.read(result).combo.hardware.value):
            _profile_in_function(deps.functions, deps.store, result)
        else:
            deps.profile(deps.store, result)
        return True
    except MeasurementFailed as exc:  # the profile is an explanation: its failure fails nothing
        bound.warning("profile_failed", reason=exc.reason)
    except MeasurementRefused as exc:
        bound.warning("profile_failed", reason=str(exc))
    return False


def _profile_in_function(functions: MeasuringFunctions, store: ObjectStore, result: dict) -> None:
    """The profiled pass of `result` in its measuring function, which stores the profile and
    its trace (`measuring_function.profile_in_this_function`)."""
    measured = MeasuredResult.read(result)
    combo, model = measured.combo, measured.model
    manifest = ArtifactManifest.read(store.get_bytes(keys.manifest(measured.artifact_key)))
    request = MeasureRequest(
        run_id=measured.run_id,
        combo_key=measured.combo_key,
        combo_label=measured.label,
        optimizer=combo.optimizer.value,
        workload=model.workload.value,
        artifact_object=keys.artifact_file(measured.artifact_key, manifest.artifact_file),
        artifact_file=manifest.artifact_file,
        reference_object=keys.reference(reference_key(model, combo.batch_size)),
        memory_mb=combo.memory_mb,
        time_cap_s=PROFILE_TIME_CAP_S,
        min_iterations=1,
        profile_of=result,
    )
    functions.measure(
        hardware=combo.hardware.value,
        memory_mb=combo.memory_mb,
        request=request.model_dump(mode="json"),
        staged_keys=[request.artifact_object, request.reference_object],
    )


def on_profile_requested(event: Envelope, deps: InferenceDeps) -> list[Payload]:
    """A profiled pass of a finished run's measured combination (the page's "profile this")."""
    requested: ProfileRequested = event.payload
    bound = log.bind(run_id=event.run_id, combo_key=requested.combo_key, combo=requested.combo.label)
    try:
        result = MeasuredResult.read(deps.store.get_bytes(requested.result_key)).to_dict()
    except NotFound:
        bound.warning("profile_failed", reason=f"no stored result {requested.result_key}")
        return []
    # the pass is the requesting run's: stored under its id, never over the profile of the run (perhaps
    # another owner's) that measured a result this run reused
    result["run_id"] = event.run_id
    _profile(deps, result, bound)
    return []


def _measure_here(
    converted: ModelConverted, deps: InferenceDeps, bound, agreements: list[dict] | None = None, quick: bool = False
) -> tuple[dict | list[Payload | Delayed], bool]:
    """Measure in a child process of this worker (confined by a cgroup where it can be); the
    report and whether it ran emulated, or what to emit instead (a failure, a retry later). `quick`: a
    racing run's first pass (`quick_pass_settings`)."""
    combo, model = converted.combo, converted.model
    runtime = deps.runtime_for(combo.hardware)
    if runtime is None:
        reason = f"no {combo.hardware.value} worker here and no emulation of it ({_arm_emulation()[1]})"
        return [
            ComboFailed(combo=combo, combo_key=converted.combo_key, stage=FailureStage.inference, reason=reason)
        ], False
    python_command, emulated = runtime
    with tempfile.TemporaryDirectory(dir=deps.work_dir, prefix="infer-") as tmp:
        work = Path(tmp)
        artifact = work / converted.artifact_file
        deps.store.get_file(keys.artifact_file(converted.artifact_key, converted.artifact_file), artifact)
        reference = work / "reference.npz"
        deps.store.get_file(keys.reference(reference_key(model, combo.batch_size)), reference)
        spec = MeasureSpec(
            optimizer=combo.optimizer.value,
            workload=model.workload.value,
            artifact_path=artifact,
            reference_path=reference,
            memory_mb=combo.memory_mb,
            time_cap_s=deps.time_cap_s,
            tuning_cap_s=deps.tuning_cap_s,
            min_iterations=deps.min_iterations,
            # under emulation neither the CPU share nor the memory of a Lambda function is real
            confine=not emulated,
            extra={"unconfined_reason": "emulated: timings and memory under emulation are not Lambda's"},
            agreements=list(agreements or []),
        )
        tuned = quick_pass_settings(spec, agreements or []) if quick and not emulated else None
        if tuned is not None:
            spec = dataclasses.replace(spec, engine_settings=tuned["settings"])
        bound.info("measurement_started", threads=spec.threads, vcpus=round(spec.vcpus, 3))
        try:
            report = estimated(deps.measure(spec, python_command=python_command), spec)
            if tuned is not None:  # where its settings come from (`report/table.py` reads `engine_tuning`)
                report["engine_tuning"] = {
                    "settings": tuned["settings"],
                    "tuned_at": tuned["tuned_at"],
                    "searched_in_full": tuned.get("searched_in_full", False),
                }
            return report, emulated
        except MachineBusy as exc:  # the run's deadline bounds how long it may keep trying
            bound.info("measurement_postponed", reason=exc.reason, retry_s=deps.busy_retry_s)
            return [Delayed(converted, datetime.now(UTC) + timedelta(seconds=deps.busy_retry_s))], emulated
        except MeasurementFailed as exc:
            bound.warning("measurement_failed", reason=exc.reason)
            return [
                ComboFailed(combo=combo, combo_key=converted.combo_key, stage=FailureStage.inference, reason=exc.reason)
            ], emulated


def estimated(report: dict, spec: MeasureSpec) -> dict:
    """A report of one unconfined thread measured for its memory size (the launcher's mark,
    where this machine cannot confine) as that size's estimate (`core/lambda_model/unconfined.py`)
    with the size's vCPUs; any other report as it is."""
    if not report.pop(ONE_THREAD_FOR_ITS_SIZE, False):
        return report
    from core.lambda_model.unconfined import apply_estimate

    return {**apply_estimate(report, spec.memory_mb, report.get("confinement_reason")), "vcpus": spec.vcpus}


def _measure_in_function(
    event: Envelope, functions: MeasuringFunctions, deps: InferenceDeps, bound
) -> dict | list[Payload]:
    """Measure inside the measuring Lambda function of the combination's architecture and
    memory size; its report, or the combination's failure with the reason."""
    converted: ModelConverted = event.payload
    combo = converted.combo
    artifact_object = keys.artifact_file(converted.artifact_key, converted.artifact_file)
    reference_object = keys.reference(reference_key(converted.model, combo.batch_size))
    request = MeasureRequest(
        run_id=event.run_id,
        combo_key=converted.combo_key,
        combo_label=combo.label,
        optimizer=combo.optimizer.value,
        workload=converted.model.workload.value,
        artifact_object=artifact_object,
        artifact_file=converted.artifact_file,
        reference_object=reference_object,
        memory_mb=combo.memory_mb,
        time_cap_s=deps.time_cap_s,
        min_iterations=deps.min_iterations,
    )
    bound.info("measurement_started", where="lambda")
    try:
        return functions.measure(
            hardware=combo.hardware.value,
            memory_mb=combo.memory_mb,
            request=request.model_dump(mode="json"),
            staged_keys=[artifact_object, reference_object],
        )
    except MeasurementRefused as exc:
        bound.warning("measurement_failed", reason=exc.reason)
        return [
            ComboFailed(combo=combo, combo_key=converted.combo_key, stage=FailureStage.inference, reason=exc.reason)
        ]


def result_cost(report: dict, combo, region: str) -> Cost:
    """The `cost` of a measured result in `region` (see `schemas.cost`)."""
    return cost_block(
        billed_ms_per_request=report["latency_ms"]["billed_ms_mean"],
        cold_start_ms=report["cold_start_ms"]["total"],
        memory_mb=combo.memory_mb,
        batch_size=combo.batch_size,
        hardware=combo.hardware,
        region=region,
    )


HANDLERS = {ModelConverted: on_model_converted, ProfileRequested: on_profile_requested}
