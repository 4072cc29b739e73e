"""The run report rendered: the email (text and HTML), the API's JSON document and CSV (the
CLI's rich table is `report.terminal`). Every one shows the same rows (`report.table`)."""

from __future__ import annotations

import csv
import html
import io
from typing import Any

from report.table import COLUMNS, RECOMMENDATION_KINDS, as_summary, format_cell, summary_rows
from schemas.documents import FailedCombination, Recommendation, RunSummary
from schemas.events import FailureStage
from schemas.reasons import decisive


def skipped(failure: FailedCombination) -> bool:
    """Not measured because it cannot change the answer (TVM's tuning skipped): not a failure."""
    return failure.stage == FailureStage.skipped


TRAFFIC_ROWS = 5  # the email prices the Pareto front (at most this many) under the request's traffic


def traffic_lines(summary: RunSummary | dict[str, Any]) -> list[str]:
    """The run's Pareto front under the traffic the request named (`core/lambda_model/traffic.py`): each
    combination's cheapest way of serving it, and the cheapest that meets the SLO."""
    from core.lambda_model.arrivals import Traffic, TrafficError
    from core.lambda_model.traffic import traffic_report

    summary = as_summary(summary)
    profile = summary.request.get("traffic")
    if not profile:
        return []
    front = set(summary.recommendation.pareto if summary.recommendation else [])
    results = [r for r in summary.results if r.label in front]
    slo = summary.request.get("slo_p99_ms")
    try:
        report = traffic_report({"results": results[:TRAFFIC_ROWS]}, Traffic(**profile), slo)
    except TrafficError as exc:
        return [f"Under your traffic: {exc}"]
    lines = [
        f"Under your traffic ({profile['rps']:g} req/s, {profile['pattern']}, "
        f"idle timeout {profile['idle_timeout_s']:g} s, "
        f"{profile['duration_s'] / 86400:g} days; simulated):"
    ]
    for row in report["rows"]:
        for option in row["options"]:
            lines.append(
                f"  {row['combination']} {option['option']}: cold starts {option['cold_share']:.2%}, "
                f"p99 {option['p99_ms']:.1f} ms "
                f"with them, ${option['bill_usd']:.2f}"
                + (f", throttled {option['throttled_share']:.2%}" if option.get("throttled_share") else "")
            )
    lines.append(f"  cheapest{' meeting the SLO' if slo else ''}: {report['recommended'] or 'none'}")
    if report.get("thinned"):  # the simulation's budget (core/lambda_model/traffic.py) held a sample of the arrivals
        lines.append("  (simulated on a thinned sample of the arrivals; counts and bills scaled back)")
    return lines


def check_lines(recommendation: Recommendation | None) -> list[str]:
    """What checking the predicted picks found (`predict` runs), one line each."""
    lines = []
    for check in (recommendation.checks if recommendation else None) or []:
        measured = f", measured {format_cell('p50_ms', check.measured_p50_ms)} ms" if check.measured else ""
        lines.append(
            f"checked the {', '.join(check.picked_as)} pick {check.combination}: predicted p50 "
            f"{format_cell('p50_ms', check.predicted_p50_ms)} ms{measured}: {check.verdict}"
        )
    return lines


def picks(recommendation: Recommendation | None) -> list[tuple[str, str | None]]:
    """(kind, label or None) of each recommendation kind."""
    return [(kind, recommendation.pick(kind)) for kind in RECOMMENDATION_KINDS] if recommendation else []


def rests_on(basis: str | None) -> str:
    """What a pick's agreement rests on, when it is not the user's own data: " (agreement on 32
    synthetic samples, not your data: give --inputs)"; on the shipped sentences tokenized by the
    user's tokenizer, real text but not theirs."""
    if basis and "tokenized" in basis:
        return f" (agreement on {basis}: AYCI's sample text, not your data: give --inputs)"
    return f" (agreement on {basis}, not your data: give --inputs)" if basis and "synthetic" in basis else ""


