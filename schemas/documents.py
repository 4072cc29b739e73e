"""The stored state, typed and versioned like the events: what AYCI writes to the object store
(where: `schemas/keys.py`).

Each document carries `document_version`; a document written before versioning reads as
version 1. Reading a document of an older version runs its class's upcasters in order (as
`Envelope.parse` does for events), so older documents stay readable. Writing always writes the
current version. Documents keep fields they do not know (`extra="allow"`): a newer writer's
additions survive a round trip through an older reader.

- `ModelInfo`        models/{sha256}.json: what intake learned about a stored model
- `RunRecord`        runs/{id}/run.json: who submitted what, when
- `ArtifactManifest` artifacts/{key}/manifest.json: a complete converted artifact
- `MeasurementReport` what the measuring process reports (validated once, by the launcher)
- `MeasuredResult`   results/{combo key}.json: one measured combination
- `CombinationProfile` results/{combo key}/{run id}.profile.json: a profiled pass, naming its trace
- `Outcome`          runs/{id}/outcomes/{combo key}.json: how a combination ended in a run
- `ReusedOutcomes`   runs/{id}/outcomes/reused-{N}-{event id}.json: N reused combinations at once
- `ResultBundle`     results in one object: runs/{id}/reused/{part}.json (what dedup read for a
                     reuse), result-packs/{sha}/... (what a run measured)
- `PickChecks`       runs/{id}/checks.json: predicted picks measured before the run closes
- `RunSummary`       runs/{id}/summary.json: the archived run (v2): its rows (`SummaryResult`: a
                     measured result with its `Cost`, `MachineLoad`, `Environment`, or a predicted
                     one) and its `Recommendation`; a v1 summary is upcast on reading. `Cost` is
                     declared beside the formula (`schemas/cost.py`), `Recommendation` in
                     `schemas/recommendation.py` (the `RunArchived` event carries it too)
- `TableRow`         a row of the report's table (not stored: the API's JSON and CSV, the email,
                     the CLI); `model_dump(exclude_unset=True)` is the row as the page reads it

Readers use these models' attributes, never string keys: a renamed field fails where the
document is read (`SchemaError`), not later in another process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import from_json

from schemas.combos import Combo, ModelRef
from schemas.cost import Cost
from schemas.events import FailureStage, InferenceDone, ModelConverted, SchemaError
from schemas.flexible import Flexible
from schemas.recommendation import Interval, Recommendation
from schemas.signature import ModelSignature


def json_object(raw: bytes | str, name: str = "document") -> dict[str, Any]:
    """A stored JSON object, parsed (by pydantic-core's parser: ~2.5x Python's `json` on a
    result pack); `SchemaError` if it is not JSON or not an object."""
    try:
        data = from_json(raw)
    except ValueError as exc:
        raise SchemaError(f"{name} is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise SchemaError(f"{name} must be a JSON object")
    return data


class Document(BaseModel):
    # NaN and infinities written as Python's `json` writes them (and reads them back)
    model_config = ConfigDict(extra="allow", ser_json_inf_nan="constants")

    VERSION: ClassVar[int] = 1
    # version it reads -> function giving the document of the next version
    UPCASTERS: ClassVar[dict[int, Callable[[dict[str, Any]], dict[str, Any]]]] = {}

    @classmethod
    def read(cls, raw: bytes | str | dict[str, Any]) -> Self:
        """A stored document of any known version, upcast to the current one."""
        data = dict(raw) if isinstance(raw, dict) else json_object(raw, cls.__name__)
        version = data.pop("document_version", 1)
        if not isinstance(version, int) or not 1 <= version <= cls.VERSION:
            raise SchemaError(f"unknown version {version!r} of {cls.__name__} (known: 1..{cls.VERSION})")
        while version < cls.VERSION:
            data = cls.UPCASTERS[version](data)
            version += 1
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise SchemaError(f"{cls.__name__} v{version} does not fit the schema: {exc}") from exc

    def to_dict(self) -> dict[str, Any]:
        """The document as stored: the fields it was built with, and its version."""
        return {**self.model_dump(mode="json", exclude_unset=True), "document_version": self.VERSION}

    def to_bytes(self, *, indent: int | None = None) -> bytes:
        """`to_dict` as JSON, serialized in one pass (a summary of 1,536 results: ~20 ms, not
        ~100 ms through Python dicts): the model's own serializer, its version put first."""
        body = self.__pydantic_serializer__.to_json(self, exclude_unset=True, indent=indent)
        version = (
            b'"document_version":%d' % self.VERSION
            if indent is None
            else b'\n%s"document_version": %d' % (b" " * indent, self.VERSION)
        )
        return b"{" + version + (b"}" if body == b"{}" else b"," + body[1:])


