"""Runs: start one, follow it, get its results (JSON or CSV)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated

import structlog
from fastapi import APIRouter, Body, HTTPException, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from core.lambda_model.arrivals import Traffic, TrafficError
from core.lambda_model.traffic import traffic_report
from core.planning import Plan
from core.ports import NotFound
from core.racing import answer_lines, is_shown
from core.results import stored_profile
from core.run_plan import measured_combos
from report import results_csv, results_document
from report.profiles import NotProfilable, chosen_results, profilable, profile_tables
from schemas import keys
from schemas.documents import RunSummary
from schemas.events import Envelope, ProfileRequested, RequestSubmitted
from schemas.signature import ModelSignature
from services.request.auth import Owner
from services.request.bodies import (
    ERRORS,
    PlanAnswer,
    RunCreated,
    RunId,
    RunProgress,
    RunRequest,
    TrafficRequest,
    invalid,
)
from services.request.deps import Deps, RequestDeps
from services.request.limits import LimitReached, OwnerLimits, ReservationContended, charge
from services.request.runs import (
    cancel_run,
    load_run,
    load_summary,
    run_progress,
)
from services.request.submission import NotSubmitted, checked_plan, owned_model_info
from services.request.submission import submit_run as start_run
from workloads.binding import BindingError

log = structlog.get_logger()
router = APIRouter(tags=["runs"])


def checked_request(body: RunRequest, owner: str, deps: RequestDeps) -> tuple[RequestSubmitted, Callable[[], Plan]]:
    """The contract's request for `body` and how to plan it; 409 if the model (or the inputs) is not
    stored, 422 naming the problem if the model's inputs bind to nothing the run feeds."""
    matrix = body.matrix_of()
    info = owned_model_info(deps.store, body.model.sha256, owner)
    request = body.request_for(
        owner, info["format"] if info else "pt2", matrix
    )  # the contract checks the input size for the workload
    total = len(measured_combos(request))
    if total > deps.limits.max_combinations:
        raise invalid(
            ("body", "matrix"), f"{total} combinations; a run may have at most {deps.limits.max_combinations}"
        )
    if info is None:
        raise HTTPException(409, f"model {body.model.sha256} is not stored: upload it first (POST /models/uploads)")
    if info["size_bytes"] != body.model.size_bytes:
        raise invalid(
            ("body", "model", "size_bytes"),
            f"the stored model with this SHA-256 has {info['size_bytes']} bytes, not {body.model.size_bytes}",
        )
    if body.inputs_sha256 and not deps.store.exists(keys.inputs_owner(body.inputs_sha256, owner)):
        raise HTTPException(409, f"inputs {body.inputs_sha256} are not stored: upload them first (PUT /inputs)")
    signature = ModelSignature.model_validate(info["signature"]) if info.get("signature") else None
    try:
        return request, checked_plan(deps.store, request, signature)
    except BindingError as exc:
        raise invalid(("body", "model"), str(exc)) from None


@router.post("/plans", response_model=PlanAnswer, responses=ERRORS)
def plan(body: Annotated[RunRequest, Body()], owner: Owner, deps: Deps) -> dict:
    """What `POST /runs` with this body would do, without doing it: each combination reused,
    to measure (with estimates) or impossible (with the reason), and the totals."""
    return checked_request(body, owner, deps)[1]().as_dict()


