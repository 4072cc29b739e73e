"""Models: is one stored, where to upload a new one, and its verification after the upload."""

from __future__ import annotations

import structlog
from fastapi import APIRouter, HTTPException, Response

from core.ports import UploadRejected
from services.request.auth import Owner
from services.request.bodies import (
    ERRORS,
    ModelSpec,
    ModelStatus,
    Sha256Path,
    UploadAnswer,
    UploadOfferBody,
    UploadVerification,
)
from services.request.deps import Deps
from services.request.submission import owned_model_info
from services.request.uploads import verify_upload

log = structlog.get_logger()
router = APIRouter(tags=["models"])


@router.get("/models/{sha256}", response_model=ModelStatus, responses=ERRORS)
def get_model(sha256: Sha256Path, owner: Owner, deps: Deps) -> ModelStatus:
    """Is a model with this SHA-256 yours and stored already? (Then it is never uploaded again.)
    Another owner's model answers as not stored."""
    info = owned_model_info(deps.store, sha256, owner)
    return ModelStatus(
        sha256=sha256,
        stored=info is not None,
        **({k: info.get(k) for k in ("size_bytes", "format", "signature")} if info else {}),
    )


@router.post("/models/uploads", response_model=UploadAnswer, responses=ERRORS, status_code=200)
def offer_upload(spec: ModelSpec, owner: Owner, response: Response, deps: Deps) -> UploadAnswer:
    """Where to upload a new model: a presigned S3 POST (or this app's `PUT /uploads/{sha256}`)
    limited to the announced size. A model of yours already stored gets no upload
    (`stored: true`); the same bytes stored by someone else must be uploaded by you once."""
    info = owned_model_info(deps.store, spec.sha256, owner)
    if info is not None:
        return UploadAnswer(
            sha256=spec.sha256,
            stored=True,
            size_bytes=info["size_bytes"],
            format=info["format"],
            signature=info.get("signature"),
        )
    if spec.size_bytes > deps.limits.max_model_bytes:
        raise HTTPException(
            413, f"a model may have at most {deps.limits.max_model_bytes} bytes, this one has {spec.size_bytes}"
        )
    offer = deps.uploader.offer(owner, spec.sha256, spec.size_bytes)
    response.status_code = 201
    return UploadAnswer(sha256=spec.sha256, stored=False, upload=UploadOfferBody(**offer.__dict__))


@router.post("/models/{sha256}/verify", response_model=ModelStatus, status_code=201, responses=ERRORS)
def verify_model(sha256: Sha256Path, body: UploadVerification, owner: Owner, deps: Deps) -> ModelStatus:
    """After the upload: check that it has the announced SHA-256 and size and is a model,
    then store it. On a mismatch the upload is discarded and nothing is stored (422)."""
    try:
        info = verify_upload(
            deps.store, deps.uploader, owner, sha256, body.size_bytes, max_model_bytes=deps.limits.max_model_bytes
        )
    except UploadRejected as exc:
        log.info("upload_rejected", owner=owner, sha256=sha256, reason=exc.reason)
        raise HTTPException(exc.status, exc.reason) from None
    return ModelStatus(
        sha256=sha256,
        stored=True,
        size_bytes=info["size_bytes"],
        format=info["format"],
        signature=info.get("signature"),
    )
