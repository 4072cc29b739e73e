"""Engines: one module per optimizer (`base`, `onnx`, `tvm`) behind one small interface.

Conversion side: `convert(job) -> Conversion` writes one artifact file into `job.out_dir`.
Runtime side: `import_runtime(path)` imports what running the artifact needs (and nothing
else: a measuring process times it as the cold start's imports), then `load(path, threads) ->
Runner`; a runner maps named numpy inputs to a list of numpy outputs. Importing this package
imports no engine and no pydantic; each engine is imported on use, so a measuring process
loads only the engine it measures.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:  # the contract's types, for annotations only: a measuring process never imports pydantic
    from schemas.combos import Hardware, ModelRef


class ConversionError(Exception):
    """The model cannot be converted for this combination; the message says why."""


class Runner(Protocol):
    def __call__(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]: ...


@dataclass
class ConversionJob:
    model: ModelRef
    model_path: Path  # the stored model file (.pt2 or .onnx)
    hardware: Hardware
    batch_size: int
    target_cpu: str
    out_dir: Path
    tuning_trials: int = 0
    tuning_time_limit_s: float | None = (
        None  # the search stops at its trials or this, whichever comes first (None: trials only)
    )
    tuning_dir: Path | None = None  # where stored tuning records are read and written
    shared_tuning_dirs: list[Path] = field(default_factory=list)  # other models' records for the same CPU (read only)
    inputs_path: Path | None = None  # the user's own example inputs (.npz), if the model has them
    min_agreement: float = 0.99  # the run's minimum agreement (onnx_int8 chooses its recipe against it)
    # onnx_int8: the recipe chosen for this model at another batch size (`int8_recipe_batch`), tried alone first
    int8_recipe: str | None = None
    int8_recipe_batch: int | None = None
    progress: Callable[[str], None] = lambda message: None


@dataclass
class Conversion:
    artifact_file: str  # a file name inside the job's out_dir
    conversion_s: float
    tuning_s: float = 0.0
    details: dict = field(default_factory=dict)


class Engine(Protocol):
    """What every engine module (`engines.module(name)`) provides."""

    def convert(self, job: ConversionJob) -> Conversion:
        """Write one artifact for `job` into `job.out_dir` (raises ConversionError with the reason)."""

    def import_runtime(self, path: Path) -> None:
        """Import what running the artifact needs, and nothing else (timed as the cold start's imports)."""

    def load(self, path: Path, threads: int) -> Runner:
        """Load the artifact once; the runner maps named inputs to the outputs."""

    def profile(
        self,
        path: Path,
        threads: int,
        inputs: dict[str, np.ndarray],
        runs: int,
        work: Path,
        settings: dict | None = None,
    ):
        """A profiled pass over the artifact: where the time goes, by operator."""


# optimizer name -> the module implementing it (names as in schemas.combos.Optimizer; kept here as
# plain strings so that a measuring process imports no pydantic)
_MODULES = {
    "base": "engines.base_engine",
    "onnx": "engines.onnx_engine",
    "onnx_int8": "engines.onnx_int8_engine",
    "tvm": "engines.tvm",
}


def module(optimizer: str) -> Engine:
    """The engine implementing `optimizer` (an Optimizer or its name), imported on first use."""
    name = getattr(optimizer, "value", optimizer)
    if name not in _MODULES:
        raise ValueError(f"unknown optimizer {name!r}: one of {', '.join(_MODULES)}")
    return importlib.import_module(_MODULES[name])  # type: ignore[return-value]


def timed_ms(run: Runner, inputs: dict[str, np.ndarray]) -> float:
    """One inference's wall time in ms."""
    import time

    started = time.perf_counter()
    run(inputs)
    return (time.perf_counter() - started) * 1000
