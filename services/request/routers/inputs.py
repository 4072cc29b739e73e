"""Your own example inputs: an `.npz` (one array per model input, batch first), stored by its
content hash (`inputs/{sha256}.npz`) and named in a run's `inputs_sha256`."""

from __future__ import annotations

import tempfile
from pathlib import Path

from fastapi import APIRouter, HTTPException, Request

from services.request.auth import Owner
from services.request.bodies import ERRORS, StoredInputs
from services.request.deps import Deps
from services.request.submission import store_inputs
from workloads.custom import BadInputs, check_npz

MAX_INPUTS_BYTES = 16 << 20  # on the wire; an API Gateway payload is at most 10 MB anyway

router = APIRouter(tags=["inputs"])


@router.put(
    "/inputs",
    response_model=StoredInputs,
    status_code=201,
    responses=ERRORS,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def put_inputs(owner: Owner, request: Request, deps: Deps) -> StoredInputs:
    """Store example inputs (the raw `.npz` bytes, at most 16 MB). Loaded with
    `allow_pickle=False`: object arrays, arrays without a batch axis or batch axes that differ
    are refused (422) and nothing is stored."""
    with tempfile.TemporaryDirectory(prefix="ayci-inputs-") as tmp:
        path = Path(tmp) / "inputs.npz"
        size = 0
        with open(path, "wb") as out:
            async for chunk in request.stream():
                size += len(chunk)
                if size > MAX_INPUTS_BYTES:
                    raise HTTPException(413, f"example inputs may have at most {MAX_INPUTS_BYTES} bytes")
                out.write(chunk)
        try:
            arrays = check_npz(path)
            sha = store_inputs(deps.store, path)
        except BadInputs as exc:
            raise HTTPException(422, str(exc)) from None
    return StoredInputs(
        sha256=sha, arrays={name: {"shape": list(shape), "dtype": dtype} for name, (shape, dtype) in arrays.items()}
    )
