"""When a run is closed if some of its combinations never report.

A request may name its deadline (`deadline_s`): it is kept as given, so a user who wants a run
cut short gets exactly that. Without one, a run has an hour or twice its estimated length if that
is longer: the deadline must never cut a large run that is merely long.
"""

from __future__ import annotations

from core.run_plan import MAX_CHECKS, measured_and_predicted
from schemas.combos import Optimizer
from schemas.events import TUNING_TIME_LIMIT_S, RequestSubmitted

DEFAULT_DEADLINE_S = 3600.0
# rough costs on one machine (measurements run one at a time)
MEASUREMENT_ESTIMATE_S = 60.0  # cold start, warm-up, samples up to the time cap, per combination
CONVERSION_ESTIMATE_S = {Optimizer.base: 10.0, Optimizer.onnx: 30.0, Optimizer.tvm: 120.0, Optimizer.onnx_int8: 45.0}
TUNING_TRIAL_ESTIMATE_S = 2.0


def conversion_estimate_s(optimizer: Optimizer, tuning_trials: int) -> float:
    """One artifact's conversion; TVM's includes its tuning, which its time limit ends."""
    tuning = min(tuning_trials * TUNING_TRIAL_ESTIMATE_S, TUNING_TIME_LIMIT_S) if optimizer == Optimizer.tvm else 0.0
    return CONVERSION_ESTIMATE_S[optimizer] + tuning


def estimated_run_s(request: RequestSubmitted) -> float:
    """Every measured combination measured, every artifact converted, TVM tuned, one after
    another (with `predict`, up to one check of a predicted pick per recommendation kind)."""
    measured, predicted = measured_and_predicted(request)
    combos = measured + predicted[:MAX_CHECKS]
    artifacts = {(c.hardware, c.optimizer, None if c.optimizer == Optimizer.base else c.batch_size) for c in combos}
    converting = sum(conversion_estimate_s(o, request.tuning_trials) for _, o, _ in artifacts)
    return converting + MEASUREMENT_ESTIMATE_S * len(combos)


def run_deadline_s(request: RequestSubmitted) -> float:
    if request.deadline_s is not None:
        return request.deadline_s
    return max(DEFAULT_DEADLINE_S, 2 * estimated_run_s(request))
