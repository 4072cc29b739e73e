"""Archiver: collects what arrives for a run and ends every run with a stored summary
(`runs/{run id}/summary.json`) and an explicit status.

It learns what to wait for from `RunPlanned`. Each arrival (a result or a failure) is kept
under `runs/{run id}/outcomes/{combo key}.json` (first one wins). The run ends when every
planned combination has an outcome, or at its deadline, when the missing ones are failed as
never reported. Only the archiver whose conditional write of the summary succeeds announces
`RunArchived`, so two workers racing on the last arrivals archive a run once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import structlog

from core.ports import ObjectStore
from core.runtime import Delayed
from schemas.events import (
    ComboFailed,
    Envelope,
    FailureStage,
    InferenceDone,
    Payload,
    RunArchived,
    RunDeadlineReached,
    RunPlanned,
    RunStatus,
)
from schemas.cost import UnknownPriceRegion, cost_block
from schemas import keys
from schemas.documents import FailedCombination, MeasuredResult, Outcome, RunSummary
from services.archiver.recommendation import recommend

log = structlog.get_logger()


@dataclass
class ArchiverDeps:
    store: ObjectStore
    now: callable = lambda: datetime.now(UTC)


def on_run_planned(event: Envelope, deps: ArchiverDeps) -> list[Payload | Delayed]:
    planned: RunPlanned = event.payload
    deps.store.put_bytes(keys.plan(event.run_id), planned.model_dump_json().encode(), if_absent=True)
    return [Delayed(RunDeadlineReached(deadline=planned.deadline), planned.deadline), *_archive_if_complete(event.run_id, deps)]


def on_inference_done(event: Envelope, deps: ArchiverDeps) -> list[Payload]:
    done: InferenceDone = event.payload
    outcome = Outcome(status="done", result_key=done.result_key, reused=done.reused)
    deps.store.put_bytes(keys.outcome(event.run_id, done.combo_key), outcome.to_bytes(), if_absent=True)
    return _archive_if_complete(event.run_id, deps)


def on_combo_failed(event: Envelope, deps: ArchiverDeps) -> list[Payload]:
    failed: ComboFailed = event.payload
    outcome = Outcome(status="failed", stage=failed.stage, reason=failed.reason)
    deps.store.put_bytes(keys.outcome(event.run_id, failed.combo_key), outcome.to_bytes(), if_absent=True)
    return _archive_if_complete(event.run_id, deps)


def on_deadline_reached(event: Envelope, deps: ArchiverDeps) -> list[Payload | Delayed]:
    deadline: RunDeadlineReached = event.payload
    if deps.store.exists(keys.summary(event.run_id)):
        return []
    if deps.now() < deadline.deadline:  # a delayed message can only wait so long: wait again
        return [Delayed(deadline, deadline.deadline)]
    if not deps.store.exists(keys.plan(event.run_id)):
        return []
    return _archive(event.run_id, deps, at_deadline=True)


def _archive_if_complete(run_id: str, deps: ArchiverDeps) -> list[Payload]:
    if not deps.store.exists(keys.plan(run_id)) or deps.store.exists(keys.summary(run_id)):
        return []
    plan = RunPlanned.model_validate_json(deps.store.get_bytes(keys.plan(run_id)))
    if all(deps.store.exists(keys.outcome(run_id, key)) for key in plan.combos):
        return _archive(run_id, deps, at_deadline=False)
    return []


def _archive(run_id: str, deps: ArchiverDeps, *, at_deadline: bool) -> list[Payload]:
    plan = RunPlanned.model_validate_json(deps.store.get_bytes(keys.plan(run_id)))
    results, failures = [], []
    for key, combo in plan.combos.items():
        if deps.store.exists(keys.outcome(run_id, key)):
            outcome = Outcome.read(deps.store.get_bytes(keys.outcome(run_id, key)))
        else:
            outcome = Outcome(status="failed", stage=FailureStage.deadline, reason="never reported before the run's deadline")
        if outcome.status == "done":
            result = MeasuredResult.read(deps.store.get_bytes(outcome.result_key)).to_dict()
            results.append(priced_for_region({**result, "reused": outcome.reused}, plan.request.price_region))
        else:
            failures.append(FailedCombination(combo_key=key, combo=combo, label=combo.label, stage=outcome.stage, reason=outcome.reason))
    status = RunStatus.failed if not results else RunStatus.partial if failures else RunStatus.complete
    request = plan.request
    recommendation = recommend(results, slo_p99_ms=request.slo_p99_ms, min_agreement=request.min_agreement, balance_weight=request.balance_weight)
    summary = RunSummary(
        run_id=run_id, status=status.value, archived_at=deps.now().isoformat(), closed_at_deadline=at_deadline,
        model=plan.model, request=request.model_dump(mode="json"), results=results, failures=failures,
        recommendation=recommendation,
    )
    if not deps.store.put_bytes(keys.summary(run_id), summary.to_bytes(indent=1), if_absent=True):
        return []  # another archiver got there first
    log.info("run_archived", run_id=run_id, status=status.value, succeeded=len(results), failed=len(failures))
    return [
        RunArchived(
            status=status, summary_key=keys.summary(run_id), succeeded=len(results), failed=len(failures),
            failures={f.label: f"{f.stage.value}: {f.reason}" for f in failures},
            recommendation=recommendation, email=request.email,
        )
    ]


def priced_for_region(result: dict, region: str) -> dict:
    """`result` with its cost in the run's price region. A stored result was costed in the
    region of the run that measured it; the billed durations are the same everywhere."""
    cost = result.get("cost")
    if not cost or cost.get("price_region") == region:
        return result
    try:
        repriced = cost_block(
            billed_ms_per_request=cost["billed_ms_per_request"], cold_start_ms=cost["cold_start_billed_ms"],
            memory_mb=result["combo"]["memory_mb"], batch_size=result["combo"]["batch_size"],
            hardware=result["combo"]["hardware"], region=region,
        )
    except UnknownPriceRegion as exc:  # the price table changed since the request was accepted
        log.warning("price_region_unknown", region=region, reason=str(exc))
        return result
    return {**result, "cost": repriced}


HANDLERS = {
    "RunPlanned": on_run_planned,
    "InferenceDone": on_inference_done,
    "ComboFailed": on_combo_failed,
    "RunDeadlineReached": on_deadline_reached,
}
