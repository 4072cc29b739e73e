"""Archiver: collects what arrives for a run and ends every run with a stored summary
(`runs/{run id}/summary.json`) and an explicit status.

It learns what to wait for from `RunPlanned` (kept with an `expected-{N}` marker beside the
outcomes). Each arrival (a result or a failure) is kept under `runs/{run id}/outcomes/{combo
key}.json` (first one wins), a batch of reused results as one object (`reused-{N}-{event
id}.json`, `core/outcomes.py`); one listing of the outcomes (a page per 1,000) tells whether all
N have arrived, so an arrival costs a few store calls whatever the run's size
(`bench/bench_archiver.py`). The run ends when every planned combination has an outcome, at its
deadline (the missing ones failed as never reported), or at once when its request or plan was
dead-lettered (`RunDeadlineReached` with a reason). One unreadable result fails only its
combination. The results the run measured are kept in one pack of the model
(`result-packs/`, `core/results.py`) for later resubmissions, written by the archiver whose
conditional write of the summary succeeded (racing archivers write one pack).

The announcement follows from what is stored: a run with a summary and no announcement record
(the notifier's `runs/{run id}/email.json`, or only a failed attempt) is announced by whatever
arrives next for it (a late result, its deadline, the restart scan of `recovery.py`), always
under one event id derived from the run id (`announcement_id`). So an announcement whose
publish failed (the worker died, or `PutEvents` failed until the event was dead-lettered) is
not lost, and the notifier, idempotent on the event id, sends one email.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog

from core.lambda_model.prediction import predict_run
from core.outcomes import Arrived, arrived_outcomes
from core.ports import NotFound, ObjectStore
from core.results import QUICK_SUFFIX, is_quick, pack_results, priced_for_region, reused_result
from core.run_plan import measured_combos
from core.runtime import Delayed, WithId
from report import RECOMMENDATION_KINDS, recommend
from report.recommendation import with_break_even
from schemas import keys
from schemas.combos import Hardware, Optimizer, artifact_key, combo_key
from schemas.documents import (
    FailedCombination,
    Outcome,
    PickChecks,
    PredictionCheck,
    Recommendation,
    ReusedOutcomes,
    RunSummary,
    SummaryResult,
)
from schemas.events import (
    STORED,
    ComboFailed,
    ComboPending,
    CombosReused,
    Envelope,
    FailureStage,
    InferenceDone,
    Payload,
    RunArchived,
    RunDeadlineReached,
    RunPlanned,
    RunStatus,
    SchemaError,
)
from schemas.lambda_limits import lambda_threads
from schemas.recommendation import PickCheckReport
from services.archiver import racing

log = structlog.get_logger()
ARCHIVE_READERS = 16  # concurrent reads when a run closes


@dataclass
class ArchiverDeps:
    store: ObjectStore
    now: callable = lambda: datetime.now(UTC)
    # (hardware, optimizer) -> the CPU an artifact is built for; None: predicted picks are not checked
    target_cpu: Callable[[Hardware, Optimizer], str] | None = None


def on_run_planned(event: Envelope, deps: ArchiverDeps) -> list[Payload | Delayed]:
    planned: RunPlanned = event.payload
    _keep_plan(event.run_id, planned, deps)
    racing.start_first_pass(event.run_id, planned, deps)  # a racing run's running answer starts gathering
    return [
        Delayed(RunDeadlineReached(deadline=planned.deadline), planned.deadline),
        *_archive_if_complete(event, deps),
    ]


def on_inference_done(event: Envelope, deps: ArchiverDeps) -> list[Payload]:
    done: InferenceDone = event.payload
    outcome = Outcome(status="done", result_key=done.result_key, reused=done.reused)
    where = (keys.refined_outcome if done.refine else keys.outcome)(event.run_id, done.combo_key)  # racing
    deps.store.put_bytes(where, outcome.to_bytes(), if_absent=True)
    if done.refine:
        racing.on_refined(event, deps)
    return _archive_if_complete(event, deps)


def on_combos_reused(event: Envelope, deps: ArchiverDeps) -> list[Payload]:
    """Many stored results at once: one outcome object for all of them, then one check."""
    reused: CombosReused = event.payload
    record = ReusedOutcomes(results=reused.results, bundle=reused.bundle)
    deps.store.put_bytes(
        keys.reused_outcomes(event.run_id, event.event_id, len(reused.results)), record.to_bytes(), if_absent=True
    )
    return _archive_if_complete(event, deps)


def on_combo_failed(event: Envelope, deps: ArchiverDeps) -> list[Payload]:
    failed: ComboFailed = event.payload
    outcome = Outcome(status="failed", stage=failed.stage, reason=failed.reason)
    where = (keys.refined_outcome if failed.refine else keys.outcome)(event.run_id, failed.combo_key)  # racing
    deps.store.put_bytes(where, outcome.to_bytes(), if_absent=True)
    return _archive_if_complete(event, deps)


def on_deadline_reached(event: Envelope, deps: ArchiverDeps) -> list[Payload | Delayed]:
    """The deadline, or an end forced with a reason (a dead-lettered request or plan): what
    has not arrived fails with that reason and the run is archived."""
    deadline: RunDeadlineReached = event.payload
    if deps.store.exists(keys.summary(event.run_id)):
        return _announce_again(event, deps)
    if (
        deadline.reason is None and deps.now() < deadline.deadline
    ):  # a delayed message can only wait so long: wait again
        return [Delayed(deadline, deadline.deadline)]
    if not deps.store.exists(keys.plan(event.run_id)):
        if deadline.request is None:
            return []
        request = deadline.request  # the run was never planned: plan it from its request, to end it
        combos = {combo_key(request.model, c, request.tuning): c for c in measured_combos(request)}
        _keep_plan(
            event.run_id,
            RunPlanned(model=request.model, combos=combos, deadline=deadline.deadline, request=request),
            deps,
        )
    missing = (deadline.stage, deadline.reason or "never reported before the run's deadline")
    return _archive(event, deps, at_deadline=True, missing=missing)


def _keep_plan(run_id: str, planned: RunPlanned, deps: ArchiverDeps) -> None:
    """The plan, and beside the outcomes a marker naming how many there will be: one listing
    of the outcomes then tells whether the run is complete, without reading the plan."""
    deps.store.put_bytes(keys.plan(run_id), planned.model_dump_json().encode(), if_absent=True)
    deps.store.put_bytes(keys.expected_outcomes(run_id, len(planned.combos)), b"", if_absent=True)


def _archive_if_complete(event: Envelope, deps: ArchiverDeps) -> list[Payload]:
    """Archive the run if every planned combination has an outcome. Costs one listing (a page
    per 1,000 combinations) per arrival, whatever the run's size."""
    listed = deps.store.list_keys(keys.outcomes_prefix(event.run_id))
    racing.first_pass_outcome(event, deps, keys.outcomes_in(listed))  # a quick outcome joins the running answer
    expected = keys.expected_outcomes_in(listed)
    if expected is None or keys.outcomes_in(listed) < expected:
        return []
    if deps.store.exists(keys.summary(event.run_id)):
        return _announce_again(event, deps)
    return _archive(event, deps, at_deadline=False)


