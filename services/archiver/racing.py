"""The archiver's part of racing (`core/racing.py`): the running answer (`runs/{id}/answer.json`)
from the plan on: gathering each quick outcome, shown as the first (provisional) answer once every
engine's lead has its outcome (`first_pass_outcome`); when every combination of a racing run has
its quick outcome, decide once which can still be an answer and measure those again to full
precision; keep the running answer as refined results arrive.

The gathering and provisional answer is kept by compare-and-put, one arrival at a time: each adds
its own figures (one read of its result), so an arrival costs three more store calls whatever the
run's size, and only the combinations not dominated so far are kept with their figures (the
others by name). Whoever finds no document builds it from the plan and every outcome arrived so
far (the plan's arrival, or an arrival that came before it), written only if absent. Once the race
is decided (stage `quick`) these updates stop: the race's answer holds every figure.

At-least-once: the decision is written once (`runs/{id}/racing.json`, conditional write); the
event that wrote it emits the refinements (again, with the same ids, when it is redelivered) and
raises the `expected-{N}` marker by their number, so the run closes when every refinement has an
outcome of its own (`outcomes/{combo key}.exact.json`, beside the quick one). A refined result
replaces the quick one in the summary; a failed refinement leaves the quick figures standing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import structlog

from core.lambda_model.prediction import predict_run
from core.outcomes import Arrived, arrived_outcomes
from core.plan_costs import EngineCosts, priors_for, stored_results
from core.ports import NotFound, ObjectStore
from core.racing import (
    PROVISIONAL_STAGES,
    Figures,
    Race,
    answer,
    family_of,
    figures_of,
    first_pass,
    kept_quick,
    margins,
    race,
    with_outcomes,
)
from core.results import is_quick, priced_for_region
from core.run_plan import MAX_CHECKS
from core.tuning_stakes import never_tuned
from report.recommendation import exclusion
from schemas import keys
from schemas.combos import Combo, Optimizer
from schemas.documents import (
    ArtifactManifest,
    FailedCombination,
    MeasuredResult,
    Recommendation,
    ResultBundle,
    SummaryResult,
)
from schemas.events import (
    STORED,
    ComboFailed,
    CombosReused,
    Envelope,
    FailureStage,
    InferenceDone,
    Payload,
    RunPlanned,
    SchemaError,
)

log = structlog.get_logger()
ANSWER_WRITES = 4  # compare-and-put attempts of a running answer's update (it is a view: the summary is the word)


def refined_end(key: str, end: tuple, arrived: Arrived, end_of: Callable) -> tuple:
    """A combination's end with its refinement in place of its quick measurement, if it has one
    (a failed refinement leaves the quick end standing)."""
    refined = f"{key}{keys.REFINED}"
    if refined not in arrived.own:
        return end
    outcome, result = end_of(refined, arrived, None)
    return (outcome, result) if result is not None else end


def read_racing(store: ObjectStore, run_id: str) -> dict | None:
    try:
        return json.loads(store.get_bytes(keys.racing(run_id)))
    except NotFound:
        return None


def refinements(store: ObjectStore, run_id: str) -> int:
    """How many refinements the run's race added to its expected outcomes (0: none, or no race)."""
    decided = read_racing(store, run_id)
    return len(decided["refine"]) if decided else 0


def race_figures(
    plan: RunPlanned, results: list[SummaryResult], failures: list[FailedCombination]
) -> tuple[list[Figures], dict, list[str]]:
    """The figures that race (measured and, with predict, predicted rows), the labels out of it
    with the reason, and the quick rows measured again whatever (disturbed, or without intervals)."""
    request = plan.request
    rows = list(results)
    if plan.predicted:
        predicted, _ = predict_run(request, list(plan.predicted.values()), results, failures, request.price_region)
        rows += predicted
    figures, out, forced = [], {}, []
    for row in rows:
        label = row.label
        if row.disturbed:
            forced.append(label)  # measured again: a quiet measurement may still be an answer
            continue
        why = exclusion(row, slo_p99_ms=None, min_agreement=request.min_agreement)  # the SLO races on intervals
        if why:
            out[label] = why
            continue
        f = figures_of(row, family_of(row.combo) if plan.predicted else None)
        if f is None:
            forced.append(label)
        else:
            figures.append(f)
    return figures, out, forced


