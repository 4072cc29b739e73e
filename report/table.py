"""A run's summary as table rows: the columns, their titles, the notes on a row and how each
cell is written. The CLI, the CSV/JSON of the API, the email and the web page all show these."""

from __future__ import annotations

from typing import Any

from schemas.combos import Optimizer
from schemas.documents import Interval, RunSummary, SummaryResult, TableRow
from schemas.events import FailureStage
from schemas.reasons import decisive

RECOMMENDATION_KINDS = ("fastest", "cheapest", "balanced")

COLUMNS = [
    ("combination", "combination"),
    ("status", "status"),
    ("p50_ms", "p50 ms"),
    ("p90_ms", "p90 ms"),
    ("p95_ms", "p95 ms"),
    ("p99_ms", "p99 ms"),
    ("cold_start_ms", "cold start ms"),
    ("peak_rss_mb", "peak MB"),
    ("cost_per_million_usd", "$ / 1M inf."),
    ("cold_start_usd", "$ / cold start"),
    ("agreement", "agreement"),
    ("interval", "predicted ~95% interval"),
    ("lambda_deployment", "Lambda package"),  # zip / image and its size (core.lambda_rules)
    ("note", "note"),
]


def as_summary(summary: RunSummary | dict[str, Any]) -> RunSummary:
    """A run summary, typed (a stored summary's dict is read as the store reads it: upcast)."""
    return summary if isinstance(summary, RunSummary) else RunSummary.read(summary)


def summary_rows(summary: RunSummary | dict[str, Any]) -> list[TableRow]:
    """One row per combination, measured and predicted ones first (by p99), then the failed ones."""
    summary = as_summary(summary)
    rows = []
    for r in sorted(summary.results, key=lambda r: r.latency_ms.p99):
        interval, cost = r.interval, r.cost
        rows.append(
            TableRow.model_construct(  # from typed fields: nothing to validate (1,536 rows: no second pass)
                combination=r.label,
                combo_key=r.combo_key,
                status="predicted" if r.predicted else "measured",
                predicted=r.predicted,
                interval=_interval_cell(interval) if interval else None,
                p50_interval=interval.p50 if interval else None,
                p99_interval=interval.p99 if interval else None,
                p50_ms=r.latency_ms.p50,
                p90_ms=r.latency_ms.p90,
                p95_ms=r.latency_ms.p95,
                p99_ms=r.latency_ms.p99,
                cold_start_ms=r.cold_start_ms.total if r.cold_start_ms else None,
                peak_rss_mb=r.peak_rss_mb,
                cost_per_million_usd=cost.per_million_inferences_usd if cost else None,
                cold_start_usd=cost.cold_start_usd if cost else None,
                agreement=r.agreement.score if r.agreement else None,
                agreement_metric=r.agreement.metric if r.agreement else None,
                agreement_basis=agreement_basis(r),
                recipe=(r.conversion or {}).get("recipe_summary"),
                note=", ".join(_notes(r)),
                **_lambda_cells(r),
            )
        )
    for f in summary.failures:
        rows.append(
            TableRow.model_construct(
                combination=f.label,
                combo_key=f.combo_key,
                # skipped: not measured, it cannot change the answer (TVM's tuning); not a failure
                status="skipped" if f.stage == FailureStage.skipped else "failed",
                note=decisive(f.reason)
                if f.stage == FailureStage.skipped
                else f"{f.stage.value}: {decisive(f.reason)}",
            )
        )
    return rows