def _archive(
    event: Envelope, deps: ArchiverDeps, *, at_deadline: bool, missing: tuple[FailureStage, str] | None = None
) -> list[Payload]:
    run_id = event.run_id
    plan = RunPlanned.model_validate_json(deps.store.get_bytes(keys.plan(run_id)), context=STORED)
    request = plan.request
    checks = _pick_checks(run_id, deps)
    stage, reason = missing or (FailureStage.deadline, "never reported before the run's deadline")
    missing_outcome = Outcome(status="failed", stage=stage, reason=reason)
    # the one step that reads every combination (once per run): concurrently, so a large run
    # closes in seconds on S3, not in one round trip per object; reused ones a bundle at a time
    arrived = arrived_outcomes(deps.store, run_id)
    with ThreadPoolExecutor(max_workers=ARCHIVE_READERS) as pool:
        ends = _ends_of(list(plan.combos), arrived, missing_outcome, pool)
        checked = _ends_of(list(checks.combos), arrived, None, pool) if checks else []
    ends = [racing.refined_end(key, end, arrived, _end_of) for key, end in zip(plan.combos, ends, strict=True)]
    results, failures = [], []
    for (key, combo), (outcome, result) in zip(plan.combos.items(), ends, strict=True):
        if result is not None:
            results.append(priced_for_region(_row(result, outcome), request.price_region))
        else:
            failures.append(
                FailedCombination(
                    combo_key=key, combo=combo, label=combo.label, stage=outcome.stage, reason=outcome.reason
                )
            )
    if not at_deadline and (raced := racing.race_quick_pass(event, plan, results, failures, arrived, deps)) is not None:
        return raced  # racing (core/racing.py): the quick pass decides what is measured again
    if checks is not None and not at_deadline and any(outcome is None for outcome, _ in checked):
        return []  # the checks of predicted picks are still being measured
    predicted_rows: list[SummaryResult] = []
    check_report: list[PickCheckReport] = []
    if plan.predicted:
        predicted_rows, refused = predict_run(
            request, list(plan.predicted.values()), results, failures, request.price_region
        )
        failures += refused
        if checks is None and not at_deadline:
            first = recommend(
                results + predicted_rows,
                slo_p99_ms=request.slo_p99_ms,
                min_agreement=request.min_agreement,
                balance_weight=request.balance_weight,
            )
            emitted = _check_picks(event, plan, first, predicted_rows, deps)
            if emitted is not None:
                return emitted
        if checks is not None:
            predicted_rows, results, check_report = _with_checks(
                checks, checked, predicted_rows, results, request.price_region
            )
    # a combination skipped because it cannot change the answer (TVM's tuning) is not a failure of the run
    failed = [f for f in failures if f.stage != FailureStage.skipped]
    status = RunStatus.failed if not results else RunStatus.partial if failed else RunStatus.complete
    results = with_break_even(results, request.price_region, min_agreement=request.min_agreement)
    decided = racing.read_racing(deps.store, run_id)
    results, stopped = racing.mark_stopped(results, decided)
    recommendation = recommend(
        [r for r in results if r.label not in stopped] + predicted_rows,
        slo_p99_ms=request.slo_p99_ms,
        min_agreement=request.min_agreement,
        balance_weight=request.balance_weight,
        scale_rows=[r for r in results if r.label in stopped],  # balanced spans them, as in an exact run
    )
    if plan.predicted:
        recommendation = recommendation.with_checks(check_report)
    recommendation, answer = racing.final_answer(
        results + predicted_rows, recommendation, decided, stopped, predict=bool(plan.predicted)
    )
    if decided is not None or deps.store.exists(keys.answer(run_id)):  # a race, or a first answer without one
        deps.store.put_bytes(keys.answer(run_id), json.dumps(answer).encode())
    results = results + predicted_rows
    summary = RunSummary(
        run_id=run_id,
        status=status.value,
        archived_at=deps.now().isoformat(),
        closed_at_deadline=at_deadline,
        model=plan.model,
        request=request.model_dump(mode="json"),
        results=results,
        failures=failures,
        recommendation=recommendation,
        archived_by=event.event_id,
    )
    if not deps.store.put_bytes(keys.summary(run_id), summary.to_bytes(), if_absent=True):
        return _announce_again(event, deps)  # another archiver got there first: it writes the pack
    measured = {
        outcome.result_key: result for outcome, result in [*ends, *checked] if result is not None and not outcome.reused
    }
    pack_results(deps.store, plan.model.sha256, run_id, datetime.fromisoformat(summary.archived_at), measured)
    log.info("run_archived", run_id=run_id, status=status.value, succeeded=len(results), failed=len(failures))
    return [_announce(summary)]