@router.post("/runs", response_model=RunCreated, status_code=201, responses=ERRORS)
def submit_run(body: Annotated[RunRequest, Body()], owner: Owner, response: Response, deps: Deps) -> RunCreated:
    """Start a run. The model must be stored (see `/models/uploads`). Combinations the plan
    calls impossible are recorded as failed (stage `plan`) and never measured."""
    request, _ = checked_request(body, owner, deps)
    total = len(measured_combos(request))
    if body.email and not deps.limits.email_allowed_to(body.email):
        raise invalid(("body", "email"), f"this deployment does not send email to {body.email} (AYCI_EMAIL_ALLOWED)")
    limits = OwnerLimits(deps.limits.max_runs_in_flight, deps.limits.max_combinations_per_day)
    try:
        envelope = start_run(deps.store, deps.publisher, request, limits=limits)
    except LimitReached as exc:  # reserved before anything was written: nothing was started
        raise HTTPException(429, exc.detail, headers={"Retry-After": str(exc.retry_after_s)}) from None
    except ReservationContended as exc:
        raise HTTPException(503, str(exc), headers={"Retry-After": "1"}) from None
    except NotSubmitted:  # the bus did not take it: nothing runs, so nothing is shown
        raise HTTPException(
            503, "the run could not be submitted (the event bus did not take it); nothing was started, try again"
        ) from None
    response.headers["Location"] = f"runs/{envelope.run_id}"
    return RunCreated(
        run_id=envelope.run_id,
        combinations=total,
        status_url=f"runs/{envelope.run_id}",
        results_url=f"runs/{envelope.run_id}/results",
    )


def owned_run(deps: RequestDeps, run_id: str, owner: str) -> dict:
    record = load_run(deps.store, run_id, owner)
    if record is None:
        raise HTTPException(404, f"no run {run_id}")
    return record


@router.get("/runs/{run_id}", response_model=RunProgress, responses=ERRORS)
def get_run(run_id: RunId, owner: Owner, deps: Deps) -> dict:
    """The run's status and each combination's progress; for a racing run (precision quick), the
    running answer from its first pass on, refined as measurements arrive (`answer`)."""
    return {**run_progress(deps.store, owned_run(deps, run_id, owner)), **running_answer(deps.store, run_id)}


def running_answer(store, run_id: str) -> dict:
    """`answer` and `answer_text` of the run (`core/racing.py`), or nothing before its first answer."""
    try:
        answer = json.loads(store.get_bytes(keys.answer(run_id)))
    except NotFound:
        return {}
    if not is_shown(answer):  # still gathering its first pass (core/racing.py)
        return {}
    return {"answer": answer, "answer_text": answer_lines(answer)}


@router.delete("/runs/{run_id}", response_model=RunProgress, status_code=202, responses=ERRORS)
def cancel(run_id: RunId, owner: Owner, deps: Deps) -> dict:
    """Cancel a running run: its pending combinations fail "cancelled", the workers skip them,
    and the run is archived with what was measured (and its email sent). 409 if it has ended."""
    record = owned_run(deps, run_id, owner)
    closing = cancel_run(deps.store, record, datetime.now(UTC))
    if closing is None:
        raise HTTPException(409, f"run {run_id} has ended already")
    deps.publisher.publish([closing])
    log.info("run_cancelled", run_id=run_id, owner=owner)
    return run_progress(deps.store, record)


TRAFFIC_AT_ONCE = threading.BoundedSemaphore(2)  # simulations running at once in this process (memory, CPU)
TRAFFIC_WAIT_S = 30.0


@router.post("/runs/{run_id}/traffic", responses=ERRORS)
async def traffic(run_id: RunId, body: Annotated[TrafficRequest, Body()], owner: Owner, deps: Deps) -> dict:
    """The archived run's combinations under a traffic profile: cold-start share, p50/p99/p99.9
    with cold starts, peak instances and the bill, on demand and with provisioned concurrency
    and SnapStart (an estimate); the cheapest that meets the SLO. 409 while the run is going,
    422 if it has no combination timed as Lambda would run it. Simulated off the event loop, within
    one budget of events and time for all its rows (thinned and scaled back where the traffic is
    heavier, `core/lambda_model/traffic.py`), at most `TRAFFIC_AT_ONCE` at a time (503 past `TRAFFIC_WAIT_S`)."""
    return await run_in_threadpool(_traffic, run_id, body, owner, deps)


