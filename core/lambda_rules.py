"""Whether a combination can be deployed on Lambda as measured: Lambda's rules checked.

`lambda_fit` checks one combination against the limits of `data/lambda_limits.json`:
- payload: a batch's request (its inputs) and response (its outputs), as JSON (numbers as text)
  and as binary (`.npy` in base64, how a binary body reaches a function through API Gateway or a
  function URL), against the 6 MB of a synchronous invocation; the rule is broken when neither
  form fits (JSON alone over it: a note, send binary);
- init: the cold start before the first inference (process start, imports, model load) against
  the 10 s init phase;
- deployment form: a zip when the engine's runtime (its installed size, from the data file) plus
  the artifact fit 250 MB unzipped, else a container image up to 10 GB, else none;
- SnapStart: eligible on a Python 3.12+ runtime unless the form is an image or the function
  needs more than 512 MB of ephemeral storage (the reason said when not);
- ephemeral storage: the artifact ships in the package, so /tmp needs only the default.

The plan checks before measuring (`core.planning`: payload from the signature, form from the
model's size), the table and the recommendation after (`fit_of_row`: the cold start measured).
A row knows its inputs (the workload's shapes) but not its outputs' shapes: the response is
checked where the signature is at hand (the plan).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from schemas.combos import Combo, ModelRef, Optimizer, Workload
from schemas.lambda_limits import LambdaLimits, load_limits
from schemas.signature import ModelSignature

Shapes = Mapping[str, tuple[tuple[int, ...], str]]

# a number as JSON text, with its separator: float32 values printed by Python's repr take 18-20
# digits (measured: 20.6 bytes an element for normalised pixels and for logits); integers such
# as token ids at most 5 digits
JSON_BYTES_PER_FLOAT = 21
JSON_BYTES_PER_INT = 7
JSON_BYTES_PER_BOOL = 6
NPY_HEADER_BYTES = 128  # an .npy file's header
EVENT_OVERHEAD_BYTES = 1024  # the event's other fields (headers, names)

MB = 2**20


@dataclass
class Payload:
    json_bytes: int
    binary_bytes: int  # .npy in base64

    def fits(self, limit: int) -> bool:
        return self.binary_bytes <= limit


@dataclass
class LambdaFit:
    request: Payload | None  # None: the inputs' shapes are not known here
    response: Payload | None  # None: the outputs' shapes are not known here
    deployment: str  # "zip" | "image" | "none"
    package_mb: float  # the runtime's installed size plus the artifact's (estimated: the model's size)
    runtime_mb: float
    init_s: float | None  # the measured cold start before the first inference
    snapstart: bool
    snapstart_reason: str
    ephemeral_storage_mb: int
    broken: list[str] = field(default_factory=list)  # the rules it breaks: never recommended
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """The deployment in a few words: "zip 140 MB, SnapStart on python3.12+"."""
        form = f"{self.deployment} {self.package_mb:,.0f} MB" if self.deployment != "none" else "no deployment"
        snapstart = "SnapStart on python3.12+" if self.snapstart else f"no SnapStart ({self.snapstart_reason})"
        return f"{form}, {snapstart}"


def engine_runtime(optimizer: Optimizer | str, model_format: str) -> str:
    """The runtime a deployed artifact of `optimizer` needs (a key of the data file's `runtimes`)."""
    optimizer = Optimizer(optimizer)
    if optimizer == Optimizer.tvm:
        return "tvm"
    if optimizer == Optimizer.base and str(getattr(model_format, "value", model_format)) == "pt2":
        return "torch"
    return "onnxruntime"


def payload(shapes: Shapes) -> Payload:
    """A batch of these arrays as JSON and as base64 `.npy`."""
    json_bytes = binary = EVENT_OVERHEAD_BYTES
    for shape, dtype in shapes.values():
        count = math.prod(shape)
        kind = np.dtype(dtype).kind
        per = JSON_BYTES_PER_FLOAT if kind in "fc" else JSON_BYTES_PER_BOOL if kind == "b" else JSON_BYTES_PER_INT
        json_bytes += count * per
        binary += 4 * math.ceil((count * np.dtype(dtype).itemsize + NPY_HEADER_BYTES) / 3)
    return Payload(json_bytes=json_bytes, binary_bytes=binary)


def output_shapes(signature: ModelSignature | None, batch: int, inputs: Shapes) -> Shapes | None:
    """The outputs' shapes at `batch`, as far as the signature says (None if a dim is unknown):
    a symbolic dim is the batch in first place, or the size an input's dim of the same name has."""
    if signature is None or not signature.outputs:
        return None
    known: dict[str, int] = {}
    for spec in signature.inputs:
        if spec.dims is None or spec.name not in inputs:
            continue
        for dim, size in zip(spec.dims, inputs[spec.name][0], strict=False):
            if isinstance(dim, str):
                known[dim] = size
    shapes = {}
    for spec in signature.outputs:
        if spec.dims is None:
            return None
        dims = []
        for axis, dim in enumerate(spec.dims):
            if isinstance(dim, int):
                dims.append(dim)
            elif dim in known:
                dims.append(known[dim])
            elif axis == 0:
                dims.append(batch)
            else:
                return None
        shapes[spec.name] = (tuple(dims), spec.dtype)
    return shapes


def workload_input_shapes(model: ModelRef, batch: int) -> Shapes | None:
    """The inputs a run feeds at `batch` (None for the user's own inputs: their file is not here)."""
    if model.workload == Workload.custom:
        return None
    from workloads import workload_module

    return workload_module(model.workload).input_shapes(batch, list(model.input_size))


def lambda_fit(
    model: ModelRef,
    combo: Combo,
    *,
    inputs: Shapes | None,
    outputs: Shapes | None = None,
    init_s: float | None = None,
    artifact_bytes: int | None = None,
    limits: LambdaLimits | None = None,
) -> LambdaFit:
    """`combo` of `model` against Lambda's rules (see the module's docstring)."""
    limits = limits or load_limits()
    broken, notes = [], []
    request = payload(inputs) if inputs is not None else None
    response = payload(outputs) if outputs is not None else None
    for what, size, limit in (
        ("request", request, limits.sync_payload.request_bytes),
        ("response", response, limits.sync_payload.response_bytes),
    ):
        if size is None:
            continue
        if not size.fits(limit):
            broken.append(
                f"{what} over Lambda's {limit / MB:.0f} MB payload: batch {combo.batch_size} is "
                f"{size.binary_bytes / MB:.1f} MB as base64 .npy, {size.json_bytes / MB:.1f} MB as JSON"
            )
        elif size.json_bytes > limit:
            notes.append(f"{what} over {limit / MB:.0f} MB as JSON ({size.json_bytes / MB:.1f} MB): send .npy")
    init_limit = limits.init_phase_s.value
    if init_s is not None and init_s > init_limit:
        broken.append(
            f"init {init_s:.1f} s over Lambda's {init_limit:g} s init phase (imports + model load; "
            "Lambda retries it at the first request)"
        )
    runtime = engine_runtime(combo.optimizer, model.format.value)
    runtime_mb = limits.runtime_mb(runtime)
    package_mb = runtime_mb + (artifact_bytes if artifact_bytes is not None else model.size_bytes) / MB
    if package_mb * MB <= limits.deployment.zip_unzipped_bytes:
        deployment = "zip"
    elif package_mb * MB <= limits.deployment.container_image_bytes:
        deployment = "image"
    else:
        deployment = "none"
        broken.append(
            f"{package_mb:,.0f} MB ({runtime} {runtime_mb:.0f} MB + the artifact) is over Lambda's "
            f"{limits.deployment.container_image_bytes / 2**30:.0f} GB container image"
        )
    ephemeral = limits.ephemeral_storage_mb.default  # the artifact ships in the package: nothing written to /tmp
    rules = limits.snapstart
    if deployment != "zip":
        snapstart, reason = (
            False,
            f"{'a container image' if deployment == 'image' else 'over 10 GB'}: SnapStart takes zip packages only",
        )
    elif ephemeral > rules.max_ephemeral_storage_mb:
        snapstart, reason = (
            False,
            f"needs {ephemeral} MB of ephemeral storage, SnapStart at most {rules.max_ephemeral_storage_mb}",
        )
    else:
        snapstart, reason = (
            True,
            f"zip, {ephemeral} MB ephemeral storage: on python{rules.python_min}+, "
            "without provisioned concurrency or EFS",
        )
    return LambdaFit(
        request=request,
        response=response,
        deployment=deployment,
        package_mb=round(package_mb, 1),
        runtime_mb=runtime_mb,
        init_s=None if init_s is None else round(init_s, 2),
        snapstart=snapstart,
        snapstart_reason=reason,
        ephemeral_storage_mb=ephemeral,
        broken=broken,
        notes=notes,
    )


def init_seconds(cold_start: Any) -> float | None:
    """The init phase of a measured cold start: everything before the first inference."""
    if cold_start is None:
        return None
    total = getattr(cold_start, "total", None)
    first = getattr(cold_start, "first_inference", None)
    if total is None:
        return None
    return (total - (first or 0.0)) / 1000


def fit_of_row(row: Any) -> LambdaFit | None:
    """A summary row's fit (a `SummaryResult`): its inputs from its workload, its cold start as
    measured (or predicted); None for a row without its model."""
    model = getattr(row, "model", None)
    if model is None:
        return None
    return lambda_fit(
        model,
        row.combo,
        inputs=workload_input_shapes(model, row.combo.batch_size),
        init_s=init_seconds(row.cold_start_ms),
    )


def broken_rules(row: Any) -> list[str]:
    """The Lambda rules a summary row breaks (empty: none, or its model is not known)."""
    fit = fit_of_row(row)
    return fit.broken if fit else []