def _ends_of(
    combo_keys: list[str], arrived: Arrived, missing: Outcome | None, pool: ThreadPoolExecutor
) -> list[tuple[Outcome | None, dict | None]]:
    """`_end_of` each combination: concurrently those the store is read for, directly those
    whose end is at hand (reused, with their bundle: a resubmitted 1,536 matrix queues no
    task, each a future, a lock and a condition)."""
    read = [key for key in combo_keys if not arrived.at_hand(key)]
    ends = dict(zip(read, pool.map(lambda key: _end_of(key, arrived, missing), read), strict=True))
    return [ends[key] if key in ends else _end_of(key, arrived, missing) for key in combo_keys]


def _end_of(key: str, arrived: Arrived, missing: Outcome | None) -> tuple[Outcome | None, dict | None]:
    """A combination's outcome and, if it was measured, its result."""
    outcome = arrived.outcome(key) or missing
    if outcome is None or outcome.status != "done":
        return outcome, None
    try:
        return outcome, arrived.result_document(outcome)
    except (NotFound, SchemaError) as exc:  # one unreadable result fails its combination, not the run
        return Outcome(
            status="failed", stage=FailureStage.inference, reason=f"its stored result cannot be read: {exc}"[:2000]
        ), None


def _pick_checks(run_id: str, deps: ArchiverDeps) -> PickChecks | None:
    try:
        return PickChecks.read(deps.store.get_bytes(keys.pick_checks(run_id)))
    except NotFound:
        return None