def _traffic(run_id: str, body: TrafficRequest, owner: str, deps: RequestDeps) -> dict:
    owned_run(deps, run_id, owner)
    summary = load_summary(deps.store, run_id)
    if summary is None:
        raise HTTPException(409, f"run {run_id} is still running")
    try:
        profile = Traffic(
            rps=body.rps,
            pattern=body.pattern,
            idle_timeout_s=body.idle_timeout_s,
            duration_s=body.duration_s,
            concurrency_limit=body.concurrency_limit,
        )
    except TrafficError as exc:
        raise invalid(("body",), str(exc)) from None
    if not TRAFFIC_AT_ONCE.acquire(timeout=TRAFFIC_WAIT_S):
        raise HTTPException(503, "too many traffic simulations at once: try again", headers={"Retry-After": "10"})
    try:
        return traffic_report(summary, profile, body.slo_p99_ms)
    except TrafficError as exc:
        raise invalid(("body",), str(exc)) from None
    finally:
        TRAFFIC_AT_ONCE.release()


@router.get(
    "/runs/{run_id}/results",
    responses={**ERRORS, 200: {"content": {"application/json": {}, "text/csv": {"schema": {"type": "string"}}}}},
)
def get_results(run_id: RunId, owner: Owner, request: Request, deps: Deps) -> Response:
    """The archived run's table, recommendation, Pareto front and failures: JSON, or CSV
    with `Accept: text/csv`. 409 while the run is still going."""
    owned_run(deps, run_id, owner)
    summary = load_summary(deps.store, run_id)
    if summary is None:
        raise HTTPException(409, f"run {run_id} is still running")
    if "text/csv" in request.headers.get("accept", ""):
        return Response(
            results_csv(summary),
            media_type="text/csv",
            headers={"Content-Disposition": f'attachment; filename="ayci-{run_id}.csv"'},
        )
    return JSONResponse(results_document(summary, f"{deps.limits.results_url}/runs/{run_id}/results"))


def _profiled(deps: RequestDeps, run_id: str, owner: str) -> RunSummary:
    """The archived run (404 if none: unknown, another owner's, or still running)."""
    owned_run(deps, run_id, owner)
    summary = load_summary(deps.store, run_id)
    if summary is None:
        raise HTTPException(404, f"run {run_id} is still running: nothing of it is profiled yet")
    return summary


@router.get(
    "/runs/{run_id}/combinations/{combo_key}/profile", responses={**ERRORS, 200: {"content": {"application/json": {}}}}
)
def get_profile_trace(run_id: RunId, combo_key: str, owner: Owner, deps: Deps) -> Response:
    """The Chrome trace of a combination's profiled pass (open it in Perfetto or
    chrome://tracing). 404 with the reason: no such run or combination, the combination failed
    or cannot be profiled, or it has not been profiled (`ayci profile`, `--profile`)."""
    summary = _profiled(deps, run_id, owner)
    try:
        (result,) = chosen_results(summary, combo_key)
    except NotProfilable as exc:
        raise HTTPException(404, str(exc)) from None
    profile = stored_profile(deps.store, result, for_run=run_id)
    if profile is None:
        raise HTTPException(
            404,
            f"combination {combo_key} has not been profiled "
            f"(ayci profile {run_id} --combination {combo_key}, or run with profile)",
        )
    return Response(
        deps.store.get_bytes(profile.trace_key),
        media_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="ayci-{combo_key}-trace.json"'},
    )


PROFILE_PENDING_S = 900.0  # a requested pass not stored by then is taken as lost: it may be asked for again


def _claim_profile(deps: RequestDeps, marker: str, now: datetime) -> str | None:
    """Mark a profiled pass as asked for (compare-and-put: of racing requests one claims it); its
    version, or None while another request's pass is pending."""
    document = json.dumps({"requested_at": now.isoformat()}).encode()
    try:
        data, version = deps.store.get_versioned(marker)
    except NotFound:
        return deps.store.compare_and_put(marker, document, version=None)
    try:
        requested = datetime.fromisoformat(json.loads(data)["requested_at"])
    except (ValueError, KeyError, TypeError):
        requested = datetime.min.replace(tzinfo=UTC)
    if (now - requested).total_seconds() < PROFILE_PENDING_S:
        return None
    return deps.store.compare_and_put(marker, document, version=version)


