"""What a run measures: the model, the matrix of choices, one combination, and their keys.

Keys are deterministic hashes, so a result or an artifact is found by a direct GET/HEAD
on its key and never by listing a prefix.
"""

from __future__ import annotations

import hashlib
import json
import re
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from schemas.versions import engine_versions

# Names the engine versions and the measuring method: a result from an older engine or
# method gets another combination key, so it is never reused silently.
# m2: measured confined to the memory size (CPU share and memory cap), one at a time per machine
# m3: p99 from at least 100 samples, host-limited sizes, the environment recorded; m4: ONNX Runtime
# sessions tuned per combination; m5: the default session kept unless beaten twice by 5 %, TVM artifacts of e2;
# m6: onnx_int8's session tuning keeps the graph optimization level its recipe was judged at
MEASUREMENT_VERSION = "m6"
# e2: TVM computes exp/erf/tanh with vectorizable polynomials, never tunes kernels with nothing to
# schedule; e3: TVM converts a detector's convolutions to NHWC too; e4: onnx_int8's mixed recipes (the noisiest
# weight MatMuls kept in float), onnx and onnx_int8 converted from the model's one ONNX export
ENGINE_VERSION = "e4"
# The reference (the base model's outputs on the example inputs) has its own version: an engine's
# change leaves it as it was, and a run stored before that change is still served and exported
# (`serving/models.py`, `report/export/bundle.py` find its reference by this key). Bump it when the
# example inputs or how the base model computes their outputs change. "e3" is the value it shared
# with ENGINE_VERSION until e4, so references stored before stay found.
REFERENCE_VERSION = "e3"

LAMBDA_MIN_MEMORY_MB = 128
LAMBDA_MAX_MEMORY_MB = 10240

# the sizes a range (`128-10240`) stands for: Lambda's common sizes within it, and both ends
MEMORY_LADDER_MB = (128, 256, 512, 768, 1024, 1536, 1769, 2048, 2560, 3008, 3538, 4096, 5120, 6144, 8192, 10240)
PREDICT_MIN_SIZES = 4  # predict measures up to 3 sizes per family: fewer sizes are cheaper to measure

SHA256_PATTERN = re.compile(r"^[0-9a-f]{64}$")


class Hardware(StrEnum):
    intel = "intel"
    arm = "arm"


class Optimizer(StrEnum):
    base = "base"
    onnx = "onnx"
    tvm = "tvm"
    onnx_int8 = "onnx_int8"  # ONNX Runtime on a statically quantized model (int8 weights and activations)


class Workload(StrEnum):
    image_classification = "image_classification"
    nlp = "nlp"
    object_detection = "object_detection"
    custom = "custom"  # the user's own example inputs (.npz); agreement judged per output


class ModelFormat(StrEnum):
    pt2 = "pt2"  # torch.export archive: graph + weights, no pickled code
    onnx = "onnx"


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


MemoryMb = Annotated[int, Field(ge=LAMBDA_MIN_MEMORY_MB, le=LAMBDA_MAX_MEMORY_MB, strict=True)]
BatchSize = Annotated[int, Field(ge=1, le=4096, strict=True)]


class ModelRef(Frozen):
    """A stored model: its content hash names it (`models/{sha256}`)."""

    sha256: str
    size_bytes: int = Field(gt=0)
    format: ModelFormat
    workload: Workload
    # image classification and detection: [height, width]; nlp: [sequence length]
    input_size: list[Annotated[int, Field(ge=1, le=8192)]] = Field(min_length=1, max_length=2)
    # the user's own example inputs (`inputs/{sha256}.npz`, one array per model input, batch first)
    inputs_sha256: str | None = None

    @field_validator("sha256", "inputs_sha256")
    @classmethod
    def _hex_digest(cls, value: str | None) -> str | None:
        if value is not None and not SHA256_PATTERN.match(value):
            raise ValueError("sha256 must be 64 lowercase hex characters")
        return value

    @model_validator(mode="after")
    def _input_size_fits_workload(self) -> ModelRef:
        if self.workload == Workload.custom:
            if self.inputs_sha256 is None:
                raise ValueError("the custom workload runs on your own example inputs: give them (--inputs FILE.npz)")
            return self  # the inputs' shapes are the input size
        wanted = 1 if self.workload == Workload.nlp else 2
        if len(self.input_size) != wanted:
            shape = "[sequence_length]" if wanted == 1 else "[height, width]"
            raise ValueError(f"input_size for {self.workload.value} must be {shape}")
        return self


class Matrix(Frozen):
    """The user's choices; every combination of them is measured."""

    optimizers: dict[Hardware, list[Optimizer]] = Field(min_length=1)
    batch_sizes: list[BatchSize] = Field(min_length=1, max_length=16)
    memory_sizes_mb: list[MemoryMb] = Field(min_length=1, max_length=16)

    @field_validator("optimizers")
    @classmethod
    def _some_optimizer(cls, value: dict[Hardware, list[Optimizer]]) -> dict[Hardware, list[Optimizer]]:
        if not any(value.values()):
            raise ValueError("the matrix names no optimizer for any hardware")
        return {hw: sorted(set(opts), key=list(Optimizer).index) for hw, opts in value.items()}

    @field_validator("batch_sizes", "memory_sizes_mb")
    @classmethod
    def _unique_sorted(cls, value: list[int]) -> list[int]:
        return sorted(set(value))

    def combos(self) -> list[Combo]:
        """Every hardware x optimizer x batch size x memory size, in a stable order."""
        return [
            Combo(hardware=hw, optimizer=opt, batch_size=batch, memory_mb=memory)
            for hw, opts in sorted(self.optimizers.items())
            for opt in opts
            for batch in self.batch_sizes
            for memory in self.memory_sizes_mb
        ]