def _check_picks(
    event: Envelope,
    plan: RunPlanned,
    recommendation: Recommendation,
    predicted_rows: list[SummaryResult],
    deps: ArchiverDeps,
) -> list[Payload] | None:
    """If the recommendation picks predicted sizes this host can measure as Lambda would (up to 2
    vCPUs, natively), measure them before closing: the checks are written once (the event that
    wins the write emits them, again if it is redelivered) and the run waits for one more
    outcome each. None: nothing to check, close the run now."""
    if deps.target_cpu is None:
        return None
    by_label = {r.label: r for r in predicted_rows}
    kinds: dict[str, list[str]] = {}
    for kind in RECOMMENDATION_KINDS:
        row = by_label.get(recommendation.pick(kind) or "")
        if row is not None and lambda_threads(row.combo.memory_mb) <= 2 and not row.emulated:
            kinds.setdefault(row.combo_key, []).append(kind)
    if not kinds:
        return None
    rows = {r.combo_key: r for r in predicted_rows}
    combos = {key: plan.predicted[key] for key in kinds}
    checks = PickChecks(
        combos=combos, predicted={key: rows[key] for key in kinds}, kinds=kinds, decided_by=event.event_id
    )
    if not deps.store.put_bytes(keys.pick_checks(event.run_id), checks.to_bytes(), if_absent=True):
        checks = _pick_checks(event.run_id, deps)
        if checks is None or checks.decided_by != event.event_id:
            return []  # another arrival decided them
    deps.store.put_bytes(
        keys.expected_outcomes(
            event.run_id, len(plan.combos) + racing.refinements(deps.store, event.run_id) + len(checks.combos)
        ),
        b"",
        if_absent=True,
    )
    log.info("checking_predicted_picks", run_id=event.run_id, picks=[c.label for c in checks.combos.values()])
    out: list[Payload] = []
    for key, combo in checks.combos.items():
        reused = None if plan.request.force else reused_result(deps.store, key)
        if reused is not None:
            out.append(reused)
            continue
        target_cpu = deps.target_cpu(combo.hardware, combo.optimizer)
        out.append(
            ComboPending(
                model=plan.model,
                combo=combo,
                combo_key=key,
                artifact_key=artifact_key(plan.model, combo, target_cpu, plan.request.tuning),
                target_cpu=target_cpu,
                tuning_trials=plan.request.tuning_trials,
                min_agreement=plan.request.min_agreement,
            )
        )
    return out


def _with_checks(
    checks: PickChecks,
    checked: list,
    predicted_rows: list[SummaryResult],
    results: list[SummaryResult],
    region: str,
) -> tuple[list[SummaryResult], list[SummaryResult], list[PickCheckReport]]:
    """The checked picks' measurements in place of their predictions, each with what was
    predicted beside it: (predicted rows left, results, the check report)."""
    report = []
    checked_keys = set()
    for (key, combo), (outcome, result) in zip(checks.combos.items(), checked, strict=True):
        guess = checks.predicted[key]
        entry = {
            "combination": combo.label,
            "picked_as": checks.kinds.get(key, []),
            "predicted_p50_ms": guess.latency_ms.p50,
            "predicted_p99_ms": guess.latency_ms.p99,
            "interval": guess.interval,
        }
        checked_keys.add(key)
        if result is None:
            why = outcome.reason if outcome is not None else "not measured before the run's deadline"
            report.append(
                PickCheckReport(**entry, measured=False, verdict=f"could not be checked ({why}): no longer recommended")
            )
            continue
        measured = priced_for_region(_row(result, outcome), region)
        p50, p99 = measured.latency_ms.p50, measured.latency_ms.p99
        low50, high50 = guess.interval.p50
        low99, high99 = guess.interval.p99
        within = low50 <= p50 <= high50 and low99 <= p99 <= high99
        verdict = (
            "measured within the predicted interval"
            if within
            else f"measured outside the predicted interval (p50 {p50:.2f} ms against {low50:.2f}-{high50:.2f}, "
            f"p99 {p99:.2f} ms against {low99:.2f}-{high99:.2f}): re-ranked with the measurement"
        )
        check = PredictionCheck(
            predicted_p50_ms=guess.latency_ms.p50,
            predicted_p99_ms=guess.latency_ms.p99,
            interval=guess.interval,
            within_interval=within,
        )
        results.append(measured.model_copy(update={"check": check}))
        report.append(
            PickCheckReport(
                **entry,
                measured=True,
                measured_p50_ms=p50,
                measured_p99_ms=p99,
                within_interval=within,
                verdict=verdict,
            )
        )
    return [r for r in predicted_rows if r.combo_key not in checked_keys], results, report