class ModelInfo(Document):
    sha256: str
    size_bytes: int
    format: str
    signature: ModelSignature | None = None  # read at intake (engines/signature.py); None for models kept before

    def public(self) -> dict[str, Any]:
        """What the API returns about a model."""
        return self.model_dump(mode="json", exclude_unset=True)


class RunRecord(Document):
    run_id: str
    owner: str | None
    submitted_at: str | None = None
    combos: dict[str, Combo] = {}
    request: dict[str, Any] | None = None
    not_submitted: str | None = None  # the request could not be published: the run never started


class ArtifactManifest(Document):
    artifact_file: str
    optimizer: str
    hardware: str
    target_cpu: str
    conversion_s: float
    tuning_s: float = 0.0
    details: dict[str, Any] = {}

    def model_converted(
        self, *, model: ModelRef, combo: Combo, combo_key: str, artifact_key: str, reused: bool
    ) -> ModelConverted:
        """The `ModelConverted` this artifact stands for: the one place it is built from a manifest."""
        return ModelConverted(
            model=model,
            combo=combo,
            combo_key=combo_key,
            artifact_key=artifact_key,
            artifact_file=self.artifact_file,
            conversion_s=self.conversion_s,
            tuning_s=self.tuning_s,
            artifact_reused=reused,
        )


class Latency(Flexible):
    """Latency in ms: what every result has, a predicted one included."""

    p50: float
    p90: float
    p95: float | None = None  # results measured before the p95 was kept have none
    p99: float
    mean: float | None = None
    billed_ms_mean: float | None = None
    p99_samples: int | None = None
    p99_estimate: bool = False  # fewer samples than a p99 needs: the p99 is an estimate
    p99_ci95_low: float | None = None  # the p99's distribution-free 95 % interval (measuring/measure.py)
    p99_ci95_high: float | None = None
    max: float | None = None
    cv: float | None = None
    iterations: int | None = None


class LatencyStats(Latency):
    """Warm latency in ms over `iterations` samples; `billed_ms_mean` is the mean of the
    samples each rounded up to 1 ms, as Lambda bills them."""

    mean: float
    min: float
    max: float
    ci95_low: float
    ci95_high: float
    cv: float
    iterations: int
    converged: bool
    billed_ms_mean: float


class ColdStartTotal(Flexible):
    """A cold start's total in ms: what every result has, a predicted one included."""

    total: float
    first_inference: float | None = None  # a measured one's first answer (a predicted one has only the total)


class ColdStart(ColdStartTotal):
    """A cold start split, in ms, from the process's spawn to its first answer."""

    process_start: float
    imports: float
    model_load: float
    first_inference: float
    model_load_compiles: bool = False


class Agreement(Flexible):
    """Agreement with the base model's outputs: a score in [0, 1] by the workload's metric,
    plus the metric's details (max abs diff, top-1, IoU...)."""

    score: float
    metric: str
    max_abs_diff: float | None = None
    samples: int | None = None  # how many samples the score rests on
    inputs: str | None = None  # what they were: "synthetic" (the workload's) or "user" (the user's --inputs)


