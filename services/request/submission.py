"""Submitting a run: store the model by its content hash (once), check the request against the
model, and start the run (`submit_run`, the one way a run starts: the HTTP route and the CLI)."""

from __future__ import annotations

import hashlib
import tempfile
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import structlog

from core.planning import Plan, plan_run, refuse_unbindable, request_shapes
from core.ports import NotFound, ObjectStore
from core.run_plan import measured_combos
from engines.model_files import accept_model, sniff_format
from schemas import keys
from schemas.combos import ModelFormat, ModelRef, Workload
from schemas.documents import ModelInfo
from schemas.events import Envelope, RequestSubmitted
from schemas.reasons import whole
from schemas.signature import ModelSignature
from services.request.limits import OwnerLimits, release, reserve
from services.request.model_signature import read_signature_in_sandbox
from services.request.runs import count_run, record_run, withdraw_run

log = structlog.get_logger()


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def store_model(
    store: ObjectStore, path: Path, workload: Workload, input_size: list[int], inputs_sha256: str | None = None
) -> ModelRef:
    """Check that `path` is an accepted model (`NotAModelError` if not), store it under
    `models/{sha256}` unless already there, and return its reference."""
    sha = sha256_of(path)
    with tempfile.TemporaryDirectory(prefix="ayci-intake-") as tmp:
        accepted = accept_model(path, Path(tmp))
        info = model_facts(accepted.path, sha, uploaded_bytes=accepted.size_bytes)
        keep_model(store, accepted.path, info)
    return ModelRef(
        sha256=info.sha256,
        size_bytes=info.size_bytes,
        format=ModelFormat(info.format),
        workload=workload,
        input_size=input_size,
        inputs_sha256=inputs_sha256,
    )


def model_facts(path: Path, sha256: str, uploaded_bytes: int | None = None) -> ModelInfo:
    """What intake learns of a model file without running it: its format (`NotAModelError` if
    it is not a model) and its signature. `sha256` and `uploaded_bytes` name what was uploaded
    (an ONNX bundle is kept as the one file `single_file_onnx` made of it)."""
    model_format = sniff_format(path)
    return ModelInfo(
        sha256=sha256,
        size_bytes=uploaded_bytes or path.stat().st_size,
        format=model_format.value,
        signature=read_signature_in_sandbox(path, model_format),  # never parsed in this process
    )


def store_inputs(store: ObjectStore, path: Path, owner: str | None = None) -> str:
    """Check a user's example inputs (`BadInputs` if unusable: object arrays, no batch axis, ...;
    their headers only) and store them under `inputs/{sha256}.npz` (once), granted to `owner`
    (only they may name them in a run); returns the SHA-256."""
    from workloads.custom import check_npz

    check_npz(path)
    sha = sha256_of(path)
    if not store.exists(keys.inputs(sha)):
        store.put_file(keys.inputs(sha), path)
    if owner is not None:
        store.put_bytes(keys.inputs_owner(sha, owner), b"", if_absent=True)
    return sha


def keep_model(store: ObjectStore, path: Path, info: ModelInfo) -> None:
    """Store a checked model file (unless already there) and its facts beside it: the one
    place a model enters the store."""
    if not store.exists(keys.model(info.sha256)):
        store.put_file(keys.model(info.sha256), path)
    store.put_bytes(keys.model_info(info.sha256), info.to_bytes(), if_absent=True)


def model_info(store: ObjectStore, sha256: str) -> dict | None:
    """The facts of a stored model, or None if no model has this SHA-256. A model stored
    before its facts (or its signature) were kept is read once and its facts written."""
    try:
        known = ModelInfo.read(store.get_bytes(keys.model_info(sha256)))
        if known.signature is not None:
            return known.public()
    except NotFound:
        pass
    if not store.exists(keys.model(sha256)):
        return None
    with tempfile.TemporaryDirectory(prefix="ayci-model-") as tmp:
        path = Path(tmp) / "model"
        store.get_file(keys.model(sha256), path)
        info = model_facts(path, sha256)
    store.put_bytes(keys.model_info(sha256), info.to_bytes())  # facts kept before signatures were read gain one
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


class NotSubmitted(Exception):
    """The bus did not take the run's request: nothing was started (its record says so)."""


def checked_plan(
    store: ObjectStore, request: RequestSubmitted, signature: ModelSignature | None, inputs_path: Path | None = None
) -> Callable[[], Plan]:
    """How to plan `request` (a plan reads the store: made only when asked for); `BindingError`
    at once, naming the model's inputs that nothing the run feeds can bind to. The user's inputs
    are read from `inputs_path`, else from the store."""
    shapes = request_shapes(store, request, inputs_path)
    refuse_unbindable(signature, request, shapes)
    return lambda: plan_run(request, signature, store, shapes)


def submit_run(
    store: ObjectStore,
    publisher,
    request: RequestSubmitted,
    run_id: str | None = None,
    limits: OwnerLimits | None = None,
) -> Envelope:
    """Start a run: with `limits`, first reserve it in the owner's limits (`LimitReached` if it
    would pass one: nothing is written), then its record (owner, combinations), its request on the
    bus, and the owner's count of the day. `NotSubmitted` if the bus does not take it: the record
    then says it never started, so it is shown to nobody, and its reservation is given back.
    Returns the envelope that started it (its `run_id`)."""
    envelope = new_run(request, run_id=run_id)
    total = len(measured_combos(request))
    if limits is not None:
        reserve(store, request.owner, envelope.run_id, total, limits)
    try:
        record_run(store, envelope.run_id, request)
        publisher.publish([envelope])
    except Exception as exc:
        log.exception("run_not_submitted", run_id=envelope.run_id, owner=request.owner)
        withdraw_run(store, envelope.run_id, whole(exc))
        if limits is not None:
            release(store, request.owner, envelope.run_id)
        raise NotSubmitted(whole(exc)) from exc
    count_run(store, request.owner, envelope.run_id, total, datetime.now(UTC))
    log.info("run_submitted", run_id=envelope.run_id, owner=request.owner, combinations=total)
    return envelope