def _announcement(summary: RunSummary) -> RunArchived:
    return RunArchived(
        status=RunStatus(summary.status),
        summary_key=keys.summary(summary.run_id),
        succeeded=len(summary.results),
        failed=len(summary.failures),
        failures={f.label: f"{f.stage.value}: {f.reason}" for f in summary.failures},
        recommendation=summary.recommendation,
        email=summary.request.get("email"),
    )


def announcement_id(run_id: str) -> str:
    """The event id of a run's one announcement, whichever arrival (or restart) publishes it."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"ayci/runs/{run_id}/RunArchived"))


def _announce(summary: RunSummary) -> WithId:
    return WithId(_announcement(summary), announcement_id(summary.run_id))


def announced(store: ObjectStore, run_id: str) -> bool:
    """Whether the run's announcement reached the notifier: its record of the email says sent,
    sending, or why none is sent (no address, no mailer). Absent, or only a failed attempt:
    not announced (the next arrival announces again)."""
    try:
        record = json.loads(store.get_bytes(keys.email(run_id)))
    except NotFound:
        return False
    except ValueError:  # unreadable: leave it to the notifier, which reads it too
        return True
    return not (isinstance(record, dict) and record.get("state") == "failed")


def _announce_again(event: Envelope, deps: ArchiverDeps) -> list[Payload]:
    """The run is archived. Announce it again unless its announcement is recorded: the worker
    may have died between the summary's write and the publish, or the publish failed until the
    archiving event was dead-lettered. Always with the same event id (`announcement_id`), so
    the email is never lost and never sent twice. The event that archived the run also makes
    sure the result pack is written (it may have died before writing it)."""
    stored = deps.store.get_bytes(keys.summary(event.run_id))
    summary: RunSummary | None = None
    if RunSummary.archived_by_in(stored) == event.event_id:
        summary = RunSummary.read(stored)
        _ensure_pack(summary, deps)
    if announced(deps.store, event.run_id):
        return []
    return [_announce(summary or RunSummary.read(stored))]


def announce_if_due(store: ObjectStore, run_id: str) -> WithId | None:
    """The announcement of an archived run that has none recorded (the restart scan), else None."""
    if announced(store, run_id):
        return None
    try:
        return _announce(RunSummary.read(store.get_bytes(keys.summary(run_id))))
    except NotFound:
        return None


def _ensure_pack(summary: RunSummary, deps: ArchiverDeps) -> None:
    """The result pack of an archived run, if its archiver died before writing it: the results
    the run measured, read again from their stored versions."""
    archived_at = datetime.fromisoformat(summary.archived_at)
    measured_keys = [
        keys.result_version(r.combo_key, f"{r.run_id or summary.run_id}{QUICK_SUFFIX if is_quick(r) else ''}")
        for r in summary.results
        if not r.reused and not r.predicted and r.combo_key
    ]
    pack_key = keys.result_pack(summary.model.sha256, archived_at, summary.run_id)
    if not measured_keys or deps.store.exists(pack_key):
        return
    measured = {}
    for key in measured_keys:
        try:
            measured[key] = json.loads(deps.store.get_bytes(key))
        except (NotFound, ValueError):
            continue
    pack_results(deps.store, summary.model.sha256, summary.run_id, archived_at, measured)


def _row(result: dict, outcome: Outcome) -> SummaryResult:
    """A stored result (as `MeasuredResult.to_dict` gives it) as a row of the run's summary: the
    result as stored, with `reused`."""
    return SummaryResult.model_validate({**result, "reused": outcome.reused})


HANDLERS = {
    RunPlanned: on_run_planned,
    InferenceDone: on_inference_done,
    CombosReused: on_combos_reused,
    ComboFailed: on_combo_failed,
    RunDeadlineReached: on_deadline_reached,
}
