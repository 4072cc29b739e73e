"""The event contract: versioned payloads in one envelope.

Every payload class names its `TYPE` and current `VERSION`. Stored and replayed events of
an older version are upcast step by step when read (`UPCASTERS`), so they stay readable.
An unknown type or version is a `SchemaError`, never a guess.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from schemas.combos import DEFAULT_MIN_AGREEMENT, PREDICT_MIN_SIZES, Combo, Matrix, ModelRef, Tuning
from schemas.cost import default_region as default_price_region
from schemas.cost import load_prices
from schemas.recommendation import Recommendation

# MetaSchedule trials per TVM artifact when the request names none: where TVM overtook tuned
# ONNX Runtime on ResNet-18 on a 2-core x86 host, about 11 minutes of tuning (measured with
# `bench/bench_optimizers.py --curve`: 300 trials 1.17-1.25x ONNX Runtime's latency, 600 0.75-0.85x,
# 900 0.70-0.89x, at 1 and 2 threads). A request may ask for fewer (faster conversion) or more.
DEFAULT_TUNING_TRIALS = 600
# A TVM artifact's search stops at its trials or after this long, whichever comes first (a batch of
# trials is not started when it would end past it, at the search's pace so far): the 15 minutes
# per model issue #18 holds tuning to. Records say how many trials were measured.
TUNING_TIME_LIMIT_S = 900.0


# the validation context of what is read back (events, plans, records): checked when it was made
STORED: dict[str, Any] = {"stored": True}


class SchemaError(ValueError):
    """An event that cannot be read: unknown type or version, or a payload that does not fit."""


class Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    TYPE: ClassVar[str]
    VERSION: ClassVar[int] = 1


class TrafficProfile(BaseModel):
    """The traffic the user expects: the email shows the run's combinations under it."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    rps: float = Field(gt=0, le=100_000, allow_inf_nan=False)
    pattern: Literal["steady", "spiky"] = "steady"
    idle_timeout_s: float = Field(default=600, gt=0, le=7 * 86400)
    duration_s: float = Field(default=30 * 86400, ge=60, le=366 * 86400)
    # the account's concurrency limit (None: Lambda's default, data/lambda_limits.json); RequestSubmitted v8
    concurrency_limit: int | None = Field(default=None, ge=1, le=1_000_000)


class RequestSubmitted(Payload):
    """A user asked to measure `matrix` on `model`. Version 2 carries the matrix per hardware;
    version 3 can ask to measure a few memory sizes and predict the rest (`predict`); version 4
    can name the traffic to price the results under (`traffic`); version 5 can name the
    optimizer `onnx_int8` in its matrix; version 6 can ask for each measured combination to be
    profiled after its measurement (`profile`); version 7 names its `precision` (`quick`, the
    default: race, `core/racing.py`; `exact`: every combination to full precision, as every run of
    an older version was); version 8 can name the account's concurrency limit in its `traffic`."""

    TYPE = "RequestSubmitted"
    VERSION = 8
    model: ModelRef
    matrix: Matrix
    slo_p99_ms: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    min_agreement: float = Field(default=DEFAULT_MIN_AGREEMENT, ge=0, le=1, allow_inf_nan=False)
    balance_weight: float = Field(default=0.5, ge=0, le=1, allow_inf_nan=False)  # weight of cost against p99
    price_region: str = Field(default_factory=default_price_region)  # a region of the price table (schemas/cost.py)
    tuning_trials: int = Field(default=DEFAULT_TUNING_TRIALS, ge=0, le=20000)
    email: str | None = None
    owner: str = "local"
    force: bool = False  # measure again even where a stored result exists
    replay_of: str | None = None  # the run this one replays
    # None: an hour, or twice the run's estimated length if longer (core/deadlines.py); a number is kept
    deadline_s: float | None = Field(default=None, gt=0)
    # measure at most 3 memory sizes per (hardware, optimizer, batch), predict the others
    # (`core/run_plan.py` picks them, `core/lambda_model/prediction.py` predicts)
    predict: bool = False
    traffic: TrafficProfile | None = None
    profile: bool = False  # profile each measured combination after its measurement (services/inference/profiling.py)
    # quick: measure each combination briefly, then to full precision only those that can still be an
    # answer (core/racing.py); exact: everything to full precision
    precision: Literal["quick", "exact"] = "quick"

    @property
    def tuning(self) -> Tuning:
        """The TVM tuning budget this request's tvm artifacts are built with (part of their keys)."""
        return Tuning(trials=self.tuning_trials, time_limit_s=TUNING_TIME_LIMIT_S, min_agreement=self.min_agreement)

    @model_validator(mode="after")
    def _enough_sizes_to_predict(self) -> RequestSubmitted:
        sizes = self.matrix.memory_sizes_mb
        if self.predict and len(sizes) < PREDICT_MIN_SIZES:
            raise ValueError(
                f"predict measures up to {PREDICT_MIN_SIZES - 1} memory sizes and predicts the others: "
                f"{len(sizes)} memory size{'s' if len(sizes) != 1 else ''} ({', '.join(map(str, sizes))}) "
                "cost no more to measure. "
                f"Give at least {PREDICT_MIN_SIZES} (e.g. a range: 128-10240) or do not predict"
            )
        return self

    @field_validator("price_region")
    @classmethod
    def _known_price_region(cls, value: str, info: ValidationInfo) -> str:
        """Checked when a request is made (a submission), not when it is read back (`STORED`): a
        run accepted before the price table changed is still read and archived (its cost then
        says why it is unavailable)."""
        if not (info.context or {}).get("stored"):
            load_prices().region(value)  # UnknownPriceRegion (a ValueError) names the known ones
        return value


