"""The HTTP API's request and response bodies. A run's request body builds the contract's own
`Matrix` and `ModelRef` (their validators are the only ones); their errors are reported at the
body's fields."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from schemas.combos import SHA256_PATTERN, BatchSize, Hardware, Matrix, MemoryMb, ModelRef, Optimizer, Workload
from schemas.events import DEFAULT_TUNING_TRIALS, RequestSubmitted, TrafficProfile
from schemas.signature import ModelSignature

Sha256 = Annotated[str, Field(pattern=SHA256_PATTERN.pattern, description="64 lowercase hex characters")]
Sha256Path = Annotated[str, PathParam(pattern=SHA256_PATTERN.pattern)]
RunId = Annotated[
    str,
    PathParam(pattern=r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", description="the run's UUID"),
]
EMAIL_PATTERN = r"^[^@\s]{1,64}@[^@\s]{1,252}\.[^@\s.]{2,}$"


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
    matrix: dict[Hardware, list[Optimizer]] = Field(
        min_length=1, examples=[{"intel": ["base", "onnx"], "arm": ["onnx"]}]
    )
    batch_sizes: list[BatchSize] = Field(min_length=1, max_length=16)
    memory_sizes_mb: list[MemoryMb] = Field(
        min_length=1, max_length=16, description="Lambda memory sizes, 128..10240 MB"
    )
    email: Annotated[str, Field(pattern=EMAIL_PATTERN, max_length=254)] | None = None
    slo_p99_ms: float | None = Field(default=None, gt=0, le=3_600_000)
    min_agreement: float = Field(default=0.99, ge=0, le=1)
    tuning_trials: int = Field(default=DEFAULT_TUNING_TRIALS, ge=0, le=20000)
    force: bool = False
    predict: bool = Field(
        default=False,
        description="measure at most 3 memory sizes per hardware, optimizer and batch, "
        "predict the others with an interval (needs at least 4 memory sizes)",
    )
    traffic: TrafficProfile | None = Field(
        default=None, description="the traffic to price the results under in the email"
    )
    profile: bool = Field(
        default=False,
        description="profile each measured combination after its measurement (a separate pass: "
        "Chrome trace and operator table, `GET /runs/{id}/profiles`)",
    )
    precision: Literal["quick", "exact"] = Field(
        default="quick",
        description="quick: measure every combination briefly, then to full precision only those that can still "
        "be an answer (the others shown as dominated, with the evidence); exact: everything to full precision",
    )
    inputs_sha256: Annotated[str, Field(pattern=SHA256_PATTERN.pattern)] | None = Field(
        default=None,
        description="your own example inputs, stored by your `PUT /inputs` (required by the custom workload; "
        "another owner's hash is answered as not stored)",
    )

    def matrix_of(self) -> Matrix:
        return _contract(
            lambda: Matrix(optimizers=self.matrix, batch_sizes=self.batch_sizes, memory_sizes_mb=self.memory_sizes_mb),
            {"optimizers": "matrix", "batch_sizes": "batch_sizes", "memory_sizes_mb": "memory_sizes_mb"},
        )

    def request_for(self, owner: str, stored_format: str, matrix: Matrix) -> RequestSubmitted:
        """The contract's request: the model as stored, the matrix, the owner's choices."""
        model = _contract(
            lambda: ModelRef(
                sha256=self.model.sha256,
                size_bytes=self.model.size_bytes,
                format=stored_format,
                workload=self.workload,
                input_size=self.input_size,
                inputs_sha256=self.inputs_sha256,
            ),
            {"input_size": "input_size", "workload": "workload", "": "input_size"},
        )
        return _contract(
            lambda: RequestSubmitted(
                model=model,
                matrix=matrix,
                slo_p99_ms=self.slo_p99_ms,
                min_agreement=self.min_agreement,
                tuning_trials=self.tuning_trials,
                email=self.email,
                owner=owner,
                force=self.force,
                predict=self.predict,
                traffic=self.traffic,
                profile=self.profile,
                precision=self.precision,
            ),
            {"": "memory_sizes_mb"},  # the request's own check: enough memory sizes to predict
        )


def _contract(build, fields: dict[str, str]):
    """Build a contract object; its validation errors become the body's (422 naming the field)."""
    try:
        return build()
    except ValidationError as exc:
        errors = []
        for e in exc.errors():
            first = str(e["loc"][0]) if e["loc"] else ""
            errors.append({**e, "loc": ("body", fields.get(first, first), *e["loc"][1:])})
        raise RequestValidationError(errors) from None


def invalid(loc: tuple, message: str) -> RequestValidationError:
    return RequestValidationError([{"type": "value_error", "loc": loc, "msg": message, "input": None}])


class TrafficRequest(Strict):
    """A traffic profile to serve a finished run's combinations under (`core/lambda_model/traffic.py`)."""

    rps: float = Field(gt=0, le=100_000, description="requests per second (the base rate of spiky)")
    pattern: Literal["steady", "spiky"] = Field(
        default="steady", description="spiky: 10x bursts of 30 s every 10 minutes"
    )
    idle_timeout_s: float = Field(default=600, gt=0, le=7 * 86400, description="how long an idle instance is kept")
    duration_s: float = Field(default=30 * 86400, ge=60, le=366 * 86400, description="the period billed")
    slo_p99_ms: float | None = Field(default=None, gt=0, le=3_600_000, description="p99 with cold starts included")
    concurrency_limit: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="the account's concurrency limit (default: Lambda's default, 1,000); requests past it or "
        "past the scaling rate are throttled",
    )


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
    state: str = Field(
        description="queued | measured | failed | skipped (not measured: it cannot change the answer; `reason`: why)"
    )
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
    skipped: int = Field(default=0, description="not measured because they cannot change the answer (TVM's tuning)")
    combinations: list[CombinationProgress]
    answer: dict[str, Any] | None = Field(
        default=None,
        description="a racing run's running answer, from its first answer on (every engine's most telling "
        "combination measured): picks with their p99 and cost intervals, each pick's margin over the next, what is "
        "dominated and by what, what is being refined; `stage` provisional (with `ended` of `total` combinations "
        "measured: picks may change), quick, refining or final",
    )
    answer_text: list[str] = Field(default=[], description="the running answer as lines of text")


class ModelStatus(BaseModel):
    sha256: str
    stored: bool
    size_bytes: int | None = None
    format: str | None = None
    signature: ModelSignature | None = Field(
        default=None, description="the model's inputs and outputs as its file declares them (read without running it)"
    )


class StoredInputs(BaseModel):
    sha256: str
    arrays: dict[str, dict[str, Any]] = Field(description="each array's shape (batch first) and dtype")


class PlannedCombination(BaseModel):
    combination_key: str
    label: str
    combo: dict[str, Any]
    state: str = Field(description="reused | measure | predict (from measured sizes, with predict) | impossible")
    reason: str | None = None
    estimated_conversion_s: float
    estimated_measurement_s: float


class PlanAnswer(BaseModel):
    combinations: list[PlannedCombination]
    totals: dict[str, float]


class UploadOfferBody(BaseModel):
    method: str = Field(
        description="PUT: send the raw bytes to url with the API key; "
        "POST: a multipart form of fields, then the file as `file`"
    )
    url: str
    fields: dict[str, str]
    max_bytes: int


class UploadAnswer(ModelStatus):
    upload: UploadOfferBody | None = None


class UploadVerification(Strict):
    size_bytes: int = Field(gt=0)


class Problem(BaseModel):
    detail: Any


ERRORS = {status: {"model": Problem} for status in (401, 403, 404, 409, 413, 422, 429, 503)}
