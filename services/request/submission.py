"""Submitting a run: store the model by its content hash (once) and announce the request."""

from __future__ import annotations

import hashlib
import tempfile
import uuid
from pathlib import Path

from core.ports import NotFound, ObjectStore
from engines.model_files import sniff_format
from schemas.combos import ModelRef, Workload
from schemas.events import Envelope, RequestSubmitted
from schemas import keys
from schemas.documents import ModelInfo


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def store_model(store: ObjectStore, path: Path, workload: Workload, input_size: list[int]) -> ModelRef:
    """Check that `path` is an accepted model (`NotAModelError` if not), store it under
    `models/{sha256}` unless already there, and return its reference."""
    model_format = sniff_format(path)
    sha = sha256_of(path)
    size = path.stat().st_size
    keep_model(store, path, ModelInfo(sha256=sha, size_bytes=size, format=model_format.value))
    return ModelRef(sha256=sha, size_bytes=size, format=model_format, workload=workload, input_size=input_size)


def keep_model(store: ObjectStore, path: Path, info: ModelInfo) -> None:
    """Store a checked model file (unless already there) and its facts beside it: the one
    place a model enters the store."""
    if not store.exists(keys.model(info.sha256)):
        store.put_file(keys.model(info.sha256), path)
    store.put_bytes(keys.model_info(info.sha256), info.to_bytes(), if_absent=True)


def model_info(store: ObjectStore, sha256: str) -> dict | None:
    """The facts of a stored model, or None if no model has this SHA-256. A model stored
    before its facts were kept is sniffed once and its facts written."""
    try:
        return ModelInfo.read(store.get_bytes(keys.model_info(sha256))).public()
    except NotFound:
        pass
    if not store.exists(keys.model(sha256)):
        return None
    with tempfile.TemporaryDirectory(prefix="ayci-model-") as tmp:
        path = Path(tmp) / "model"
        store.get_file(keys.model(sha256), path)
        info = ModelInfo(sha256=sha256, size_bytes=path.stat().st_size, format=sniff_format(path).value)
    store.put_bytes(keys.model_info(sha256), info.to_bytes(), if_absent=True)
    return info.public()


def grant_model(store: ObjectStore, sha256: str, owner: str) -> None:
    """`owner` has shown they hold these bytes (they uploaded them): the model is theirs to see and run."""
    store.put_bytes(keys.model_owner(sha256, owner), b"", if_absent=True)


def owned_model_info(store: ObjectStore, sha256: str, owner: str) -> dict | None:
    """The model's facts if `owner` uploaded it; None otherwise, whether another owner stored it
    or nobody did (the two look the same: knowing a SHA-256 tells nothing about others' models)."""
    if not store.exists(keys.model_owner(sha256, owner)):
        return None
    return model_info(store, sha256)


def new_run(request: RequestSubmitted, run_id: str | None = None) -> Envelope:
    """The envelope that starts a run."""
    return Envelope.wrap(request, run_id=run_id or str(uuid.uuid4()), producer="request")