class MachineLoad(Flexible):
    """The machine's load around one measurement (`measuring/machine_load.py load_report`)."""

    host_cores: int | None = None
    loadavg_1m_before: float | None = None
    loadavg_1m_after: float | None = None
    cpu_pressure_avg10_before: float | None = None
    cpu_pressure_avg10_after: float | None = None
    other_busy_cores: float | None = None  # average cores busy with other work during the measurement
    other_work_limit_cores: float | None = None  # beyond this much other work, the measurement is disturbed
    # the host's speed around the measurement against its own reference (`measuring/host_speed.py`): a fixed loop
    # timed before and after it, the slower of the two over the host's fastest of the last hour (None: not probed)
    host_slowdown: float | None = None
    disturbed: bool = False  # other work took cores the measurement needed, or the host ran slow

    @property
    def disturbance(self) -> str | None:
        """Why the measurement was disturbed, in words (None: it was not)."""
        if not self.disturbed:
            return None
        limit = self.other_work_limit_cores
        if self.other_busy_cores is not None and (limit is None or self.other_busy_cores > limit):
            return f"other work used {self.other_busy_cores:.1f} cores while it was measured"
        if self.host_slowdown is not None:
            return (
                f"the host ran {self.host_slowdown:.2f}x slower than its own reference while it was measured "
                "(a fixed loop timed before and after it), other work here within the cores it left free: a "
                "slowdown from outside the machine"
            )
        return "other work took cores the measurement needed"


class Environment(Flexible):
    """Where a result was measured (`measuring/environment.py`): CPU, cores, kernel, cgroup,
    Python, library and AYCI versions."""

    cpu_model: str | None = None
    cpu_flags: list[str] = []
    host_cores: int | None = None
    kernel: str | None = None
    cgroup: str | None = None
    ayci_version: str | None = None
    python: str | None = None
    machine: str | None = None
    libraries: dict[str, str | None] = {}


class MeasurementReport(Flexible):
    """What the measuring process (`measuring/measure.py`) and its launcher report."""

    cold_start_ms: ColdStart
    latency_ms: LatencyStats
    warmup_iterations: int
    agreement: Agreement
    peak_rss_mb: float
    confined: bool = True
    confinement_reason: str | None = None
    threads: int | None = None
    vcpus: float | None = None
    lock_wait_s: float | None = None
    measurement_s: float | None = None
    load: MachineLoad | None = None
    cgroup_peak_mb: float | None = None
    cpu_throttled_share: float | None = None
    host_limited: bool = False  # the memory size's vCPU share is more than this host has
    vcpus_available: int | None = None
    environment: Environment | None = None


class MeasuredResult(MeasurementReport, Document):
    """One measured combination: the measurement report plus what was measured and its cost."""

    combo_key: str
    combo: Combo
    model: ModelRef
    measurement_version: str
    measured_at: str
    run_id: str
    conversion_s: float
    tuning_s: float = 0.0
    artifact_key: str
    emulated: bool = False
    cost: Cost | None = None
    profile_key: str | None = None  # its profiled pass (`CombinationProfile`), when the run asked for one
    conversion: dict[str, Any] | None = None  # what the conversion chose and why (onnx_int8: its recipes' figures)

    @property
    def label(self) -> str:
        return self.combo.label

    def inference_done(self, *, result_key: str, reused: bool) -> InferenceDone:
        """The `InferenceDone` this result stands for: the one place it is built from a result."""
        return InferenceDone(
            combo=self.combo,
            combo_key=self.combo_key,
            result_key=result_key,
            p50_ms=self.latency_ms.p50,
            p99_ms=self.latency_ms.p99,
            reused=reused,
        )


class OperatorRow(Flexible):
    """One operator of a profiled pass (`core/profiles.py operator_rows`), per inference."""

    op_type: str
    name: str
    group: str
    calls: float
    total_ms: float
    mean_ms: float
    share: float


class CombinationProfile(Document):
    """A profiled pass of a measured combination (never its timing): the operator table, the
    stored Chrome trace's key, and what profiling cost (profiled against unprofiled p50)."""

    combo_key: str
    run_id: str
    label: str
    optimizer: str
    trace_key: str
    trace_note: str | None = None  # the trace was cut to its bound: what was kept
    runs: int
    operators: list[OperatorRow]
    unprofiled_p50_ms: float
    profiled_p50_ms: float
    confined: bool
    confinement_reason: str | None = None
    profiled_at: str


