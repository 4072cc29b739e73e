"""A run's summary as table rows: the columns, their titles, the notes on a row and how each
cell is written. The CLI, the CSV/JSON of the API, the email and the web page all show these."""

from __future__ import annotations

from schemas.reasons import decisive

RECOMMENDATION_KINDS = ("fastest", "cheapest", "balanced")

COLUMNS = [
    ("combination", "combination"),
    ("status", "status"),
    ("p50_ms", "p50 ms"),
    ("p90_ms", "p90 ms"),
    ("p99_ms", "p99 ms"),
    ("cold_start_ms", "cold start ms"),
    ("peak_rss_mb", "peak MB"),
    ("cost_per_million_usd", "$ / 1M inf."),
    ("cold_start_usd", "$ / cold start"),
    ("agreement", "agreement"),
    ("interval", "predicted ~95% interval"),
    ("note", "note"),
]


def _label(combo: dict) -> str:
    return f"{combo['hardware']}/{combo['optimizer']}/b{combo['batch_size']}/{combo['memory_mb']}MB"


def summary_rows(summary: dict) -> list[dict]:
    """One row per combination, measured and predicted ones first (by p99), then the failed ones."""
    rows = []
    for r in sorted(summary["results"], key=lambda r: r["latency_ms"]["p99"]):
        cost = r.get("cost") or {}
        interval = r.get("interval") or {}
        rows.append(
            {
                "combination": _label(r["combo"]),
                "combo_key": r.get("combo_key"),
                "status": "predicted" if r.get("predicted") else "measured",
                "predicted": bool(r.get("predicted")),
                "interval": _interval_cell(interval) if interval else None,
                "p50_interval": interval.get("p50"),
                "p99_interval": interval.get("p99"),
                "p50_ms": r["latency_ms"]["p50"],
                "p90_ms": r["latency_ms"]["p90"],
                "p99_ms": r["latency_ms"]["p99"],
                "cold_start_ms": r["cold_start_ms"]["total"],
                "peak_rss_mb": r["peak_rss_mb"],
                "cost_per_million_usd": cost.get("per_million_inferences_usd"),
                "cold_start_usd": cost.get("cold_start_usd"),
                "agreement": r["agreement"]["score"],
                "agreement_metric": r["agreement"]["metric"],
                "note": ", ".join(_notes(r)),
            }
        )
    for f in summary["failures"]:
        rows.append(
            {
                "combination": f["label"],
                "combo_key": f.get("combo_key"),
                "status": "failed",
                "note": f"{f['stage']}: {decisive(f['reason'])}",
            }
        )
    return rows


def _notes(result: dict) -> list[str]:
    """What to keep in mind reading a result's row."""
    notes = []
    prediction = result.get("prediction")
    if prediction:
        notes.append(
            f"predicted from {', '.join(map(str, prediction['anchors']))} MB"
            + (", beyond the measured range" if prediction.get("beyond_measured_range") else "")
        )
    check = result.get("check")
    if check:
        notes.append(
            f"predicted p50 {check['predicted_p50_ms']:.2f} ms, measured "
            + ("within the interval" if check["within_interval"] else "outside the interval")
        )
    settings, tuning = result.get("engine_settings"), result.get("engine_tuning") or {}
    tried = tuning.get("tried") or []
    if settings and tried and settings != tried[0]["settings"]:
        changed = {k: v for k, v in settings.items() if tried[0]["settings"].get(k) != v}
        notes.append("tuned session: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in changed.items()))
    if tuning.get("failed"):
        notes.append(f"session not tuned: {tuning['failed']}")
    payoff = result.get("break_even")
    if payoff:
        notes.append(
            f"tuned {payoff['tuning_s']:.0f} s: "
            + (
                f"pays off after {payoff['inferences']:,} inferences against {payoff['against']}"
                if payoff["inferences"] is not None
                else f"never pays off (not faster than {payoff['against']})"
            )
        )
    agreement = result.get("agreement") or {}
    if (result.get("combo") or {}).get("optimizer") == "onnx_int8" and agreement.get("max_abs_diff") is not None:
        notes.append(f"quantized: outputs differ from base by up to {agreement['max_abs_diff']:.3g}")
    if result.get("reused"):
        notes.append("reused")
    if result.get("emulated"):
        notes.append("emulated: timings not real, not costed")
    if result.get("host_limited"):
        notes.append(
            f"host-limited: needs {result.get('vcpus') or 0:.1f} vCPUs, "
            f"host has {result.get('vcpus_available')}; not costed"
        )
    if (result.get("latency_ms") or {}).get("p99_estimate"):
        notes.append(f"p99 an estimate ({result['latency_ms'].get('p99_samples')} samples)")
    elif result.get("confined") is False:
        notes.append(f"unconfined: {result.get('confinement_reason')}")
    load = result.get("load") or {}
    if load.get("disturbed"):
        notes.append(f"disturbed: other work used {load['other_busy_cores']:.1f} cores")
    return notes


def _interval_cell(interval: dict) -> str:
    def span(pair: list[float]) -> str:
        return "-".join(format_cell("p50_ms", v) for v in pair)

    return f"p50 {span(interval['p50'])}, p99 {span(interval['p99'])}"


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
