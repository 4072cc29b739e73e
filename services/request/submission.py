"""Submitting a run: store the model by its content hash (once) and announce the request."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import uuid
from pathlib import Path

from ayci.ports import ObjectStore
from engines.model_files import sniff_format
from schemas.combos import ModelRef, Workload
from schemas.events import Envelope, RequestSubmitted


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
    key = f"models/{sha}"
    if not store.exists(key):
        store.put_file(key, path)
    return ModelRef(sha256=sha, size_bytes=path.stat().st_size, format=model_format, workload=workload, input_size=input_size)


def new_run(request: RequestSubmitted, run_id: str | None = None) -> Envelope:
    """The envelope that starts a run."""
    return Envelope.wrap(request, run_id=run_id or str(uuid.uuid4()), producer="request")


def copy_upload(source, suffix: str = "") -> Path:
    """Spool a file-like upload to a temporary file."""
    handle = tempfile.NamedTemporaryFile(delete=False, suffix=suffix)
    with handle:
        shutil.copyfileobj(source, handle)
    return Path(handle.name)