class RunPlanned(Payload):
    """What a run waits for (`combos`, measured) and, version 2, what it predicts from them."""

    TYPE = "RunPlanned"
    VERSION = 2
    model: ModelRef
    combos: dict[str, Combo]  # combination key -> combination
    deadline: datetime
    request: RequestSubmitted
    predicted: dict[str, Combo] = {}  # combination key -> combination predicted from the measured ones


class ComboPending(Payload):
    """Convert (then measure) one combination. Version 2 carries the run's `min_agreement`
    (onnx_int8 chooses its recipe against it; version 1 converted against the default)."""

    TYPE = "ComboPending"
    VERSION = 2
    model: ModelRef
    combo: Combo
    combo_key: str
    artifact_key: str
    target_cpu: str  # what the artifact is built for (part of its key)
    tuning_trials: int = DEFAULT_TUNING_TRIALS
    min_agreement: float = Field(default=DEFAULT_MIN_AGREEMENT, ge=0, le=1, allow_inf_nan=False)


class ModelConverted(Payload):
    """A combination's artifact is ready: measure it. Version 2: `refine`, a combination the
    quick pass found can still be an answer, measured again to full precision (`core/racing.py`).
    Version 3: `measured_again`, how many of its measurements were disturbed and are being measured
    again (`services/inference/handlers.py`, `DISTURBED_MEASURED_AGAIN`)."""

    TYPE = "ModelConverted"
    VERSION = 3
    model: ModelRef
    combo: Combo
    combo_key: str
    artifact_key: str
    artifact_file: str
    conversion_s: float
    tuning_s: float = 0.0
    artifact_reused: bool = False
    refine: bool = False
    measured_again: int = 0


class ProfileRequested(Payload):
    """Profile a finished run's measured combination (the page's "profile this", `POST
    /runs/{id}/combinations/{key}/profile`): the inference worker of its hardware runs a
    profiled pass confined as it was measured and stores the trace next to `result_key`."""

    TYPE = "ProfileRequested"
    combo: Combo
    combo_key: str
    result_key: str


class InferenceDone(Payload):
    """Version 2: `refine`, the full-precision measurement of a combination the quick pass
    measured (it replaces the quick one); `precision`, the pass that measured it (`quick`: a racing
    run's first pass; its result is rough unless it converged there, `core.racing.converged_in_quick_pass`)."""

    TYPE = "InferenceDone"
    VERSION = 2
    combo: Combo
    combo_key: str
    result_key: str
    p50_ms: float
    p99_ms: float
    reused: bool = False
    refine: bool = False
    precision: Literal["quick", "exact"] = "exact"


class CombosReused(Payload):
    """Stored results a run reuses, many in one event (dedup: up to `REUSED_PER_EVENT`): a
    resubmitted matrix is a handful of events, not one per combination. Version 2 names the
    object where dedup kept the documents it read (`bundle`), so the archiver reads one object
    for them, not one per combination."""

    TYPE = "CombosReused"
    VERSION = 2
    results: dict[str, str] = Field(min_length=1)  # combination key -> the stored result's key (its exact version)
    bundle: str | None = None  # keys.reused_bundle: combination key -> the stored result's document


