"""Where the time goes: a profiled pass of a finished run's measured combination, in the same
confinement as its measurement (`launcher.profile`), never used as its timing.

`profile_result(store, result)` fetches the combination's artifact and reference, runs the
engine's profiler (torch.profiler for `base`, ONNX Runtime's for `onnx`, the Relax VM's
instrument for `tvm`) in a confined child, and stores the Chrome trace (bounded:
`core/profiles.py bounded_trace`) and the `CombinationProfile` naming it next to the result
(`results/{combo key}/{run id}.profile.json`, `.trace.json`). `core.results.stored_profile` reads
one back.
"""

from __future__ import annotations

import json
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from core.ports import ObjectStore
from core.profiles import operator_rows
from measuring.launcher import MeasureSpec, profile
from schemas import keys
from schemas.combos import reference_key
from schemas.documents import ArtifactManifest, CombinationProfile, MeasuredResult, SummaryResult

# a measured result: a summary's row, a stored result, or its document (as a profiling request
# carries it to the measuring process), validated once where it is read
Measured = SummaryResult | MeasuredResult | dict[str, Any]

log = structlog.get_logger()

PROFILE_RUNS = 20  # profiled inferences per pass (and as many unprofiled, for the overhead)
PROFILE_TIME_CAP_S = 4.0  # warm time of a pass's unprofiled half


def fetch_measured(store: ObjectStore, result: Measured, work: Path) -> tuple[Path, Path]:
    """A measured result's artifact and reference (the bound inputs and base's outputs), fetched
    into `work`."""
    result = SummaryResult.of(result)
    manifest = ArtifactManifest.read(store.get_bytes(keys.manifest(result.artifact_key)))
    artifact = work / manifest.artifact_file
    store.get_file(keys.artifact_file(result.artifact_key, manifest.artifact_file), artifact)
    reference = work / "reference.npz"
    store.get_file(keys.reference(reference_key(result.model, result.combo.batch_size)), reference)
    return artifact, reference


def profile_result(
    store: ObjectStore,
    result: Measured,
    *,
    runs: int = PROFILE_RUNS,
    time_cap_s: float = PROFILE_TIME_CAP_S,
    trace_max_events: int | None = None,
    work_root: Path | None = None,
) -> CombinationProfile:
    """Profile one measured combination confined as it was measured; store its trace and profile."""
    result = SummaryResult.of(result)
    combo, label = result.combo, result.label
    bound = log.bind(run_id=result.run_id, combo_key=result.combo_key, combo=label)
    with tempfile.TemporaryDirectory(dir=work_root, prefix="ayci-profile-") as tmp:
        artifact, reference = fetch_measured(store, result, Path(tmp))
        spec = MeasureSpec(
            optimizer=combo.optimizer.value,
            workload=result.model.workload,
            artifact_path=artifact,
            reference_path=reference,
            memory_mb=combo.memory_mb,
            time_cap_s=time_cap_s,
            engine_settings=result.engine_settings,
            tune=False,
            profile_runs=runs,
            trace_max_events=trace_max_events,
        )
        bound.info("profile_started", runs=runs)
        report = profile(spec)
    trace = report["trace"] or {"traceEvents": []}  # bounded by the profiling process
    note = trace.get("otherData", {}).get("ayci_note")
    trace_key = keys.profile_trace(result.combo_key, result.run_id)
    store.put_bytes(trace_key, json.dumps(trace).encode())
    document = CombinationProfile(
        combo_key=result.combo_key,
        run_id=result.run_id,
        label=label,
        optimizer=combo.optimizer.value,
        trace_key=trace_key,
        trace_note=note,
        runs=report["runs"],
        operators=operator_rows([tuple(call) for call in report["calls"]], report["runs"]),
        unprofiled_p50_ms=report["unprofiled_p50_ms"],
        profiled_p50_ms=report["profiled_p50_ms"],
        confined=report["confined"],
        confinement_reason=report["confinement_reason"],
        profiled_at=datetime.now(UTC).isoformat(),
    )
    store.put_bytes(keys.profile(result.combo_key, result.run_id), document.to_bytes(indent=1))
    bound.info(
        "profile_done",
        operators=len(document.operators),
        trace_events=len(trace["traceEvents"]),
        overhead=round(document.profiled_p50_ms / document.unprofiled_p50_ms, 2)
        if document.unprofiled_p50_ms
        else None,
    )
    return document
