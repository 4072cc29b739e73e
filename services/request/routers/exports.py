"""A finished run's combination as a deployable Lambda function, zipped (`GET /runs/{id}/export`):
the folder `ayci export` writes (`report/export`). The artifact's bytes are copied from the
store; the model is never loaded here."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Annotated

import structlog
from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import FileResponse
from starlette.background import BackgroundTask

from report.export import ExportError, export_run, write_folder_zip
from schemas import keys
from services.request.auth import Owner
from services.request.bodies import ERRORS, RunId
from services.request.deps import Deps
from services.request.runs import load_run

log = structlog.get_logger()
router = APIRouter(tags=["runs"])


@router.get(
    "/runs/{run_id}/export",
    response_class=FileResponse,
    responses={**ERRORS, 200: {"content": {"application/zip": {"schema": {"type": "string", "format": "binary"}}}}},
)
def get_export(
    run_id: RunId,
    owner: Owner,
    deps: Deps,
    combination: Annotated[
        str | None,
        Query(max_length=200, description="a measured combination's label or key (default: the balanced pick)"),
    ] = None,
) -> FileResponse:
    """The function of the run's balanced pick (or `combination`) as a zip: handler, artifact,
    pinned requirements, SAM template, README. 404: no such run; 409: still running; 422: the
    combination cannot be exported (the reason)."""
    if load_run(deps.store, run_id, owner) is None:
        raise HTTPException(404, f"no run {run_id}")
    if not deps.store.exists(keys.summary(run_id)):
        raise HTTPException(409, f"run {run_id} is still running")
    work = Path(tempfile.mkdtemp(prefix="ayci-export-"))
    try:
        deployment = export_run(deps.store, run_id, work / "function", combination)
        archive = write_folder_zip(work / "function", work / "export.zip")
    except ExportError as exc:
        shutil.rmtree(work, ignore_errors=True)
        raise HTTPException(422, str(exc)) from None
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    name = deployment.combination.replace("/", "-")
    log.info("export_served", run_id=run_id, combination=deployment.combination, bytes=archive.stat().st_size)
    return FileResponse(
        archive,
        media_type="application/zip",
        filename=f"ayci-{name}.zip",
        background=BackgroundTask(shutil.rmtree, work, ignore_errors=True),
    )
