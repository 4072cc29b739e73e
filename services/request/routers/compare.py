"""Two finished runs compared (`GET /runs/{a}/compare/{b}`, `report/compare.py`): each combination
measured in both, its change and a verdict (faster, slower or within noise), what differs
between the runs. JSON, or Markdown for a pull request's comment (`?format=markdown`)."""

from __future__ import annotations

from typing import Annotated, Literal

import structlog
from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import PlainTextResponse

from report.compare import compare, stored_history
from report.compare_views import comparison_markdown
from schemas.documents import RunSummary
from services.request.auth import Owner
from services.request.bodies import ERRORS, RunId
from services.request.deps import Deps, RequestDeps
from services.request.runs import load_run, load_summary

log = structlog.get_logger()
router = APIRouter(tags=["runs"])


def owned_summary(deps: RequestDeps, run_id: str, owner: str) -> RunSummary:
    """The run's summary: 404 if the run is not the caller's (or there is none), 409 if it is running."""
    if load_run(deps.store, run_id, owner) is None:
        raise HTTPException(404, f"no run {run_id}")
    summary = load_summary(deps.store, run_id)
    if summary is None:
        raise HTTPException(409, f"run {run_id} is still running")
    return summary


@router.get(
    "/runs/{run_id}/compare/{other_id}",
    responses={**ERRORS, 200: {"content": {"application/json": {}, "text/markdown": {}}}},
)
def get_comparison(
    run_id: RunId,
    other_id: RunId,
    owner: Owner,
    deps: Deps,
    format: Annotated[Literal["json", "markdown"], Query(description="json (default) or markdown")] = "json",
):
    """Run `other_id` against run `run_id` (both the caller's, both finished): each combination
    measured in both, the change of p50, p99, cold start, cost per million, peak memory and
    agreement, and a verdict judged against noise (the results' intervals widened by the
    variation between stored repeats of the combination)."""
    a, b = owned_summary(deps, run_id, owner), owned_summary(deps, other_id, owner)
    comparison = compare(a, b, stored_history(deps.store, [a, b]))
    log.info("runs_compared", run_a=run_id, run_b=other_id, combinations=len(comparison.combinations))
    if format == "markdown":
        return PlainTextResponse(comparison_markdown(comparison), media_type="text/markdown")
    return comparison.as_dict()
