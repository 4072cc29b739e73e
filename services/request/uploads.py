"""Uploading a new model: how its staged bytes are checked before they are trusted.

A model is uploaded to a staging place of its owner (an `Uploader`: `adapters/uploads.py`),
never straight to `models/`. Only `verify_upload` moves it there, after checking that its size
and SHA-256 are the ones the user announced and that it is an accepted model file; on any
mismatch the staged bytes are discarded and nothing is stored.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import structlog

from core.ports import ObjectStore, Uploader, UploadRejected
from engines.model_files import MODEL_MAX_BYTES, NotAModelError, accept_model
from services.request.submission import grant_model, keep_model, model_facts, owned_model_info

log = structlog.get_logger()


def _sha256_and_size(path: Path) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def verify_upload(
    store: ObjectStore,
    uploader: Uploader,
    owner: str,
    sha256: str,
    size_bytes: int,
    max_model_bytes: int = MODEL_MAX_BYTES,
) -> dict:
    """Check the staged upload against the announced SHA-256 and size and that it is a model
    carrying no code (`engines.model_files.accept_model`, its bytes only), unpacking to at most
    `max_model_bytes`, then store it as `models/{sha256}` (with its facts in
    `models/{sha256}.json`, `size_bytes` the unpacked size). Returns those facts;
    `UploadRejected` (422 with the reason, nothing stored, the staged bytes discarded) otherwise,
    whatever the model libraries raise on hostile bytes."""
    known = owned_model_info(store, sha256, owner)
    if known is not None:  # this owner's already: nothing to do
        uploader.discard(owner, sha256)
        return known
    with tempfile.TemporaryDirectory(prefix="ayci-upload-") as tmp:
        path = Path(tmp) / "model"
        if not uploader.fetch(owner, sha256, path):
            raise UploadRejected(f"nothing was uploaded for model {sha256}: upload it first", status=409)
        try:
            actual_sha, actual_size = _sha256_and_size(path)
            if actual_size != size_bytes:
                raise UploadRejected(f"the upload has {actual_size} bytes, not the announced {size_bytes}")
            if actual_sha != sha256:
                raise UploadRejected(f"the upload's SHA-256 is {actual_sha}, not the announced {sha256}")
            try:
                accepted = accept_model(path, path.parent, max_model_bytes)
                info = model_facts(accepted.path, sha256, uploaded_bytes=accepted.size_bytes)
            except NotAModelError as exc:
                raise UploadRejected(f"not an accepted model (a torch.export .pt2 or ONNX file): {exc}") from None
            except (MemoryError, RecursionError) as exc:  # a structure too large or deep for the libraries
                raise UploadRejected(f"the model cannot be checked: {type(exc).__name__}", status=413) from None
            except Exception as exc:  # onnx.checker.ValidationError, protobuf's DecodeError, ... never a 500
                log.warning("upload_refused_by_library", sha256=sha256, error=type(exc).__name__, exc_info=True)
                raise UploadRejected(
                    f"not an accepted model: the model library refused it ({type(exc).__name__}: {str(exc)[:300]})"
                ) from None
            keep_model(store, accepted.path, info)  # stored once, whoever uploaded it first
        finally:
            uploader.discard(owner, sha256)
    grant_model(store, sha256, owner)
    return info.public()
