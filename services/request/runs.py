"""A run as the user sees it: its record, its progress per combination, its results (JSON
or CSV) and the Pareto front of p99 against cost. Read by key from the store, never by
listing: `runs/{run_id}/run.json` (written at submission), then the archiver's
`plan.json`, `outcomes/{combo_key}.json` and `summary.json`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from core.outcomes import arrived_outcomes
from core.ports import NotFound, ObjectStore
from core.results import stored_plan
from core.run_plan import measured_combos
from schemas import keys
from schemas.combos import Combo, combo_key
from schemas.documents import RunRecord, RunSummary
from schemas.events import STORED, Envelope, FailureStage, RequestSubmitted, RunDeadlineReached


def record_run(store: ObjectStore, run_id: str, request: RequestSubmitted) -> bool:
    """Write the run's record (owner, combinations); False if a run with this id exists."""
    record = RunRecord(
        run_id=run_id,
        owner=request.owner,
        submitted_at=datetime.now(UTC).isoformat(),
        combos={combo_key(request.model, c, request.tuning): c for c in measured_combos(request)},
        request=request.model_dump(mode="json"),
    )
    return store.put_bytes(keys.run_record(run_id), record.to_bytes(), if_absent=True)


def owner_usage(store: ObjectStore, owner: str, now: datetime) -> tuple[int, int]:
    """(runs of `owner` still running, combinations they submitted today, UTC). Runs are found
    by the day they were submitted (today and yesterday: a run never outlives a day's deadline)."""
    today, yesterday = now.date().isoformat(), (now - timedelta(days=1)).date().isoformat()
    in_flight = combinations_today = 0
    for day in (yesterday, today):
        for key in store.list_keys(keys.owner_day_prefix(owner, day)):
            run_id = key.rsplit("/", 1)[-1]
            if day == today:
                combinations_today += int(store.get_bytes(key) or b"0")
            if not store.exists(keys.summary(run_id)):
                in_flight += 1
    return in_flight, combinations_today


def count_run(store: ObjectStore, owner: str, run_id: str, combinations: int, now: datetime) -> None:
    store.put_bytes(keys.owner_run(owner, now.date().isoformat(), run_id), str(combinations).encode(), if_absent=True)


def withdraw_run(store: ObjectStore, run_id: str, reason: str) -> None:
    """Mark a run whose request could not be published as never started: it belongs to
    nobody, so it is a 404 for everyone."""
    store.put_bytes(keys.run_record(run_id), RunRecord(run_id=run_id, owner=None, not_submitted=reason).to_bytes())


def load_run(store: ObjectStore, run_id: str, owner: str) -> dict | None:
    """The run's record, or None if there is none or it belongs to another owner (the two
    look the same from outside)."""
    try:
        record = RunRecord.read(store.get_bytes(keys.run_record(run_id)))
    except NotFound:
        return None
    return record.to_dict() if record.owner == owner else None


def cancel_run(store: ObjectStore, record: dict, now) -> Envelope | None:
    """The event that ends a running run now (its pending combinations fail "cancelled"), or
    None if it has ended already."""
    run_id = record["run_id"]
    if store.exists(keys.summary(run_id)):
        return None
    request = RequestSubmitted.model_validate(record["request"], context=STORED) if record.get("request") else None
    closing = RunDeadlineReached(
        deadline=now, reason="cancelled by its owner", stage=FailureStage.cancelled, request=request
    )
    return Envelope.wrap(closing, run_id=run_id, producer="request")


def load_summary(store: ObjectStore, run_id: str) -> RunSummary | None:
    try:
        return RunSummary.read(store.get_bytes(keys.summary(run_id)))
    except NotFound:
        return None


def run_progress(store: ObjectStore, record: dict) -> dict:
    """Status and one entry per combination: `queued`, `measured`, `failed` or `skipped` (not
    measured: it cannot change the answer; with the reason), with p50/p99 as soon as a combination
    is measured."""
    run_id = record["run_id"]
    summary = load_summary(store, run_id)
    plan = stored_plan(store, run_id)
    combos = {k: c.model_dump(mode="json") for k, c in plan.combos.items()} if plan else record["combos"]
    entries = []
    arrived = arrived_outcomes(store, run_id)
    for key, combo in combos.items():
        entry = {"combo_key": key, "label": Combo.model_validate(combo).label, **combo, "state": "queued"}
        outcome = arrived.outcome(key)
        if outcome and outcome.status == "done":
            result = arrived.result(outcome)
            entry.update(
                state="measured", p50_ms=result.latency_ms.p50, p99_ms=result.latency_ms.p99, reused=outcome.reused
            )
        elif outcome and outcome.stage == FailureStage.skipped:
            entry.update(state="skipped", reason=outcome.reason)
        elif outcome:
            entry.update(state="failed", reason=f"{outcome.stage.value}: {outcome.reason}")
        entries.append(entry)
    if summary:  # the archiver's word is final (e.g. combinations failed at the deadline)
        failed = {f.combo_key: f for f in summary.failures}
        for entry in entries:
            if entry["combo_key"] in failed and entry["state"] == "queued":
                f = failed[entry["combo_key"]]
                entry.update(state="failed", reason=f"{f.stage.value}: {f.reason}")
    counts = {state: sum(e["state"] == state for e in entries) for state in ("queued", "measured", "failed", "skipped")}
    return {
        "run_id": run_id,
        "status": summary.status if summary else "running",
        "submitted_at": record["submitted_at"],
        "total": len(entries),
        **counts,
        "combinations": entries,
    }