def _notes(result: SummaryResult) -> list[str]:
    """What to keep in mind reading a result's row."""
    notes = []
    prediction = result.prediction
    if prediction:
        notes.append(
            f"predicted from {', '.join(map(str, prediction.anchors))} MB"
            + (", beyond the measured range" if prediction.beyond_measured_range else "")
        )
    check = result.check
    if check:
        notes.append(
            f"predicted p50 {check.predicted_p50_ms:.2f} ms, measured "
            + ("within the interval" if check.within_interval else "outside the interval")
        )
    settings, tuning = result.engine_settings, result.engine_tuning or {}
    tried = tuning.get("tried") or []
    if settings and tried and settings != tried[0]["settings"]:
        changed = {k: v for k, v in settings.items() if tried[0]["settings"].get(k) != v}
        notes.append("tuned session: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in changed.items()))
    if tuning.get("failed"):
        notes.append(f"session not tuned: {tuning['failed']}")
    payoff = result.break_even
    if payoff:
        notes.append(
            f"tuned {payoff.tuning_s:.0f} s: "
            + (
                f"pays off after {payoff.inferences:,} inferences against {payoff.against}"
                if payoff.inferences is not None
                else f"never pays off (not faster than {payoff.against})"
            )
        )
    agreement = result.agreement
    if result.combo.optimizer == Optimizer.onnx_int8 and agreement and agreement.max_abs_diff is not None:
        notes.append(f"quantized: outputs differ from base by up to {agreement.max_abs_diff:.3g}")
    conversion = result.conversion or {}
    if conversion.get("recipe_summary"):  # onnx_int8: the recipe chosen and what every recipe scored
        met = "" if conversion.get("meets_minimum", True) else f"no int8 recipe meets {conversion['min_agreement']}: "
        notes.append(f"int8 recipes: {met}{conversion['recipe_summary']}")
    if agreement_basis(result):
        notes.append(f"agreement on {agreement_basis(result)}")
    notes += _lambda_notes(result)
    if result.reused:
        notes.append("reused")
    if result.emulated:
        notes.append("emulated: timings not real, not costed")
    if result.host_limited:
        notes.append(
            f"host-limited: needs {result.vcpus or 0:.1f} vCPUs, host has {result.vcpus_available}; not costed"
        )
    estimate = (
        getattr(result, "estimate", None) or {}
    )  # no cgroups: from one unconfined thread (lambda_model/unconfined)
    if estimate.get("mark"):
        # one note, kept whole where the terminal splits notes at ", " (a no-break space after the mark's comma)
        mark, basis = estimate["mark"].replace(", ", ",\u00a0"), str(estimate.get("basis", "")).replace(", ", "; ")
        notes.append(f"{mark} ({basis})")
    if result.latency_ms.p99_estimate:
        notes.append(f"p99 an estimate ({result.latency_ms.p99_samples} samples)")
    elif result.confined is False and not estimate.get("mark"):
        notes.append(f"unconfined: {result.confinement_reason}")
    if result.disturbed:
        notes.append(f"disturbed: {result.load.disturbance}")
    if result.kept_quick:
        notes.append(result.kept_quick)
    return notes


def _lambda_cells(result: SummaryResult) -> dict[str, Any]:
    """The row against Lambda's rules (`lambda_rules`: payload, init, deployment form and size,
    SnapStart and why not, ephemeral storage, the rules broken) and its package cell; the CPU a
    tvm artifact was compiled for (`target_cpu`)."""
    from core.lambda_rules import fit_of_row

    cells: dict[str, Any] = {}
    target = _tvm_target(result)
    if target:
        cells["target_cpu"] = target
    fit = fit_of_row(result)
    if fit is not None:
        cells["lambda_rules"] = fit.as_dict()
        cells["lambda_deployment"] = (
            f"{fit.deployment} {fit.package_mb:,.0f} MB" if fit.deployment != "none" else "over 10 GB"
        )
    return cells


def _tvm_target(result: SummaryResult) -> str | None:
    if result.combo.optimizer != Optimizer.tvm:
        return None
    return ((result.conversion or {}).get("target") or {}).get("mcpu")


def _lambda_notes(result: SummaryResult) -> list[str]:
    """The CPU a tvm artifact was compiled for; the Lambda rules the row breaks (never
    recommended) and what else to know deploying it (SnapStart's reason when not eligible)."""
    from core.lambda_rules import fit_of_row
    from engines.targets import is_portable

    notes = []
    target = _tvm_target(result)
    if target:
        portable = is_portable(result.combo.hardware, target)
        notes.append(f"target {target}" + ("" if portable else " (this host's CPU: may not run on every Lambda host)"))
    fit = fit_of_row(result)
    if fit is not None:
        notes += [f"breaks Lambda's rule: {rule}" for rule in fit.broken]
        notes += fit.notes
        if not fit.snapstart and fit.deployment == "zip":  # an image says so itself: SnapStart takes zips only
            notes.append(f"no SnapStart: {fit.snapstart_reason}")
    return notes


def agreement_basis(result: SummaryResult) -> str | None:
    """What a result's agreement rests on: "32 synthetic samples", "40 of your samples",
    "tokenized sentences (32)" (the shipped sentences, by the user's `--tokenizer`)."""
    agreement = result.agreement
    if agreement is None or agreement.samples is None:
        return None
    if agreement.inputs == "tokenized":
        return f"tokenized sentences ({agreement.samples})"
    kind = {"user": "of your", "synthetic": "synthetic"}.get(agreement.inputs or "", "")
    return f"{agreement.samples} {kind} sample{'s' if agreement.samples != 1 else ''}".replace("  ", " ")


def _interval_cell(interval: Interval) -> str:
    def span(pair: list[float]) -> str:
        return "-".join(format_cell("p50_ms", v) for v in pair)

    return f"p50 {span(interval.p50)}, p99 {span(interval.p99)}"


def format_cell(key: str, value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if key == "agreement":
            return f"{value:.4f}"
        if key == "cost_per_million_usd":
            return f"{value:.4f}"
        if key == "cold_start_usd":
            return f"{value:.7f}"
        return f"{value:.1f}" if value >= 10 else f"{value:.2f}"
    return str(value)
