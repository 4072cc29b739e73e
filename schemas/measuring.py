"""What the inference service asks of a measuring Lambda function, and what it answers.

On AWS (when `AYCI_MEASURE_FUNCTION_INTEL` / `_ARM` name the functions) the inference service
does not measure in its own process: it invokes the measuring function of the combination's
architecture, configured with the combination's memory size (`adapters/lambda_sizes.py`), with a
`MeasureRequest` as the event. The function downloads the artifact and the reference into its
ephemeral storage (`/tmp`), measures with the same code as everywhere else
(`measuring/launcher.py` -> `measure.py`) and answers a `MeasureAnswer`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class MeasureRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    run_id: str
    combo_key: str
    combo_label: str  # for the function's logs: "intel/onnx/b1/1769MB"
    optimizer: str
    workload: str
    artifact_object: str  # the artifact file's key in the bucket
    artifact_file: str  # its file name (the engine reads it by its suffix)
    reference_object: str  # the base model's reference outputs (and the inputs) in the bucket
    memory_mb: int = Field(ge=128, le=10240)
    time_cap_s: float = Field(gt=0)
    min_iterations: int = Field(ge=1)
    # a profiled pass instead of a measurement: the measured result (`MeasuredResult`) to profile;
    # the function stores the profile and its trace next to the result and answers the profile's key
    profile_of: dict[str, Any] | None = None


class MeasureAnswer(BaseModel):
    """`report` (a `MeasurementReport` plus how it ran) or `failed` (the reason)."""

    model_config = ConfigDict(extra="forbid")

    report: dict[str, Any] | None = None
    failed: str | None = None