class Combo(Frozen):
    hardware: Hardware
    optimizer: Optimizer
    batch_size: BatchSize
    memory_mb: MemoryMb

    @property
    def label(self) -> str:
        return f"{self.hardware.value}/{self.optimizer.value}/b{self.batch_size}/{self.memory_mb}MB"


DEFAULT_MIN_AGREEMENT = 0.99  # a request's minimum agreement unless it names one (RequestSubmitted.min_agreement)


class Tuning(Frozen):
    """The TVM tuning budget a tvm artifact is built with (`RequestSubmitted.tuning`): MetaSchedule
    trials and the time limit of the search. Part of a tvm artifact's and result's keys, so an
    untuned (or less tuned) artifact or result never stands in for a more tuned one."""

    trials: int = Field(ge=0)
    time_limit_s: float | None = None
    # the run's minimum agreement: onnx_int8's recipe is chosen against it (part of onnx_int8's keys)
    min_agreement: float = DEFAULT_MIN_AGREEMENT

    def key_fields(self) -> dict:
        # with no trials there is no search: its time limit changes nothing
        return {"tuning_trials": self.trials, "tuning_time_limit_s": self.time_limit_s if self.trials else None}


class TuningMissing(ValueError):
    """A tvm key asked for without the tuning budget it is built with."""


def _tuning(combo: Combo, tuning: Tuning | None) -> dict:
    """The tuning budget's fields of a key: tvm's; onnx_int8's minimum agreement when it is not the
    default (another minimum may choose another recipe); keys of other optimizers stay as they were."""
    if combo.optimizer == Optimizer.onnx_int8 and tuning is not None and tuning.min_agreement != DEFAULT_MIN_AGREEMENT:
        return {"min_agreement": tuning.min_agreement}
    if combo.optimizer != Optimizer.tvm:
        return {}
    if tuning is None:
        raise TuningMissing(f"{combo.label}: a tvm key names the tuning budget (tuning=request.tuning)")
    return tuning.key_fields()


def _digest(fields: dict) -> str:
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def combo_key(model: ModelRef, combo: Combo, tuning: Tuning | None = None) -> str:
    """The key of one measured result: `results/{combo_key}.json`. The engine's library
    versions are part of it: after an upgrade nothing measured before is reused; so is a tvm
    combination's tuning budget (`tuning`, required for tvm: `TuningMissing` without it)."""
    return _digest(
        {
            "model": model.sha256,
            "workload": model.workload.value,
            "input_size": model.input_size,
            "hardware": combo.hardware.value,
            "optimizer": combo.optimizer.value,
            "batch": combo.batch_size,
            "memory_mb": combo.memory_mb,
            "measurement": MEASUREMENT_VERSION,
            "libraries": engine_versions(combo.optimizer.value, model.format.value),
            **_inputs(model),
            **_tuning(combo, tuning),
        }
    )


def artifact_key(model: ModelRef, combo: Combo, target_cpu: str, tuning: Tuning | None = None) -> str:
    """The key of a converted artifact. Memory size never changes an artifact, and a
    `base` artifact serves every batch size; a tvm artifact's tuning budget does (`tuning`,
    required for tvm)."""
    return _digest(
        {
            "model": model.sha256,
            "input_size": model.input_size,
            "hardware": combo.hardware.value,
            "optimizer": combo.optimizer.value,
            "batch": None if combo.optimizer == Optimizer.base else combo.batch_size,
            "engine": ENGINE_VERSION,
            "target_cpu": target_cpu,
            "libraries": engine_versions(combo.optimizer.value, model.format.value),
            **_inputs(model),
            **_tuning(combo, tuning),
        }
    )


def reference_key(model: ModelRef, batch_size: int) -> str:
    """The key of the base model's outputs on the fixed example inputs of one batch size."""
    return _digest(
        {
            "model": model.sha256,
            "input_size": model.input_size,
            "batch": batch_size,
            "engine": REFERENCE_VERSION,
            "libraries": engine_versions("base", model.format.value),
            **_inputs(model),
        }
    )


def _inputs(model: ModelRef) -> dict:
    """The user's own inputs change every key; keys without them stay as they were."""
    return {"inputs": model.inputs_sha256} if model.inputs_sha256 else {}


def parse_memory_sizes(text: str) -> list[int]:
    """Memory sizes from `1024,1769` or ranges like `128-10240` (Lambda's common sizes within
    the range, and both ends), or both mixed. `ValueError` names what is wrong."""
    sizes: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        low, dash, high = part.partition("-")
        try:
            bounds = (int(low), int(high)) if dash else (int(part), int(part))
        except ValueError:
            raise ValueError(f"memory sizes are MB numbers or ranges like 128-10240, got {part!r}") from None
        for bound in bounds if dash else ():  # a single size is checked by the matrix (memory_sizes_mb)
            if not LAMBDA_MIN_MEMORY_MB <= bound <= LAMBDA_MAX_MEMORY_MB:
                raise ValueError(
                    f"memory size {bound} MB is outside Lambda's {LAMBDA_MIN_MEMORY_MB}-{LAMBDA_MAX_MEMORY_MB} MB"
                )
        if bounds[0] > bounds[1]:
            raise ValueError(f"the range {part} runs backwards: write {bounds[1]}-{bounds[0]}")
        sizes.update({bounds[0], bounds[1], *(m for m in MEMORY_LADDER_MB if bounds[0] <= m <= bounds[1])})
    if not sizes:
        raise ValueError("no memory size given")
    return sorted(sizes)
