"""The gate's paired confirmation (`ayci gate --confirm N`): a combination that may have regressed
is measured again now, the baseline's artifact (A) and the run's (B) side by side in one process
confined to the combination's CPU share (`measuring/paired_measure.py`): N rounds, each
alternating blocks of about 50 ms of A's inferences and B's (A first in even rounds, B in odd
ones) until each side has `time_cap_s` of timing. The machine's load drifts between a baseline
measured days ago and a run measured now, and over seconds while they are measured; within a
round both sides see the same moments, so the ratio of the paired figures is judged
(`report/compare.py judged_side_by_side`), not the new figures against the old.

Both artifacts must be in this store (`artifacts/{artifact key}/`, named by each summary row's
`artifact_key`) with their references (`references/{reference key}.npz`), and the hardware must
be this machine's own (emulated timings are not real): otherwise the confirmation is
`unavailable`, says why, and the gate falls back to re-measuring the run alone."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

import structlog

from core.ports import NotFound, ObjectStore
from engines.targets import native_hardware
from measuring.launcher import MeasurementFailed
from measuring.paired_measure import PairSide, measure_pair
from report.compare import PairedConfirmation, PairedRound
from schemas import keys
from schemas.combos import ModelRef, reference_key
from schemas.cost import cost_block
from schemas.cost import default_region as default_price_region
from schemas.documents import ArtifactManifest, RunSummary, SummaryResult
from schemas.events import SchemaError

log = structlog.get_logger()

PAIRED_TIME_CAP_S = 1.0  # timing per side and round (in blocks of about 50 ms, the two sides alternating)


def _side(store: ObjectStore, row: SummaryResult, model: ModelRef | None, folder: Path) -> tuple[Path, Path] | str:
    """The artifact's file and its reference fetched into `folder`, or why they cannot be."""
    if not row.artifact_key:
        return "its result names no artifact"
    if model is None:
        return "its result names no model"
    try:
        manifest = ArtifactManifest.read(store.get_bytes(keys.manifest(row.artifact_key)))
    except NotFound:
        return f"its artifact {row.artifact_key[:12]} is not stored here"
    except SchemaError as exc:
        return f"its artifact's manifest cannot be read ({exc})"
    folder.mkdir(parents=True, exist_ok=True)
    artifact, reference = folder / manifest.artifact_file, folder / "reference.npz"
    try:
        store.get_file(keys.artifact_file(row.artifact_key, manifest.artifact_file), artifact)
        store.get_file(keys.reference(reference_key(model, row.combo.batch_size)), reference)
    except NotFound:
        return "its artifact or its reference outputs are not stored here"
    return artifact, reference


def figures_of(side: dict, row: SummaryResult) -> dict[str, float]:
    """A round's p50, p99 and cost per million of one side (priced from its billed time, as a result is)."""
    billed = side["billed_ms_mean"]
    combo = row.combo
    cost = cost_block(
        billed_ms_per_request=billed,
        cold_start_ms=0.0,
        memory_mb=combo.memory_mb,
        batch_size=combo.batch_size,
        hardware=combo.hardware,
        region=(row.cost.price_region if row.cost and row.cost.price_region else default_price_region()),
    )
    return {"p50_ms": side["p50_ms"], "p99_ms": side["p99_ms"], "cost_per_million_usd": cost.per_million_inferences_usd}


def side_by_side(
    store: ObjectStore,
    baseline: RunSummary,
    run: RunSummary,
    labels: Iterable[str],
    rounds: int,
    *,
    time_cap_s: float = PAIRED_TIME_CAP_S,
    work_dir: Path | None = None,
    measure: Callable[..., dict] = measure_pair,
    progress: Callable[[str], None] | None = None,
) -> dict[str, PairedConfirmation]:
    """Each combination of `labels` measured `rounds` times from the baseline's artifact and the
    run's, alternately; a `PairedConfirmation` per label (`unavailable` with the reason where it
    could not be measured). `measure` replaces the launcher's (tests)."""
    rows_a = {r.label: r for r in baseline.results if not r.predicted}
    rows_b = {r.label: r for r in run.results if not r.predicted}
    found: dict[str, PairedConfirmation] = {}
    for label in labels:
        row_a, row_b = rows_a.get(label), rows_b.get(label)
        if row_a is None or row_b is None:
            found[label] = PairedConfirmation(combination=label, unavailable="not measured in both runs")
            continue
        if row_a.combo.hardware != native_hardware():
            found[label] = PairedConfirmation(
                combination=label, unavailable=f"{row_a.combo.hardware.value} is not this machine's hardware"
            )
            continue
        with tempfile.TemporaryDirectory(dir=work_dir, prefix="paired-") as tmp:
            sides = {}
            for name, row, model in (
                ("A", row_a, row_a.model or baseline.model),
                ("B", row_b, row_b.model or run.model),
            ):
                fetched = _side(store, row, model, Path(tmp) / name)
                if isinstance(fetched, str):
                    what = "the baseline's" if name == "A" else "the run's"
                    found[label] = PairedConfirmation(combination=label, unavailable=f"{what} {label}: {fetched}")
                    break
                sides[name] = (row, *fetched)
            else:
                found[label] = _rounds(label, sides, rounds, time_cap_s, measure, progress)
    return found


def _rounds(label, sides, rounds, time_cap_s, measure, progress) -> PairedConfirmation:
    (row_a, artifact_a, reference_a), (row_b, artifact_b, reference_b) = sides["A"], sides["B"]
    side_a, side_b = (
        PairSide(
            optimizer=row.combo.optimizer.value,
            artifact_path=artifact,
            reference_path=reference,
            settings=getattr(row, "engine_settings", None) or None,
        )
        for row, artifact, reference in ((row_a, artifact_a, reference_a), (row_b, artifact_b, reference_b))
    )
    if progress is not None:
        progress(f"{label}: {rounds} paired rounds of {time_cap_s:g} s a side")
    try:
        report = measure(side_a, side_b, row_a.combo.memory_mb, rounds, time_cap_s)
    except MeasurementFailed as exc:
        log.warning("paired_measurement_failed", combo=label, reason=exc.reason)
        return PairedConfirmation(combination=label, unavailable=f"the side-by-side measurement failed: {exc.reason}")
    disturbed = bool((report.get("load") or {}).get("disturbed"))
    measured = [
        PairedRound(
            order=r["order"],
            a=figures_of(r["a"], row_a),
            b=figures_of(r["b"], row_b),
            disturbed=disturbed,
        )
        for r in report["rounds"]
    ]
    found = PairedConfirmation.of(label, measured)
    log.info(
        "paired_confirmation",
        combo=label,
        **{k: f.text() for k, f in found.figures.items()},
        confined=report.get("confined"),
    )
    if progress is not None:
        progress(f"{label}: " + ", ".join(f"{k} {f.text()}" for k, f in found.figures.items()))
    return found