def race_quick_pass(
    event: Envelope,
    plan: RunPlanned,
    results: list[SummaryResult],
    failures: list[FailedCombination],
    arrived: Arrived,
    deps,
) -> list[Payload] | None:
    """When the run's results include quick ones: decide the race once and emit the refinements
    (the deciding event), [] while refinements are missing, None when the run may close."""
    quick = {r.combo_key: r for r in results if is_quick(r)}
    if not quick:
        return None
    run_id = event.run_id
    decided = read_racing(deps.store, run_id)
    if decided is None:
        figures, out, forced = race_figures(plan, results, failures)
        outcome = race(figures, slo_p99_ms=plan.request.slo_p99_ms, out=out)
        labels = set(outcome.contenders) | set(forced)
        # a contender whose quick figures a full measurement would not sharpen keeps them (`kept_quick`)
        kept = {r.label: why for r in quick.values() if r.label in labels and (why := kept_quick(r))}
        # a quick result reused from another run is refined from its stored artifact (none left: it stays quick)
        refine = {
            k: r.combo.model_dump(mode="json")
            for k, r in quick.items()
            if r.label in labels and r.label not in kept and deps.store.exists(keys.manifest(r.artifact_key))
        }
        decided = {
            "decided_by": event.event_id,
            "refine": refine,
            "kept": kept,
            "race": outcome.as_dict(),
            "quick": {f.label: f.as_dict() for f in figures},
            "price_region": plan.request.price_region,
            "balance_weight": plan.request.balance_weight,
        }
        if deps.store.put_bytes(keys.racing(run_id), json.dumps(decided).encode(), if_absent=True):
            running = answer(
                {f.label: f for f in figures},
                outcome,
                balance_weight=plan.request.balance_weight,
                stage="quick",
                refining=[Combo.model_validate(c).label for c in refine.values()],
            )
            running.update(time_left(plan, results, [Combo.model_validate(c) for c in refine.values()], running))
            deps.store.put_bytes(keys.answer(run_id), json.dumps(running).encode())
            log.info(
                "race_decided",
                run_id=run_id,
                refined=len(refine),
                kept_quick=len(kept),
                dominated=len(outcome.dominated),
                out=len(outcome.out),
            )
        else:
            decided = read_racing(deps.store, run_id)
    missing = [k for k in decided["refine"] if f"{k}{keys.REFINED}" not in arrived.own]
    if not missing:
        return None
    if decided["decided_by"] != event.event_id:
        return []  # another arrival decided: its refinements are under way
    deps.store.put_bytes(keys.expected_outcomes(run_id, len(plan.combos) + len(decided["refine"])), b"", if_absent=True)
    out: list[Payload] = []
    for key in decided["refine"]:
        result = quick[key]
        manifest = ArtifactManifest.read(deps.store.get_bytes(keys.manifest(result.artifact_key)))
        converted = manifest.model_converted(
            model=plan.model,
            combo=plan.combos[key],
            combo_key=key,
            artifact_key=result.artifact_key,
            reused=True,
        )
        out.append(converted.model_copy(update={"refine": True}))
    return out


