"""Your own example inputs: an `.npz` (one array per model input, batch first), stored by its
content hash (`inputs/{sha256}.npz`), granted to the owner who uploaded it and named in that
owner's runs' `inputs_sha256` (another owner naming the hash is answered as if nothing were stored).

The file is checked off the event loop, its data read once: the arrays' headers are summed against
the limit before anything is decompressed (`workloads/array_files.py`; 413 over it), then each
array's data is streamed through in bounded chunks (a truncated or corrupt member is a 422).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from fastapi import APIRouter, HTTPException, Request
from starlette.concurrency import run_in_threadpool

from core.ports import ObjectStore
from services.request.auth import Owner
from services.request.bodies import ERRORS, StoredInputs
from services.request.deps import Deps
from services.request.submission import store_inputs
from workloads.array_files import ArraysTooLarge, UnreadableArrays, read_headers
from workloads.custom import MAX_ARRAYS, MAX_BYTES, BadInputs, check_npz

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
    """Store example inputs (the raw `.npz` bytes, at most 16 MB on the wire, 256 MB decoded).
    Read without pickles: object arrays, arrays without a batch axis or batch axes that differ
    are refused (422), arrays declaring more than the limit too (413), and nothing is stored."""
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
            sha, arrays = await run_in_threadpool(_check_and_store, deps.store, path, owner)
        except ArraysTooLarge as exc:
            raise HTTPException(413, f"the example inputs are too large: {exc}") from None
        except MemoryError:
            raise HTTPException(413, "reading the example inputs ran out of memory: send fewer samples") from None
        except (BadInputs, UnreadableArrays) as exc:
            raise HTTPException(422, _usable(exc)) from None
    return StoredInputs(
        sha256=sha, arrays={name: {"shape": list(shape), "dtype": dtype} for name, (shape, dtype) in arrays.items()}
    )


def _check_and_store(store: ObjectStore, path: Path, owner: str) -> tuple[str, dict]:
    """Blocking (a thread): the data streamed through once, bounded; then the headers' checks
    (`check_npz`: batch axes, dtypes) and the store."""
    read_headers(path, max_bytes=MAX_BYTES, max_arrays=MAX_ARRAYS, verify_data=True, npz_only=True)
    arrays = check_npz(path)
    return store_inputs(store, path, owner), arrays


def _usable(exc: Exception) -> str:
    return str(exc) if isinstance(exc, BadInputs) else f"not a usable .npz of example inputs: {exc}"