class Outcome(Document):
    status: Literal["done", "failed"]
    result_key: str | None = None
    reused: bool = False
    stage: FailureStage | None = None
    reason: str | None = None


class ReusedOutcomes(Document):
    """The archiver's record of one `CombosReused`: each combination ended as that stored result."""

    results: dict[str, str]  # combination key -> the stored result's key (its exact version)
    bundle: str | None = None  # where dedup kept those results' documents (keys.reused_bundle)


class ResultBundle(Document):
    """Stored results in one object, each a `MeasuredResult` document as stored under its
    exact key: what dedup read for a reuse (the archiver reads them once), and the pack of
    what a run measured (a resubmission reads these instead of one object per combination).
    The documents stay as stored (each of its own version) and are read where they are used
    (`MeasuredResult.read`, `SummaryResult.of`): a pack holds up to 1,536 of them and a
    resubmission reads up to 8 packs for the few it wants (validating all of one pack: ~120 ms
    on a 2-core host, against the 0.3-0.5 s a resubmitted matrix answers in)."""

    results: dict[str, dict[str, Any]]  # the stored result's key -> its document


class Prediction(Flexible):
    """How a predicted row was predicted (`core/lambda_model/prediction.py`)."""

    regime: str
    beyond_measured_range: bool = False
    basis: str = ""
    anchors: list[int] = []  # the measured memory sizes it was predicted from


class BreakEven(Flexible):
    """After how many inferences a tuned engine's tuning is repaid (`core/profiles.py break_even`)."""

    tuning_s: float
    tuning_usd: float | None = None
    against: str  # the fastest untuned combination at the same hardware, batch and memory size
    against_p50_ms: float | None = None
    tuned_p50_ms: float | None = None
    saved_ms_per_inference: float | None = None
    saved_usd_per_inference: float | None = None
    inferences: int | None = None  # None: never (not faster)


class PredictionCheck(Flexible):
    """A predicted pick measured before its run closed: what was predicted, beside the measurement."""

    predicted_p50_ms: float
    predicted_p99_ms: float
    interval: Interval
    within_interval: bool


class SummaryResult(Flexible):
    """A row of `RunSummary.results`: a measured result (a `MeasuredResult` with `reused`,
    priced for the run's region) or a predicted one (`predicted`, `prediction`, `interval`:
    fewer latency and cold start figures). Every field but the combination and its latency
    may be missing from a result written by an older AYCI."""

    combo_key: str | None = None
    combo: Combo
    model: ModelRef | None = None
    run_id: str | None = None
    artifact_key: str | None = None  # a measured row's artifact
    latency_ms: Latency
    cold_start_ms: ColdStartTotal | None = None
    peak_rss_mb: float | None = None
    cgroup_peak_mb: float | None = None
    smallest_fit_mb: int | None = None  # a predicted row's: the smallest size its family fits in
    agreement: Agreement | None = None
    cost: Cost | None = None
    load: MachineLoad | None = None
    environment: Environment | None = None
    emulated: bool = False
    confined: bool = True
    confinement_reason: str | None = None
    host_limited: bool = False
    threads: int | None = None
    vcpus: float | None = None
    vcpus_available: int | None = None
    tuning_s: float = 0.0
    reused: bool = False
    predicted: bool = False
    prediction: Prediction | None = None
    interval: Interval | None = None
    check: PredictionCheck | None = None
    break_even: BreakEven | None = None
    engine_settings: dict[str, Any] | None = None
    engine_tuning: dict[str, Any] | None = None
    divergence: dict[str, Any] | None = None  # where the outputs first diverge from base's (when they disagree)
    conversion: dict[str, Any] | None = None  # what the conversion chose (onnx_int8: its recipes' figures)
    document_version: int | None = None  # a measured row's: the `MeasuredResult` version it was upcast to
    precision: str | None = None  # a racing run's: "quick" for the first pass's rough figures, else "exact"
    dominated_by: str | None = None  # a quick row the race stopped: the combination that dominates it
    evidence: dict[str, Any] | None = None  # and both intervals (`core/racing.Domination.evidence`)
    kept_quick: str | None = None  # a quick row the race kept as it is: why (`core/racing.kept_quick`)

    @property
    def label(self) -> str:
        return self.combo.label

    @property
    def disturbed(self) -> bool:
        return self.load is not None and self.load.disturbed

    @classmethod
    def of(cls, row: SummaryResult | MeasuredResult | dict[str, Any]) -> SummaryResult:
        """`row` as a summary's row: itself, or a stored result (a `MeasuredResult`, or its
        document) validated once."""
        if isinstance(row, cls):
            return row
        if isinstance(row, MeasuredResult):
            row = row.to_dict()
        return cls.model_validate(row)


