"""Notifier: one email per archived run, whatever its status (a failed run gets one too).

The email (plain text and HTML) has the run's table (the same rows as the CLI, the CSV and
the page: `summary_rows`), the recommendation, each failed combination with its reason, and
the link to the results.

Once per run: before sending, the notifier claims the run with a conditional write of
`runs/{run_id}/email.json`, so two deliveries of `RunArchived` (SQS delivers at least once,
possibly to two workers at a time) send one email. If sending fails, the claim is marked
failed and the error raised, so the redelivery takes the claim over and tries again. A worker
that dies in the middle of sending leaves the claim `sending`: no second email is risked.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog

from core.ports import Mailer, ObjectStore
from schemas.events import Envelope, Payload, RunArchived
from schemas import keys
from schemas.documents import RunSummary
from services.archiver.report import COLUMNS, format_cell, summary_rows

log = structlog.get_logger()

RECOMMENDATION_KINDS = ("fastest", "cheapest", "balanced")


@dataclass
class NotifierDeps:
    store: ObjectStore
    mailer: Mailer | None
    results_url: str = "http://127.0.0.1:8000"


def _claim(store: ObjectStore, run_id: str) -> bool:
    """True if this worker may send the run's email now."""
    record = {"state": "sending", "at": datetime.now(UTC).isoformat()}
    if store.put_bytes(keys.email(run_id), json.dumps(record).encode(), if_absent=True):
        return True
    previous = json.loads(store.get_bytes(keys.email(run_id)))
    if previous.get("state") == "failed":  # an earlier attempt failed: take it over
        store.put_bytes(keys.email(run_id), json.dumps(record).encode())
        return True
    return False


def on_run_archived(event: Envelope, deps: NotifierDeps) -> list[Payload]:
    archived: RunArchived = event.payload
    if not archived.email or deps.mailer is None:
        return []
    if not _claim(deps.store, event.run_id):
        log.info("email_already_sent", run_id=event.run_id)
        return []
    summary = RunSummary.read(deps.store.get_bytes(archived.summary_key)).to_dict()
    email = compose(summary, deps.results_url)
    try:
        message_id = deps.mailer.send(to=archived.email, **email)
    except Exception as exc:
        deps.store.put_bytes(keys.email(event.run_id), json.dumps({"state": "failed", "error": f"{type(exc).__name__}: {exc}"[:500]}).encode())
        raise
    deps.store.put_bytes(keys.email(event.run_id), json.dumps({"state": "sent", "message_id": message_id, "to": archived.email}).encode())
    log.info("email_sent", run_id=event.run_id, message_id=message_id)
    return []


def compose(summary: dict, results_url: str) -> dict[str, str]:
    """`{"subject", "text", "html"}` of a run's email, from its stored summary. It links the
    results (`{results_url}/runs/{run_id}/results`, for the API key holder) and the page
    that shows them (`{results_url}/#run={run_id}`)."""
    run_id, status = summary["run_id"], summary["status"]
    results_link = f"{results_url.rstrip('/')}/runs/{run_id}/results"
    page_link = f"{results_url.rstrip('/')}/#run={run_id}"
    rows = summary_rows(summary)
    recommendation = summary.get("recommendation") or {}
    picks = [(kind, recommendation[kind]) for kind in RECOMMENDATION_KINDS if kind in recommendation]
    failures = [(f["label"], f"{f['stage']}: {f['reason']}") for f in summary.get("failures", [])]
    measured = len(summary.get("results", []))
    model = summary.get("model") or {}
    headline = f"Run {run_id} is {status}: {measured} combination(s) measured, {len(failures)} failed."
    model_line = f"Model {model.get('sha256', '?')[:12]} ({model.get('workload', '?')}, input {model.get('input_size', '?')})."
    best = next((label for _, label in picks if label), None)
    subject = f"AYCI run {run_id[:8]}: {status}" + (f", fastest {best}" if best else "")

    cells = [[format_cell(key, row.get(key)) for key, _ in COLUMNS] for row in rows]
    headers = [title for _, title in COLUMNS]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    text_table = [" | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    text_table.append("-+-".join("-" * w for w in widths))
    text_table += [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]

    text = [headline, model_line, ""]
    text.append("Recommendation:")
    text += [f"  {kind}: {label or 'none qualifies'}" for kind, label in picks] or ["  none"]
    text += [f"  not recommended {label}: {why}" for label, why in (recommendation.get("excluded") or {}).items()]
    text += ["", *text_table, ""]
    if failures:
        text.append("Failed combinations:")
        text += [f"  {label}: {reason}" for label, reason in failures]
        text.append("")
    text.append(f"Results: {results_link}")
    text.append(f"On the page: {page_link}")

    e = html.escape
    th = "".join(f'<th style="text-align:left;padding:3px 8px;border-bottom:1px solid #ccc">{e(h)}</th>' for h in headers)
    trs = "".join(
        "<tr>" + "".join(f'<td style="padding:3px 8px;border-bottom:1px solid #eee">{e(c)}</td>' for c in r) + "</tr>" for r in cells
    )
    rec_html = "".join(f"<li><b>{e(kind)}</b>: {e(label or 'none qualifies')}</li>" for kind, label in picks) or "<li>none</li>"
    rec_html += "".join(f"<li>not recommended {e(label)}: {e(why)}</li>" for label, why in (recommendation.get("excluded") or {}).items())
    fail_html = (
        "<h3>Failed combinations</h3><ul>" + "".join(f"<li><b>{e(label)}</b>: {e(reason)}</li>" for label, reason in failures) + "</ul>"
        if failures else ""
    )
    body = (
        f'<html><body style="font-family:sans-serif">'
        f"<p>{e(headline)}<br>{e(model_line)}</p>"
        f"<h3>Recommendation</h3><ul>{rec_html}</ul>"
        f'<table style="border-collapse:collapse;font-size:13px"><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>'
        f"{fail_html}"
        f'<p><a href="{e(results_link)}">Results: {e(results_link)}</a><br>'
        f'<a href="{e(page_link)}">On the page: {e(page_link)}</a></p>'
        f"</body></html>"
    )
    return {"subject": subject, "text": "\n".join(text), "html": body}


HANDLERS = {"RunArchived": on_run_archived}