def time_left(
    plan: RunPlanned, results: list[SummaryResult], refined: list[Combo], running: dict[str, Any]
) -> dict[str, Any]:
    """What is left of a race once decided, in seconds: each refinement's measurement (`refine_s`: its engine's
    overhead and the sampling its own quick p50 needs, `core.plan_costs`), and the predicted picks of the answer so
    far, measured before the run closes (`checks_s`, as the plan charges them: their family's nearest size). The
    overheads are the workload's priors: a run's own quick pass has a quarter of the session tuning."""
    sha = plan.model.sha256
    costs = EngineCosts(priors=priors_for(plan.model.workload.value))
    costs.p50s = {
        (sha, r.combo.optimizer.value, r.combo.batch_size, r.combo.memory_mb): r.latency_ms.p50
        for r in results
        if r.latency_ms.p50
    }
    predicted = {c.label: c for c in plan.predicted.values()}
    checked = {label for label in (running.get("picks") or {}).values() if label in predicted}
    return {
        "refine_s": {c.label: round(costs.combination_s(sha, c), 1) for c in refined},
        "checks_s": round(sum(costs.combination_s(sha, predicted[label]) for label in sorted(checked)[:MAX_CHECKS]), 1),
    }


def mark_stopped(results: list[SummaryResult], decided: dict | None) -> tuple[list[SummaryResult], dict[str, str]]:
    """The rows a race stopped with what stopped them (`dominated_by` and its `evidence`), and
    label -> reason for the recommendation's `excluded`; the contenders whose quick figures stand
    (`kept_quick`, why: `core.racing.kept_quick`), still candidates."""
    if not decided:
        return results, {}
    dominated, kept = decided["race"]["dominated"], decided.get("kept") or {}
    out, reasons = [], {}
    for row in results:
        stop = dominated.get(row.label)
        if stop is not None and is_quick(row):
            row = row.model_copy(update={"dominated_by": stop["by"], "evidence": stop["evidence"]})
            reasons[row.label] = stop["reason"]
        elif row.label in kept and is_quick(row):
            row = row.model_copy(update={"kept_quick": kept[row.label]})
        out.append(row)
    return out, reasons


def final_answer(
    results: list[SummaryResult],
    recommendation: Recommendation,
    decided: dict | None,
    stopped: dict[str, str],
    *,
    predict: bool,
) -> tuple[Recommendation, dict[str, Any]]:
    """The recommendation with each pick's margin over the next (`margins`) and the combinations the
    race stopped under `excluded` ("dominated by X" with the evidence), and the final answer."""
    candidates = set(recommendation.candidates)
    balance_weight = recommendation.criteria.balance_weight if recommendation.criteria else 0.5
    race_result = Race.of(decided["race"]) if decided else Race()
    figures, beaten = {}, []
    for row in results:
        f = figures_of(row, family_of(row.combo) if predict else None)
        if f is not None and f.label in candidates:
            figures[f.label] = f
        elif f is not None and f.label in race_result.dominated:
            beaten.append(f)
    done = answer(figures, race_result, balance_weight=balance_weight, stage="final", refining=[])
    done["picks"] = {k: recommendation.pick(k) for k in ("fastest", "cheapest", "balanced")}
    done["margins"] = margins(list(figures.values()), done["picks"], balance_weight, beaten)
    excluded = {**recommendation.excluded, **stopped}
    return recommendation.model_copy(update={"margins": done["margins"], "excluded": excluded}), done


def on_refined(event: Envelope, deps) -> None:
    """A refined result arrived: its figures replace the quick ones in the running answer (a view
    for the CLI, the API and the page; the summary is the run's word)."""
    done: InferenceDone = event.payload
    decided = read_racing(deps.store, event.run_id)
    if decided is None:
        return
    try:
        stored = MeasuredResult.read(deps.store.get_bytes(done.result_key))
        result = priced_for_region(SummaryResult.of(stored), decided["price_region"])
    except NotFound:
        return
    for _ in range(ANSWER_WRITES):
        try:
            data, version = deps.store.get_versioned(keys.answer(event.run_id))
        except NotFound:
            return
        running = json.loads(data)
        rows = {k: Figures.of(v) for k, v in running["rows"].items()}
        family = rows[done.combo.label].family if done.combo.label in rows else None
        figures = figures_of(result, family)
        if figures is not None:
            rows[figures.label] = figures
        left = [label for label in running["refining"] if label != done.combo.label]
        updated = answer(
            rows,
            Race.of(decided["race"]),
            balance_weight=running.get("balance_weight", 0.5),
            stage="refining",
            refining=left,
        )
        updated.update({k: running[k] for k in ("refine_s", "checks_s") if k in running})
        if deps.store.compare_and_put(keys.answer(event.run_id), json.dumps(updated).encode(), version=version):
            return