REUSED_PER_EVENT = 400  # about 100 bytes each: well inside EventBridge's 256 KB per event


class FailureStage(StrEnum):
    request = "request"
    plan = "plan"  # the model cannot run the combination (its signature or size says so): never sent to a worker
    dedup = "dedup"
    converter = "converter"
    inference = "inference"
    dead_letter = "dead_letter"
    deadline = "deadline"
    cancelled = "cancelled"
    prediction = "prediction"  # a predicted size that will not fit, or a family its measurements cannot predict
    # not measured because it cannot change the answer (TVM's tuning skipped, with the evidence): not a failure,
    # the run stays complete (ComboFailed v3)
    skipped = "skipped"


class ComboFailed(Payload):
    """Version 2: `refine`, the full-precision measurement of a quick-measured combination failed
    (its quick figures stand). Version 3: the stage `skipped` (not measured: it cannot change the
    answer), which does not make the run partial."""

    TYPE = "ComboFailed"
    VERSION = 3
    combo: Combo
    combo_key: str
    stage: FailureStage
    reason: str
    refine: bool = False


class RunDeadlineReached(Payload):
    """Close the run now if `deadline` has passed. Version 2 can also end a run that cannot go
    on (`reason`: e.g. its request or plan was dead-lettered), carrying the `request` so a run
    whose plan was never stored still ends with a summary."""

    TYPE = "RunDeadlineReached"
    VERSION = 2
    deadline: datetime
    reason: str | None = None
    stage: FailureStage = FailureStage.deadline
    request: RequestSubmitted | None = None


class RunStatus(StrEnum):
    complete = "complete"
    partial = "partial"
    failed = "failed"


class RunArchived(Payload):
    TYPE = "RunArchived"
    VERSION = 2
    status: RunStatus
    summary_key: str  # `runs/{run_id}/summary.json`
    succeeded: int
    failed: int
    failures: dict[str, str] = {}  # combination label -> reason
    recommendation: Recommendation | None = None  # v2: typed (v1: the same JSON, any object)
    email: str | None = None


PAYLOAD_TYPES: dict[str, type[Payload]] = {
    cls.TYPE: cls
    for cls in (
        RequestSubmitted,
        RunPlanned,
        ComboPending,
        ModelConverted,
        ProfileRequested,
        InferenceDone,
        CombosReused,
        ComboFailed,
        RunDeadlineReached,
        RunArchived,
    )
}


def _request_submitted_v1_to_v2(old: dict[str, Any]) -> dict[str, Any]:
    """v1 listed `hardware` and `optimizers` separately (every optimizer on every hardware)
    and called memory sizes `memory_mb`; v2 has a matrix per hardware."""
    new = {k: v for k, v in old.items() if k not in ("hardware", "optimizers", "batch_sizes", "memory_mb")}
    new["matrix"] = {
        "optimizers": {hw: list(old["optimizers"]) for hw in old["hardware"]},
        "batch_sizes": old["batch_sizes"],
        "memory_sizes_mb": old["memory_mb"],
    }
    return new


def _deadline_v1_to_v2(old: dict[str, Any]) -> dict[str, Any]:
    """v1 was only the deadline."""
    return {"deadline": old["deadline"]}


def _run_archived_v1_to_v2(old: dict[str, Any]) -> dict[str, Any]:
    """v1's recommendation was any object; v2's is a `Recommendation` of the same JSON. A v1
    recommendation that is not one (not an object, or a field of another type) is left out:
    the summary the event names keeps the run's recommendation."""
    recommendation = old.get("recommendation")
    if recommendation is not None:
        try:
            Recommendation.model_validate(recommendation)
        except ValidationError:
            return {k: v for k, v in old.items() if k != "recommendation"}
    return dict(old)


def _added_defaults(old: dict[str, Any]) -> dict[str, Any]:
    """The next version only added fields with defaults or values (RequestSubmitted v3:
    `predict`, v4: `traffic`, v5: the optimizer `onnx_int8`, v6: `profile`, v8: `traffic.concurrency_limit`;
    RunPlanned v2:
    `predicted`; CombosReused v2: `bundle`; ModelConverted, InferenceDone and ComboFailed v2: `refine`;
    ComboFailed v3: the stage `skipped`; ModelConverted v3: `measured_again`)."""
    return dict(old)


