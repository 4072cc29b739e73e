"""The measuring Lambda function: one combination, measured inside a Lambda function of its
memory size and architecture (AWS only; `services/inference/measuring_lambda.py` is its entry).

The inference service invokes it through an alias configured with the combination's memory
size (`adapters/lambda_sizes.py`) with a `MeasureRequest` (`schemas/measuring.py`). It
downloads the artifact and the base model's reference outputs from the bucket into its
ephemeral storage (`/tmp`), measures them with the same launcher and measuring code as every
other worker (`launcher.py` -> `measure.py`, a child process of its own: its cold start and
peak memory are its own), and answers the report. The launcher sees
`AWS_LAMBDA_FUNCTION_MEMORY_SIZE` and records the result `confined: true` "by the Lambda
function itself": the CPU share and the memory cap are the platform's, not a cgroup of ours.
"""

from __future__ import annotations

import resource
import tempfile
from collections.abc import Callable
from pathlib import Path

import structlog

from core.ports import NotFound, ObjectStore
from measuring.launcher import MeasurementFailed, MeasureSpec, measure
from schemas import keys
from schemas.measuring import MeasureAnswer, MeasureRequest

log = structlog.get_logger()


def measure_in_this_function(
    request: MeasureRequest,
    store: ObjectStore,
    *,
    memory_limit_mb: int | None,
    work_root: Path | None = None,
    measure: Callable[..., dict] = measure,
) -> MeasureAnswer:
    """Measure `request`'s combination here; `memory_limit_mb` is this function's memory size
    (the context's `memory_limit_in_mb`), `work_root` the ephemeral storage (default /tmp)."""
    bound = log.bind(run_id=request.run_id, combo_key=request.combo_key, combo=request.combo_label)
    if memory_limit_mb is not None and memory_limit_mb != request.memory_mb:
        # an alias pointing at the wrong version would measure another size: never report it
        return MeasureAnswer(
            failed=f"this measuring function has {memory_limit_mb} MB, the combination asks for {request.memory_mb} MB"
        )
    if request.profile_of is not None:
        return profile_in_this_function(request, store, work_root=work_root)
    with tempfile.TemporaryDirectory(dir=work_root, prefix="combination-") as tmp:
        work = Path(tmp)
        artifact, reference = work / request.artifact_file, work / "reference.npz"
        try:
            store.get_file(request.artifact_object, artifact)
            store.get_file(request.reference_object, reference)
        except NotFound as exc:
            return MeasureAnswer(failed=f"{exc.args[0]} is not in the bucket (the artifact or the reference outputs)")
        except OSError as exc:  # ENOSPC: the storage was sized from the objects, so this is not expected
            return MeasureAnswer(failed=f"the artifact does not fit in this function's ephemeral storage: {exc}")
        spec = MeasureSpec(
            optimizer=request.optimizer,
            workload=request.workload,
            artifact_path=artifact,
            reference_path=reference,
            memory_mb=request.memory_mb,
            time_cap_s=request.time_cap_s,
            min_iterations=request.min_iterations,
        )
        bound.info(
            "measurement_started",
            threads=spec.threads,
            vcpus=round(spec.vcpus, 3),
            artifact_bytes=artifact.stat().st_size,
        )
        try:
            report = measure(spec)
        except MeasurementFailed as exc:
            reason = exc.reason
            if "exited with -9" in reason:  # killed by the sandbox's memory limit, not by a group of ours
                reason = (
                    f"out of memory at {request.memory_mb} MB "
                    "(the measuring process was killed inside the Lambda function)"
                )
            bound.warning("measurement_failed", reason=reason)
            return MeasureAnswer(failed=reason)
    if report.get("confined"):
        # the function's own vCPU share is Lambda's, whatever this sandbox's core count says
        report["host_limited"] = False
    # this handler's process shares the function's memory with the measuring process
    report["function_handler_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    bound.info("measurement_done", p99_ms=round(report["latency_ms"]["p99"], 2), confined=report.get("confined"))
    return MeasureAnswer(report=report)


def profile_in_this_function(
    request: MeasureRequest, store: ObjectStore, *, work_root: Path | None = None
) -> MeasureAnswer:
    """The profiled pass of `request.profile_of` (a measured result) here, in a function of its
    size, as it was measured: the user's model runs in the measuring function, never in the
    inference function. Stores the profile and its trace next to the result; answers the
    profile's key, or the reason it failed."""
    from services.inference.profiling import profile_result

    result = request.profile_of
    bound = log.bind(run_id=request.run_id, combo_key=request.combo_key, combo=request.combo_label)
    try:
        document = profile_result(store, result, work_root=work_root)
    except MeasurementFailed as exc:
        bound.warning("profile_failed", reason=exc.reason)
        return MeasureAnswer(failed=exc.reason)
    except NotFound as exc:
        return MeasureAnswer(failed=f"{exc.args[0]} is not in the bucket (the artifact or the reference outputs)")
    return MeasureAnswer(report={"profile_key": keys.profile(document.combo_key, document.run_id)})