# The first answer: gathering the quick outcomes, then the provisional answer ---------------------


def _criteria(plan: RunPlanned) -> dict[str, Any]:
    request = plan.request
    return {
        "balance_weight": request.balance_weight,
        "slo_p99_ms": request.slo_p99_ms,
        "min_agreement": request.min_agreement,
        "price_region": request.price_region,
    }


def _tuned(plan: RunPlanned) -> set[str]:
    """The engines the first answer does not wait for: TVM tuned in a racing run (its tuning waits
    for the other engines' figures, `core/tuning_stakes.waits_for_others`)."""
    if plan.request.tuning_trials <= 0:
        return set()
    return {f"{c.hardware.value}/{c.optimizer.value}" for c in plan.combos.values() if c.optimizer == Optimizer.tvm}


def _entry(doc: dict[str, Any], result: SummaryResult) -> dict[str, Any]:
    """The keywords of `with_outcome` for a measured result: its figures, or why it is out."""
    row = priced_for_region(result, doc["price_region"])
    if row.disturbed:
        return {"out": "disturbed (measured again after the quick pass)"}
    why = exclusion(row, slo_p99_ms=None, min_agreement=doc["min_agreement"])  # the SLO on intervals
    if why:
        return {"out": why}
    figures = figures_of(row)
    return {"figures": figures} if figures is not None else {"out": "no interval (measured again after the quick pass)"}


def _read_result(store: ObjectStore, result_key: str, document: dict | None = None) -> SummaryResult | None:
    try:
        stored = MeasuredResult.read(document if document is not None else store.get_bytes(result_key))
        return SummaryResult.of(stored)
    except (NotFound, SchemaError):
        return None


def _skipping(plan: RunPlanned, store: ObjectStore) -> dict[str, str]:
    """The TVM engines whose tuning the run will skip, known from its plan (`core.tuning_stakes.never_tuned`),
    with why: its first answer does not wait for them, and says so."""
    tvm = [c for c in plan.combos.values() if c.optimizer == Optimizer.tvm]
    if not tvm:
        return {}
    onnx = [c for c in [*plan.combos.values(), *plan.predicted.values()] if c.optimizer == Optimizer.onnx]
    stored = stored_results(store)
    skipping = {}
    for hardware in {c.hardware for c in tvm}:
        reason = never_tuned(
            [c for c in tvm if c.hardware == hardware],
            onnx,
            stored,
            plan.model.workload.value,
            plan.request.tuning_trials,
        )
        if reason is not None:
            skipping[f"{hardware.value}/{Optimizer.tvm.value}"] = reason
    return skipping


def _built(plan: RunPlanned, deps, run_id: str) -> dict[str, Any]:
    """The gathering answer of a racing run from its plan and every outcome arrived so far."""
    doc = first_pass(plan.combos, tuned=_tuned(plan), criteria=_criteria(plan), skipping=_skipping(plan, deps.store))
    arrived = arrived_outcomes(deps.store, run_id)
    outcomes = []
    for key, combo in plan.combos.items():
        outcome = arrived.outcome(key)
        if outcome is None:
            continue
        entry: dict[str, Any]
        if outcome.status != "done":
            entry = _not_measured(outcome.stage, outcome.reason)
        else:
            result = _read_result(deps.store, outcome.result_key, arrived.documents.get(outcome.result_key))
            entry = _entry(doc, result) if result is not None else {"failed": "its stored result cannot be read"}
        outcomes.append({"combo_key": key, "label": combo.label, **entry})
    return with_outcomes(doc, outcomes, ended=len(arrived))