class TableRow(Flexible):
    """A row of the run report's table (`report/table.py summary_rows`): the CLI, the API's
    JSON and CSV, the email and the web page show these. A failed combination's row sets only
    `combination`, `combo_key`, `status` and `note` (`model_dump(exclude_unset=True)`)."""

    combination: str
    combo_key: str | None = None
    status: Literal["measured", "predicted", "failed", "skipped"]
    predicted: bool = False
    interval: str | None = None
    p50_interval: list[float] | None = None
    p99_interval: list[float] | None = None
    p50_ms: float | None = None
    p90_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    cold_start_ms: float | None = None
    peak_rss_mb: float | None = None
    cost_per_million_usd: float | None = None
    cold_start_usd: float | None = None
    agreement: float | None = None
    agreement_metric: str | None = None
    agreement_basis: str | None = None  # what the agreement rests on: "32 synthetic samples"
    recipe: str | None = None  # onnx_int8: the recipe chosen and every recipe's agreement
    note: str = ""

    def cell(self, key: str) -> Any:
        return getattr(self, key, None)


class FailedCombination(Flexible):
    combo_key: str
    combo: Combo
    label: str
    stage: FailureStage
    reason: str
    smallest_fit_mb: int | None = None  # refused by the prediction: the smallest size that fits


class PickChecks(Document):
    """runs/{id}/checks.json: predicted picks of a `predict` run measured before it closes.
    `predicted` keeps each one's prediction (its row) to set beside the measurement."""

    combos: dict[str, Combo]  # combination key -> combination
    predicted: dict[str, SummaryResult]  # combination key -> its predicted row
    kinds: dict[str, list[str]]  # combination key -> the recommendation kinds that picked it
    decided_by: str  # the event whose handling decided the checks (it alone emits them)


class _ArchivedBy(BaseModel):  # the one field `RunSummary.archived_by_in` reads
    archived_by: str | None = None


def _summary_v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """v1 -> v2: v2 is typed (`SummaryResult`, `Recommendation`), and its recommendation always
    lists the disturbed results: one written before AYCI listed them gets the list from its rows."""
    results = data.get("results") or []
    recommendation = data.get("recommendation")
    if isinstance(recommendation, dict) and "disturbed" not in recommendation:
        recommendation = {
            **recommendation,
            "disturbed": sorted(
                Combo.model_validate(r["combo"]).label for r in results if ((r.get("load") or {}).get("disturbed"))
            ),
        }
    return {**data, "recommendation": recommendation}


class RunSummary(Document):
    VERSION: ClassVar[int] = 2
    UPCASTERS: ClassVar[dict[int, Callable[[dict[str, Any]], dict[str, Any]]]] = {1: _summary_v1_to_v2}

    run_id: str
    status: Literal["complete", "partial", "failed"]
    archived_at: str
    closed_at_deadline: bool
    model: ModelRef
    request: dict[str, Any]
    results: list[SummaryResult]  # measured results, each with `reused`, priced for the run's region, and predicted
    failures: list[FailedCombination]
    recommendation: Recommendation | None = None
    archived_by: str | None = None  # the id of the event whose handling wrote this summary

    @staticmethod
    def archived_by_in(raw: bytes) -> str | None:
        """The `archived_by` of a stored summary, read without building it: pydantic-core skips
        the rest unread into Python (no object for each of 1,536 results)."""
        try:
            return _ArchivedBy.model_validate_json(raw).archived_by
        except ValidationError as exc:
            raise SchemaError(f"RunSummary does not fit the schema: {exc}") from exc