def _unclaim_profile(deps: RequestDeps, marker: str, version: str) -> None:
    """The pass was not started after all: let the next request ask for it."""
    lapsed = json.dumps({"requested_at": datetime.min.replace(tzinfo=UTC).isoformat()}).encode()
    deps.store.compare_and_put(marker, lapsed, version=version)


@router.post("/runs/{run_id}/combinations/{combo_key}/profile", status_code=202, responses=ERRORS)
def request_profile(run_id: RunId, combo_key: str, owner: Owner, deps: Deps) -> Response:
    """Profile this combination: the inference worker of its hardware runs a profiled pass,
    confined as it was measured; its trace is then served by `GET` on this path. 404 with the
    reason if the run is unknown or still running, or the combination is unknown, failed or
    cannot be profiled. The pass is this run's (stored under its id, also for a result it reused):
    if this run has a profile of the result already it is answered (200) and no pass starts; while
    a pass it asked for is pending, none starts again (202, `pending`); a new pass counts as one
    combination in the owner's daily budget (429 past it)."""
    summary = _profiled(deps, run_id, owner)
    try:
        (result,) = chosen_results(summary, combo_key)
    except NotProfilable as exc:
        raise HTTPException(404, str(exc)) from None
    answer = {"run_id": run_id, "combo_key": combo_key, "trace_url": f"runs/{run_id}/combinations/{combo_key}/profile"}
    stored = stored_profile(deps.store, result, for_run=run_id)
    if stored is not None:
        return JSONResponse({**answer, "state": "profiled", "profile": stored.to_dict()}, status_code=200)
    now = datetime.now(UTC)
    marker = keys.profile_requested(combo_key, run_id)
    claimed = _claim_profile(deps, marker, now)
    if claimed is None:
        return JSONResponse({**answer, "state": "pending"}, status_code=202)
    try:
        charge(
            deps.store,
            owner,
            1,
            OwnerLimits(deps.limits.max_runs_in_flight, deps.limits.max_combinations_per_day),
            "a profiled pass",
            now,
        )
        combo = result.combo
        deps.publisher.publish(
            [
                Envelope.wrap(
                    ProfileRequested(
                        combo=combo, combo_key=combo_key, result_key=keys.result_version(combo_key, result.run_id)
                    ),
                    run_id=run_id,
                    producer="request",
                )
            ]
        )
    except LimitReached as exc:
        _unclaim_profile(deps, marker, claimed)
        raise HTTPException(429, exc.detail, headers={"Retry-After": str(exc.retry_after_s)}) from None
    except ReservationContended as exc:
        _unclaim_profile(deps, marker, claimed)
        raise HTTPException(503, str(exc), headers={"Retry-After": "1"}) from None
    except Exception:
        _unclaim_profile(deps, marker, claimed)
        log.exception("profile_not_requested", run_id=run_id, combo_key=combo_key, owner=owner)
        raise HTTPException(503, "the profile could not be requested (the event bus did not take it)") from None
    log.info("profile_requested", run_id=run_id, combo_key=combo_key, owner=owner)
    return JSONResponse({**answer, "state": "requested"}, status_code=202)


@router.get("/runs/{run_id}/profiles", responses=ERRORS)
def get_profiles(run_id: RunId, owner: Owner, deps: Deps) -> dict:
    """The run's profiled combinations side by side: per hardware, batch and memory size, each
    optimizer's time per operator group, its top operators and the link to its trace."""
    summary = _profiled(deps, run_id, owner)
    profiles = [
        p.to_dict()
        for p in (stored_profile(deps.store, r, for_run=run_id) for r in summary.results if profilable(r) is None)
        if p
    ]
    return {
        "run_id": run_id,
        "tables": profile_tables(profiles, trace_url=lambda p: f"runs/{run_id}/combinations/{p['combo_key']}/profile"),
    }