def start_first_pass(run_id: str, plan: RunPlanned, deps) -> None:
    """The plan arrived: a racing run's running answer starts gathering (if no arrival built it)."""
    if plan.request.precision != "quick" or deps.store.exists(keys.answer(run_id)):
        return
    deps.store.put_bytes(keys.answer(run_id), json.dumps(_built(plan, deps, run_id)).encode(), if_absent=True)


def first_pass_outcome(event: Envelope, deps, ended: int) -> None:
    """A quick outcome arrived (`ended`: the run's outcomes at this arrival's listing): it joins
    the gathering or provisional answer. Nothing for a refinement, an exact measurement (a run of
    precision exact has no running answer) or once the race is decided."""
    payload = event.payload
    if getattr(payload, "refine", False):
        return
    if isinstance(payload, InferenceDone) and payload.precision != "quick":
        return
    if not isinstance(payload, InferenceDone | ComboFailed | CombosReused):
        return
    store, run_id = deps.store, event.run_id
    entries: list[dict[str, Any]] | None = None  # with_outcomes' outcomes
    for _ in range(ANSWER_WRITES):
        try:
            data, version = store.get_versioned(keys.answer(run_id))
        except NotFound:
            if _build_late(event, deps):
                continue  # built with this outcome in it (or by another arrival): add it again, idempotent
            return
        doc = json.loads(data)
        if doc.get("stage") not in PROVISIONAL_STAGES:
            return
        if entries is None:
            entries = _entries(payload, doc, deps)
        doc = with_outcomes(doc, entries, ended=ended)
        if store.compare_and_put(keys.answer(run_id), json.dumps(doc).encode(), version=version):
            if doc["stage"] == "provisional":
                log.info("running_answer", run_id=run_id, stage=doc["stage"], ended=doc["ended"], picks=doc["picks"])
            return


def _not_measured(stage: FailureStage, reason: str) -> dict[str, str]:
    """A combination without figures in the running answer: `out` of it when it was skipped because it
    cannot change the answer (TVM's tuning), else `failed` at its stage."""
    return {"out": reason} if stage == FailureStage.skipped else {"failed": f"{stage.value}: {reason}"}


def _entries(payload, doc: dict[str, Any], deps) -> list[dict[str, Any]]:
    if isinstance(payload, ComboFailed):
        return [
            {
                "combo_key": payload.combo_key,
                "label": payload.combo.label,
                **_not_measured(payload.stage, payload.reason),
            }
        ]
    if isinstance(payload, InferenceDone):
        result = _read_result(deps.store, payload.result_key)
        entry = _entry(doc, result) if result is not None else {"failed": "its stored result cannot be read"}
        return [{"combo_key": payload.combo_key, "label": payload.combo.label, **entry}]
    documents: dict[str, dict] = {}
    if payload.bundle is not None:
        try:
            documents = ResultBundle.read(deps.store.get_bytes(payload.bundle)).results
        except (NotFound, SchemaError):
            documents = {}
    out = []
    for key, version in payload.results.items():
        result = _read_result(deps.store, version, documents.get(version))
        if result is not None:
            out.append({"combo_key": key, "label": result.label, **_entry(doc, result)})
    return out


def _build_late(event: Envelope, deps) -> bool:
    """No running answer: build it if the run's plan is stored and it races (True: built, by this
    arrival or another), else leave it to the plan's arrival (False)."""
    try:
        plan = RunPlanned.model_validate_json(deps.store.get_bytes(keys.plan(event.run_id)), context=STORED)
    except NotFound:
        return False
    if plan.request.precision != "quick":
        return False
    deps.store.put_bytes(
        keys.answer(event.run_id), json.dumps(_built(plan, deps, event.run_id)).encode(), if_absent=True
    )
    return True