def email_message(summary: RunSummary | dict[str, Any], results_url: str) -> dict[str, str]:
    """`{"subject", "text", "html"}` of a run's email, from its stored summary. It links the
    results (`{results_url}/runs/{run_id}/results`, for the API key holder) and the page
    that shows them (`{results_url}/#run={run_id}`)."""
    summary = as_summary(summary)
    run_id, status = summary.run_id, summary.status
    results_link = f"{results_url.rstrip('/')}/runs/{run_id}/results"
    page_link = f"{results_url.rstrip('/')}/#run={run_id}"
    rows = summary_rows(summary)
    recommendation = summary.recommendation
    picked = picks(recommendation)
    excluded = recommendation.excluded if recommendation else {}
    failures = [(f.label, f"{f.stage.value}: {decisive(f.reason)}") for f in summary.failures if not skipped(f)]
    # not measured because they cannot change the answer (TVM's tuning): not failures
    passed_over = [(f.label, decisive(f.reason)) for f in summary.failures if skipped(f)]
    measured = len(summary.results)
    model = summary.model
    headline = f"Run {run_id} is {status}: {measured} combination(s) measured, {len(failures)} failed" + (
        f", {len(passed_over)} skipped (they cannot change the answer)." if passed_over else "."
    )
    model_line = f"Model {model.sha256[:12]} ({model.workload.value}, input {model.input_size})."
    best = next((label for _, label in picked if label), None)
    subject = f"AYCI run {run_id[:8]}: {status}" + (f", fastest {best}" if best else "")

    cells = [[format_cell(key, row.cell(key)) for key, _ in COLUMNS] for row in rows]
    headers = [title for _, title in COLUMNS]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    text_table = [" | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    text_table.append("-+-".join("-" * w for w in widths))
    text_table += [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]

    text = [headline, model_line, ""]
    text.append("Recommendation:")
    basis = {row.combination: row.agreement_basis for row in rows}
    text += [f"  {kind}: {label or 'none qualifies'}{rests_on(basis.get(label))}" for kind, label in picked] or [
        "  none"
    ]
    text += [f"  {line}" for line in check_lines(recommendation)]
    text += [f"  not recommended {label}: {why}" for label, why in excluded.items()]
    under_traffic = traffic_lines(summary)
    text += ["", *under_traffic] if under_traffic else []
    text += ["", *text_table, ""]
    if failures:
        text.append("Failed combinations:")
        text += [f"  {label}: {reason}" for label, reason in failures]
        text.append("")
    if passed_over:
        text.append("Skipped combinations (they cannot change the answer):")
        text += [f"  {label}: {reason}" for label, reason in passed_over]
        text.append("")
    text.append(f"Results: {results_link}")
    text.append(f"On the page: {page_link}")

    e = html.escape
    th = "".join(
        f'<th style="text-align:left;padding:3px 8px;border-bottom:1px solid #ccc">{e(h)}</th>' for h in headers
    )
    trs = "".join(
        "<tr>" + "".join(f'<td style="padding:3px 8px;border-bottom:1px solid #eee">{e(c)}</td>' for c in r) + "</tr>"
        for r in cells
    )
    rec_html = (
        "".join(
            f"<li><b>{e(kind)}</b>: {e(label or 'none qualifies')}{e(rests_on(basis.get(label)))}</li>"
            for kind, label in picked
        )
        or "<li>none</li>"
    )
    rec_html += "".join(f"<li>{e(line)}</li>" for line in check_lines(recommendation))
    rec_html += "".join(f"<li>not recommended {e(label)}: {e(why)}</li>" for label, why in excluded.items())
    fail_html = (
        "<h3>Failed combinations</h3><ul>"
        + "".join(f"<li><b>{e(label)}</b>: {e(reason)}</li>" for label, reason in failures)
        + "</ul>"
        if failures
        else ""
    ) + (
        "<h3>Skipped combinations (they cannot change the answer)</h3><ul>"
        + "".join(f"<li><b>{e(label)}</b>: {e(reason)}</li>" for label, reason in passed_over)
        + "</ul>"
        if passed_over
        else ""
    )
    traffic_html = "<h3>Under your traffic</h3><pre>" + e("\n".join(under_traffic)) + "</pre>" if under_traffic else ""
    body = (
        f'<html><body style="font-family:sans-serif">'
        f"<p>{e(headline)}<br>{e(model_line)}</p>"
        f"<h3>Recommendation</h3><ul>{rec_html}</ul>"
        f"{traffic_html}"
        f'<table style="border-collapse:collapse;font-size:13px">'
        f"<thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"
        f"{fail_html}"
        f'<p><a href="{e(results_link)}">Results: {e(results_link)}</a><br>'
        f'<a href="{e(page_link)}">On the page: {e(page_link)}</a></p>'
        f"</body></html>"
    )
    return {"subject": subject, "text": "\n".join(text), "html": body}


def results_document(summary: RunSummary | dict[str, Any], results_url: str) -> dict[str, Any]:
    """The results as JSON: the table rows (the same as the CLI's and the email's), the
    recommendation, the Pareto front and the failures."""
    summary = as_summary(summary)
    recommendation = summary.recommendation
    return {
        "run_id": summary.run_id,
        "status": summary.status,
        "archived_at": summary.archived_at,
        "model": summary.model.model_dump(mode="json", exclude_unset=True),
        "columns": [{"key": key, "title": title} for key, title in COLUMNS],
        "rows": [row.model_dump(mode="json", exclude_unset=True) for row in summary_rows(summary)],
        "recommendation": recommendation.model_dump(mode="json", exclude_unset=True) if recommendation else {},
        "recommended": {kind: label for kind, label in picks(recommendation) if label},
        "pareto_front": recommendation.pareto if recommendation else [],  # the archiver's, over the candidates
        "failures": [{"combination": f.label, "stage": f.stage.value, "reason": f.reason} for f in summary.failures],
        "results_url": results_url,
    }


def results_csv(summary: RunSummary | dict[str, Any]) -> str:
    """The table rows as CSV, one column per table column, raw numbers (not rounded)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow([key for key, _ in COLUMNS])
    for row in summary_rows(summary):
        writer.writerow(["" if row.cell(key) is None else row.cell(key) for key, _ in COLUMNS])
    return out.getvalue()
