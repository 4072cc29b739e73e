"""The upload target where the uploader stages models this app receives itself (the embedded
default); on AWS uploads go straight to S3 and this router is not mounted."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request, Response

from core.ports import UploadRejected
from services.request.auth import Owner
from services.request.bodies import ERRORS, Sha256Path
from services.request.deps import Deps

router = APIRouter(tags=["models"])


@router.put(
    "/uploads/{sha256}",
    status_code=204,
    responses=ERRORS,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def receive_upload(
    sha256: Sha256Path, size_bytes: Annotated[int, Query(gt=0)], owner: Owner, request: Request, deps: Deps
) -> Response:
    """The upload target on the embedded default: the raw model bytes, at most `size_bytes`
    (the announced size). Verified by `POST /models/{sha256}/verify`."""
    if size_bytes > deps.limits.max_model_bytes:
        raise HTTPException(413, f"a model may have at most {deps.limits.max_model_bytes} bytes")
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > size_bytes:
        raise HTTPException(413, f"the upload is larger than the announced {size_bytes} bytes")
    try:
        await deps.uploader.receive(owner, sha256, size_bytes, request.stream())
    except UploadRejected as exc:
        raise HTTPException(exc.status, exc.reason) from None
    return Response(status_code=204)
