"""The request service's HTTP API and web page: one FastAPI app, whatever hosts it (uvicorn
locally, Mangum in a Lambda behind API Gateway).

`create_app(deps)` is thin: it turns HTTP into calls on the store, the uploader and the
publisher in `deps`, which the host wires (`ayci/serve.py`). Every route but the page and the
OpenAPI document needs an API key (`X-API-Key`: 401 without, 403 for a wrong one); the key
names its owner, and a run of another owner is a 404. Bodies are validated by pydantic (422
naming the field) and size-limited (413).
"""

from __future__ import annotations

import hmac
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import structlog
from fastapi import Body, Depends, FastAPI, HTTPException, Query, Request, Security
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.security import APIKeyHeader
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from core.ports import ObjectStore
from ayci.settings import Settings
from schemas.combos import SHA256_PATTERN, BatchSize, Hardware, Matrix, MemoryMb, ModelRef, Optimizer, Workload
from schemas.events import Envelope, RequestSubmitted
from report import results_csv, results_document
from services.request.runs import load_run, load_summary, record_run, run_progress, withdraw_run
from services.request.submission import model_info, new_run
from services.request.uploads import LocalUploader, UploadRejected, Uploader, verify_upload

log = structlog.get_logger()

WEB_DIR = Path(__file__).parent / "web"
API_KEY_HEADER = "X-API-Key"
OWNER_PATTERN = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
Sha256 = Annotated[str, Field(pattern=SHA256_PATTERN.pattern, description="64 lowercase hex characters")]
RunId = Annotated[str, PathParam(pattern=r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", description="the run's UUID")]
PUBLIC_PATHS = ("/", "/openapi.json")  # and /static/: the page needs no key
EMAIL_PATTERN = r"^[^@\s]{1,64}@[^@\s]{1,252}\.[^@\s.]{2,}$"


@dataclass
class RequestDeps:
    store: ObjectStore
    publisher: Any  # `publish(list[Envelope])`: a LoggedPublisher on any transport
    api_keys: dict[str, str]  # API key -> owner
    uploader: Uploader
    settings: Settings


def parse_api_keys(text: str) -> dict[str, str]:
    """`"key1:owner1,key2:owner2"` -> `{"key1": "owner1", "key2": "owner2"}`."""
    keys = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, owner = item.partition(":")
        if not sep or len(key) < 8 or not OWNER_PATTERN.match(owner):
            raise ValueError(f"an API key entry must be KEY:OWNER (key of 8+ characters, owner [A-Za-z0-9_.@-]), got {item[:12]!r}...")
        keys[key] = owner
    return keys


# ------------------------------------------------------------------ request and response bodies
class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelSpec(Strict):
    sha256: Sha256
    size_bytes: int = Field(gt=0, description="the file's size in bytes")


class RunRequest(Strict):
    """What to measure: every hardware x optimizer in `matrix` x batch size x memory size."""

    model: ModelSpec
    workload: Workload
    input_size: list[Annotated[int, Field(ge=1, le=8192)]] = Field(
        min_length=1, max_length=2, description="[height, width] for images and detection, [sequence length] for nlp"
    )
    matrix: dict[Hardware, list[Optimizer]] = Field(min_length=1, examples=[{"intel": ["base", "onnx"], "arm": ["onnx"]}])
    batch_sizes: list[BatchSize] = Field(min_length=1, max_length=16)
    memory_sizes_mb: list[MemoryMb] = Field(min_length=1, max_length=16, description="Lambda memory sizes, 128..10240 MB")
    email: Annotated[str, Field(pattern=EMAIL_PATTERN, max_length=254)] | None = None
    slo_p99_ms: float | None = Field(default=None, gt=0, le=3_600_000)
    min_agreement: float = Field(default=0.99, ge=0, le=1)
    tuning_trials: int = Field(default=64, ge=0, le=20000)
    force: bool = False

    @field_validator("matrix")
    @classmethod
    def _names_an_optimizer(cls, value: dict[Hardware, list[Optimizer]]) -> dict[Hardware, list[Optimizer]]:
        if not any(value.values()):
            raise ValueError("the matrix names no optimizer for any hardware")
        return value

    @field_validator("input_size")
    @classmethod
    def _fits_workload(cls, value: list[int], info: ValidationInfo) -> list[int]:
        workload = info.data.get("workload")
        wanted = 1 if workload == Workload.nlp else 2
        if workload is not None and len(value) != wanted:
            raise ValueError(f"input_size for {workload.value} must be {'[sequence_length]' if wanted == 1 else '[height, width]'}")
        return value


class RunCreated(BaseModel):
    run_id: str
    combinations: int
    status_url: str
    results_url: str


class CombinationProgress(BaseModel):
    combo_key: str
    label: str
    hardware: Hardware
    optimizer: Optimizer
    batch_size: int
    memory_mb: int
    state: str = Field(description="queued | measured | failed")
    p50_ms: float | None = None
    p99_ms: float | None = None
    reused: bool | None = None
    reason: str | None = None


class RunProgress(BaseModel):
    run_id: str
    status: str = Field(description="running | complete | partial | failed")
    submitted_at: str
    total: int
    queued: int
    measured: int
    failed: int
    combinations: list[CombinationProgress]


class ModelStatus(BaseModel):
    sha256: str
    stored: bool
    size_bytes: int | None = None
    format: str | None = None


class UploadOfferBody(BaseModel):
    method: str = Field(description="PUT: send the raw bytes to url with the API key; POST: a multipart form of fields, then the file as `file`")
    url: str
    fields: dict[str, str]
    max_bytes: int


class UploadAnswer(ModelStatus):
    upload: UploadOfferBody | None = None


class UploadVerification(Strict):
    size_bytes: int = Field(gt=0)


class Problem(BaseModel):
    detail: Any


ERRORS = {status: {"model": Problem} for status in (401, 403, 404, 409, 413, 422, 503)}


# ------------------------------------------------------------------ the API key
api_key_header = APIKeyHeader(name=API_KEY_HEADER, auto_error=False, description="your API key (it names your user)")


def auth_problem(api_keys: dict[str, str], key: str | None) -> tuple[int, str] | str:
    """The owner that `key` names, or (HTTP status, reason)."""
    if not key:
        return 401, f"an API key is needed: send it in the {API_KEY_HEADER} header"
    for known, owner in api_keys.items():
        if hmac.compare_digest(known.encode(), key.encode(errors="replace")):
            return owner
    return 403, "this API key is not valid"


def owner_of(request: Request, key: Annotated[str | None, Security(api_key_header)] = None) -> str:
    found = auth_problem(request.app.state.deps.api_keys, key)
    if isinstance(found, tuple):
        raise HTTPException(found[0], found[1], headers={"WWW-Authenticate": "ApiKey"} if found[0] == 401 else None)
    return found


Owner = Annotated[str, Depends(owner_of)]


# ------------------------------------------------------------------ the app
def create_app(deps: RequestDeps) -> FastAPI:
    """The API and the page over `deps`. No CDN: the interactive docs are off (they load
    from one); the OpenAPI document is at `/openapi.json`."""
    app = FastAPI(
        title="AYCI: All You Can Inference",
        version="1",
        description="Measure a PyTorch model under every optimizer x hardware x batch size x Lambda memory size.",
        docs_url=None,
        redoc_url=None,
    )
    app.state.deps = deps

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _jsonable_errors(exc.errors())}, status_code=422)

    app.add_middleware(BodySizeLimit, max_bytes=deps.settings.max_body_bytes, streamed_prefixes=("/uploads/",))
    app.add_middleware(ApiKeyGate, api_keys=deps.api_keys)  # outermost: nothing is read before the key

    # ---------------------------------------------------------------- the page
    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(WEB_DIR / "index.html", media_type="text/html")

    app.mount("/static", StaticFiles(directory=WEB_DIR / "static"), name="static")

    # ---------------------------------------------------------------- models
    @app.get("/models/{sha256}", response_model=ModelStatus, responses=ERRORS, tags=["models"])
    def get_model(sha256: Annotated[str, PathParam(pattern=SHA256_PATTERN.pattern)], owner: Owner) -> ModelStatus:
        """Is a model with this SHA-256 stored already? (Then it is never uploaded again.)"""
        info = model_info(deps.store, sha256)
        return ModelStatus(sha256=sha256, stored=info is not None, **({k: info[k] for k in ("size_bytes", "format")} if info else {}))

    @app.post("/models/uploads", response_model=UploadAnswer, responses=ERRORS, tags=["models"], status_code=200)
    def offer_upload(spec: ModelSpec, owner: Owner, response: Response) -> UploadAnswer:
        """Where to upload a new model: a presigned S3 POST (or this app's `PUT /uploads/{sha256}`)
        limited to the announced size. A stored model gets no upload (`stored: true`)."""
        info = model_info(deps.store, spec.sha256)
        if info is not None:
            return UploadAnswer(sha256=spec.sha256, stored=True, size_bytes=info["size_bytes"], format=info["format"])
        if spec.size_bytes > deps.settings.max_model_bytes:
            raise HTTPException(413, f"a model may have at most {deps.settings.max_model_bytes} bytes, this one has {spec.size_bytes}")
        offer = deps.uploader.offer(owner, spec.sha256, spec.size_bytes)
        response.status_code = 201
        return UploadAnswer(sha256=spec.sha256, stored=False, upload=UploadOfferBody(**offer.__dict__))

    if isinstance(deps.uploader, LocalUploader):
        uploader: LocalUploader = deps.uploader

        @app.put("/uploads/{sha256}", status_code=204, responses=ERRORS, tags=["models"],
                 openapi_extra={"requestBody": {"required": True, "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}})
        async def receive_upload(
            sha256: Annotated[str, PathParam(pattern=SHA256_PATTERN.pattern)],
            size_bytes: Annotated[int, Query(gt=0)], owner: Owner, request: Request,
        ) -> Response:
            """The upload target on the embedded default: the raw model bytes, at most
            `size_bytes` (the announced size). Verified by `POST /models/{sha256}/verify`."""
            if size_bytes > deps.settings.max_model_bytes:
                raise HTTPException(413, f"a model may have at most {deps.settings.max_model_bytes} bytes")
            declared = request.headers.get("content-length")
            if declared and declared.isdigit() and int(declared) > size_bytes:
                raise HTTPException(413, f"the upload is larger than the announced {size_bytes} bytes")
            try:
                await uploader.receive(owner, sha256, size_bytes, request.stream())
            except UploadRejected as exc:
                raise HTTPException(exc.status, exc.reason) from None
            return Response(status_code=204)

    @app.post("/models/{sha256}/verify", response_model=ModelStatus, status_code=201, responses=ERRORS, tags=["models"])
    def verify_model(sha256: Annotated[str, PathParam(pattern=SHA256_PATTERN.pattern)], body: UploadVerification, owner: Owner) -> ModelStatus:
        """After the upload: check that it has the announced SHA-256 and size and is a model,
        then store it. On a mismatch the upload is discarded and nothing is stored (422)."""
        try:
            info = verify_upload(deps.store, deps.uploader, owner, sha256, body.size_bytes)
        except UploadRejected as exc:
            log.info("upload_rejected", owner=owner, sha256=sha256, reason=exc.reason)
            raise HTTPException(exc.status, exc.reason) from None
        return ModelStatus(sha256=sha256, stored=True, size_bytes=info["size_bytes"], format=info["format"])

    # ---------------------------------------------------------------- runs
    @app.post("/runs", response_model=RunCreated, status_code=201, responses=ERRORS, tags=["runs"])
    def submit_run(body: Annotated[RunRequest, Body()], owner: Owner, response: Response) -> RunCreated:
        """Start a run. The model must be stored (see `/models/uploads`)."""
        try:
            matrix = Matrix(optimizers=body.matrix, batch_sizes=body.batch_sizes, memory_sizes_mb=body.memory_sizes_mb)
        except ValidationError as exc:
            raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from None
        total = len(matrix.combos())
        if total > deps.settings.max_combinations:
            raise _invalid(("body", "matrix"), f"{total} combinations; a run may have at most {deps.settings.max_combinations}")
        info = model_info(deps.store, body.model.sha256)
        if info is None:
            raise HTTPException(409, f"model {body.model.sha256} is not stored: upload it first (POST /models/uploads)")
        if info["size_bytes"] != body.model.size_bytes:
            raise _invalid(("body", "model", "size_bytes"), f"the stored model with this SHA-256 has {info['size_bytes']} bytes, not {body.model.size_bytes}")
        model = ModelRef(sha256=body.model.sha256, size_bytes=info["size_bytes"], format=info["format"], workload=body.workload, input_size=body.input_size)
        request = RequestSubmitted(
            model=model, matrix=matrix, slo_p99_ms=body.slo_p99_ms, min_agreement=body.min_agreement,
            tuning_trials=body.tuning_trials, email=body.email, owner=owner, force=body.force,
        )
        envelope: Envelope = new_run(request, run_id=str(uuid.uuid4()))
        record_run(deps.store, envelope.run_id, request)
        try:
            deps.publisher.publish([envelope])
        except Exception as exc:  # the bus did not take it: nothing runs, so nothing is shown
            log.exception("run_not_submitted", run_id=envelope.run_id, owner=owner)
            withdraw_run(deps.store, envelope.run_id, f"{type(exc).__name__}: {exc}"[:300])
            raise HTTPException(503, "the run could not be submitted (the event bus did not take it); nothing was started, try again") from None
        log.info("run_submitted", run_id=envelope.run_id, owner=owner, combinations=total)
        response.headers["Location"] = f"runs/{envelope.run_id}"
        return RunCreated(run_id=envelope.run_id, combinations=total, status_url=f"runs/{envelope.run_id}", results_url=f"runs/{envelope.run_id}/results")

    def owned_run(run_id: str, owner: str) -> dict:
        record = load_run(deps.store, run_id, owner)
        if record is None:
            raise HTTPException(404, f"no run {run_id}")
        return record

    @app.get("/runs/{run_id}", response_model=RunProgress, responses=ERRORS, tags=["runs"])
    def get_run(run_id: RunId, owner: Owner) -> dict:
        """The run's status and each combination's progress."""
        return run_progress(deps.store, owned_run(run_id, owner))

    @app.get(
        "/runs/{run_id}/results", responses={**ERRORS, 200: {"content": {"application/json": {}, "text/csv": {"schema": {"type": "string"}}}}},
        tags=["runs"],
    )
    def get_results(run_id: RunId, owner: Owner, request: Request) -> Response:
        """The archived run's table, recommendation, Pareto front and failures: JSON, or CSV
        with `Accept: text/csv`. 409 while the run is still going."""
        owned_run(run_id, owner)
        summary = load_summary(deps.store, run_id)
        if summary is None:
            raise HTTPException(409, f"run {run_id} is still running")
        if "text/csv" in request.headers.get("accept", ""):
            return Response(results_csv(summary), media_type="text/csv", headers={"Content-Disposition": f'attachment; filename="ayci-{run_id}.csv"'})
        return JSONResponse(results_document(summary, f"{deps.settings.results_url}/runs/{run_id}/results"))

    return app


def _invalid(loc: tuple, message: str) -> RequestValidationError:
    return RequestValidationError([{"type": "value_error", "loc": loc, "msg": message, "input": None}])


def _jsonable_errors(errors: list[dict]) -> list[dict]:
    """pydantic's errors without the parts that are not JSON (exception objects in `ctx`)."""
    return [{k: (str(v) if k == "ctx" else v) for k, v in e.items() if k in ("type", "loc", "msg", "ctx")} for e in errors]


class ApiKeyGate:
    """ASGI middleware: every path but the page's and the OpenAPI document's needs a valid key
    before anything else happens (routing, body parsing, size checks), so a caller without
    one learns nothing but 401/403. The routes' `Owner` dependency then names the owner (and
    documents the key in the OpenAPI document)."""

    def __init__(self, app: Callable, api_keys: dict[str, str]) -> None:
        self.app = app
        self.api_keys = api_keys

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope["path"] in PUBLIC_PATHS or scope["path"].startswith("/static/"):
            return await self.app(scope, receive, send)
        key = next((v.decode("latin-1") for k, v in scope["headers"] if k == API_KEY_HEADER.lower().encode()), None)
        found = auth_problem(self.api_keys, key)
        if isinstance(found, tuple):
            headers = {"WWW-Authenticate": "ApiKey"} if found[0] == 401 else None
            return await JSONResponse({"detail": found[1]}, status_code=found[0], headers=headers)(scope, receive, send)
        await self.app(scope, receive, send)


class BodySizeLimit:
    """ASGI middleware: a request body over `max_bytes` is a 413 before the app reads it,
    whether it announces its length or not. Paths under `streamed_prefixes` (uploads) are
    left to their route, which limits them itself while streaming."""

    def __init__(self, app: Callable, max_bytes: int, streamed_prefixes: tuple[str, ...] = ()) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.streamed_prefixes = streamed_prefixes

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope["path"].startswith(self.streamed_prefixes):
            return await self.app(scope, receive, send)
        too_large = JSONResponse({"detail": f"the request body may have at most {self.max_bytes} bytes"}, status_code=413)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            return await too_large(scope, receive, send)
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_bytes:
                return await too_large(scope, receive, send)
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