def _request_submitted_v6_to_v7(old: dict[str, Any]) -> dict[str, Any]:
    """v7 added `precision`, `quick` by default: a request of v6 or older measured everything to full precision."""
    return {**old, "precision": "exact"}


# (type, version it reads) -> function giving the payload of the next version
UPCASTERS: dict[tuple[str, int], Callable[[dict[str, Any]], dict[str, Any]]] = {
    ("RequestSubmitted", 1): _request_submitted_v1_to_v2,
    ("RequestSubmitted", 2): _added_defaults,
    ("RequestSubmitted", 3): _added_defaults,
    ("RequestSubmitted", 4): _added_defaults,
    ("RequestSubmitted", 5): _added_defaults,
    ("RequestSubmitted", 6): _request_submitted_v6_to_v7,
    ("RequestSubmitted", 7): _added_defaults,
    ("ModelConverted", 1): _added_defaults,
    ("ModelConverted", 2): _added_defaults,
    ("ComboPending", 1): _added_defaults,  # v2: min_agreement
    ("InferenceDone", 1): _added_defaults,
    ("ComboFailed", 1): _added_defaults,
    ("ComboFailed", 2): _added_defaults,
    ("RunPlanned", 1): _added_defaults,
    ("CombosReused", 1): _added_defaults,
    ("RunDeadlineReached", 1): _deadline_v1_to_v2,
    ("RunArchived", 1): _run_archived_v1_to_v2,
}


class Envelope(BaseModel):
    """What travels: one payload with the facts every consumer needs to trace and dedupe it."""

    model_config = ConfigDict(frozen=True)
    event_id: str
    type: str
    schema_version: int
    run_id: str
    time: datetime
    producer: str
    causation_id: str | None = None
    payload: SerializeAsAny[Payload]

    @classmethod
    def wrap(
        cls,
        payload: Payload,
        *,
        run_id: str,
        producer: str,
        causation_id: str | None = None,
        event_id: str | None = None,
    ) -> Envelope:
        return cls(
            event_id=event_id or str(uuid.uuid4()),
            type=payload.TYPE,
            schema_version=payload.VERSION,
            run_id=run_id,
            time=datetime.now(UTC),
            producer=producer,
            causation_id=causation_id,
            payload=payload,
        )

    def caused(self, payload: Payload, *, producer: str, index: int) -> Envelope:
        """The envelope of an event this one caused. Its id derives from this event's id, the
        producer and its position, so handling a redelivered event yields the same ids and
        consumers downstream see a duplicate, not a new event."""
        event_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{self.event_id}/{producer}/{index}/{payload.TYPE}"))
        return Envelope.wrap(
            payload, run_id=self.run_id, producer=producer, causation_id=self.event_id, event_id=event_id
        )

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def parse(cls, data: str | bytes | dict[str, Any]) -> Envelope:
        """Read an envelope of any known version, upcasting its payload to the current one."""
        if isinstance(data, (str, bytes, bytearray)):
            try:
                data = json.loads(data)
            except ValueError as exc:
                raise SchemaError(f"not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise SchemaError("an event must be a JSON object")
        event_type = data.get("type")
        version = data.get("schema_version")
        payload_cls = PAYLOAD_TYPES.get(event_type) if isinstance(event_type, str) else None
        if payload_cls is None:
            raise SchemaError(f"unknown event type {event_type!r}")
        if not isinstance(version, int) or not 1 <= version <= payload_cls.VERSION:
            raise SchemaError(f"unknown version {version!r} of {event_type} (known: 1..{payload_cls.VERSION})")
        payload = data.get("payload")
        if not isinstance(payload, dict):
            raise SchemaError(f"{event_type} has no payload object")
        while version < payload_cls.VERSION:
            try:
                payload = UPCASTERS[(event_type, version)](payload)
            except (
                KeyError,
                TypeError,
                ValueError,
                AttributeError,
            ) as exc:  # an old payload missing what its version had
                raise SchemaError(f"{event_type} v{version} cannot be upcast: {type(exc).__name__}: {exc}") from exc
            version += 1
        try:
            return cls(
                **{k: v for k, v in data.items() if k not in ("payload", "schema_version")},
                schema_version=version,
                payload=payload_cls.model_validate(payload, context=STORED),
            )
        except ValidationError as exc:
            raise SchemaError(f"{event_type} v{data.get('schema_version')} does not fit the schema: {exc}") from exc
