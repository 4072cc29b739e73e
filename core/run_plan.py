"""What a run measures: the combinations it measures and those it predicts (`predict`), each
family's anchor sizes, and the runtime floor below which a combination cannot run.

Dedup, the deadline, the plan, the archiver and the CLI read the measured set from here; the
Lambda model (`core/lambda_model/prediction.py`) predicts the others from the anchors' results.
"""

from __future__ import annotations

from schemas.combos import PREDICT_MIN_SIZES, Combo, ModelFormat, Optimizer
from schemas.events import RequestSubmitted
from schemas.lambda_limits import MB_PER_VCPU, lambda_threads

# a lower bound of the resident memory of a process that imported the engine (RSS after the
# import, measured here: torch 219 MB, onnxruntime 45 MB; TVM's runtime library alone ~95 MB):
# "certain out of memory" must be certain, so the floors are below what was measured
RUNTIME_FLOOR_MB = {"torch": 200, "onnxruntime": 40, "tvm": 80}
ONE_VCPU_MB = MB_PER_VCPU
TWO_VCPU_MB = 2 * MB_PER_VCPU
MAX_ANCHORS = PREDICT_MIN_SIZES - 1  # measured sizes per family; fewer requested sizes are all measured
MAX_CHECKS = 3  # a predicted pick is measured before the run closes: at most one per recommendation kind
FIT_MARGIN = 1.10  # a size fits if it holds the (measured or estimated) peak plus 10 %


def runtime_floor_mb(optimizer: Optimizer, model_format: ModelFormat) -> int:
    if optimizer == Optimizer.base:
        return RUNTIME_FLOOR_MB["torch" if model_format == ModelFormat.pt2 else "onnxruntime"]
    return RUNTIME_FLOOR_MB["onnxruntime" if optimizer in (Optimizer.onnx, Optimizer.onnx_int8) else "tvm"]


def estimated_peak_mb(request: RequestSubmitted, combo: Combo) -> float:
    """A rough guess of a process's peak before anything is measured: the runtime, the weights
    and half again (the zoo's peaks were 1.2-1.8x the weights above the runtime), activations."""
    weights_mb = request.model.size_bytes / (1 << 20)
    return runtime_floor_mb(combo.optimizer, request.model.format) + 1.5 * weights_mb + 32


def anchor_sizes(request: RequestSubmitted, combo: Combo) -> list[int]:
    """The sizes measured for `combo`'s family: the smallest requested size below 1 vCPU that
    is expected to fit (if any size is below 1 vCPU), 1 vCPU, and 2 vCPUs (if any size needs
    2 threads or more)."""
    sizes = request.matrix.memory_sizes_mb
    anchors = [ONE_VCPU_MB]
    below = [m for m in sizes if m < ONE_VCPU_MB]
    if below:
        fitting = [m for m in below if m >= estimated_peak_mb(request, combo) * FIT_MARGIN]
        anchors.insert(0, min(fitting) if fitting else max(below))
    if any(lambda_threads(m) >= 2 for m in sizes):
        anchors.append(TWO_VCPU_MB)
    return anchors


def measured_and_predicted(request: RequestSubmitted) -> tuple[list[Combo], list[Combo]]:
    """The combinations a run measures, and those it predicts (`predict`; none otherwise).
    With `predict` the measured ones are each family's anchors, requested or not."""
    combos = request.matrix.combos()
    if not request.predict:
        return combos, []
    measured: dict[Combo, None] = {}
    predicted: list[Combo] = []
    for combo in combos:
        anchors = anchor_sizes(request, combo)
        for memory in anchors:
            measured[combo.model_copy(update={"memory_mb": memory})] = None
        if combo.memory_mb not in anchors:
            predicted.append(combo)
    return list(measured), predicted


def measured_combos(request: RequestSubmitted) -> list[Combo]:
    return measured_and_predicted(request)[0]
