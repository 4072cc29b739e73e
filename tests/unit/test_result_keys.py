"""Keys say how a result was made: a tvm artifact's and result's keys name the tuning budget, so an
untuned artifact or result never stands in for a tuned one; a disturbed or unconfined stored result
is never reused. Whole runs on the embedded bus with fake engines (`tests/unit/test_pipeline.py`)."""

from __future__ import annotations

import pytest

from schemas.combos import Combo, ModelRef, Tuning, TuningMissing, artifact_key, combo_key
from tests.unit.test_pipeline import Fakes, app, request, run  # noqa: F401

MODEL = ModelRef(sha256="a" * 64, size_bytes=10, format="onnx", workload="image_classification", input_size=[2, 2])
TVM = Combo(hardware="intel", optimizer="tvm", batch_size=1, memory_mb=1769)
ONNX = Combo(hardware="intel", optimizer="onnx", batch_size=1, memory_mb=1769)


class Disturbing(Fakes):
    """Measurements that report other work on the machine, or no confinement, when told to."""

    def __init__(self) -> None:
        super().__init__()
        self.disturbed = self.unconfined = False

    def measure(self, spec, python_command) -> dict:
        report = super().measure(spec, python_command)
        if self.disturbed:
            report["load"] = {"host_cores": 2, "other_busy_cores": 1.5, "disturbed": True}
        if self.unconfined:
            report.update(confined=False, confinement_reason="no cgroup v2 here")
        return report


@pytest.fixture
def fakes() -> Disturbing:
    return Disturbing()


def test_the_tuning_budget_is_in_tvm_keys_only():
    untuned, tuned = Tuning(trials=0, time_limit_s=900), Tuning(trials=600, time_limit_s=900)
    assert combo_key(MODEL, TVM, untuned) != combo_key(MODEL, TVM, tuned)
    assert artifact_key(MODEL, TVM, "cpu", untuned) != artifact_key(MODEL, TVM, "cpu", tuned)
    assert artifact_key(MODEL, TVM, "cpu", tuned) != artifact_key(
        MODEL, TVM, "cpu", Tuning(trials=600, time_limit_s=60)
    )
    # no search, no time limit: an untuned artifact is the same whatever the limit
    assert artifact_key(MODEL, TVM, "cpu", untuned) == artifact_key(MODEL, TVM, "cpu", Tuning(trials=0))
    with pytest.raises(TuningMissing):
        combo_key(MODEL, TVM)
    # other optimizers' keys are as they were: their stored results are still reused
    assert combo_key(MODEL, ONNX) == combo_key(MODEL, ONNX, tuned)
    assert artifact_key(MODEL, ONNX, "cpu") == artifact_key(MODEL, ONNX, "cpu", tuned)


def test_an_untuned_run_never_serves_a_tuned_one(app, fakes):  # noqa: F811
    untuned = run(app, request(app, optimizers=("tvm",), memory=(1769,), tuning_trials=0))
    tuned = run(app, request(app, optimizers=("tvm",), memory=(1769,), tuning_trials=600))
    assert untuned["status"] == tuned["status"] == "complete"
    assert not any(r["reused"] for r in tuned["results"])
    assert fakes.conversions == {"tvm/b1": 2} and sum(fakes.measurements.values()) == 2
    (before,), (after,) = untuned["results"], tuned["results"]
    assert before["combo_key"] != after["combo_key"] and before["artifact_key"] != after["artifact_key"]
    again = run(app, request(app, optimizers=("tvm",), memory=(1769,), tuning_trials=600))
    assert all(r["reused"] for r in again["results"]) and sum(fakes.measurements.values()) == 2


@pytest.mark.parametrize("how", ["disturbed", "unconfined"])
def test_a_disturbed_or_unconfined_result_is_measured_again(app, fakes, how):  # noqa: F811
    setattr(fakes, how, True)
    run(app, request(app))
    first = sum(fakes.measurements.values())  # a disturbed measurement is tried again within its run
    setattr(fakes, how, False)
    second = run(app, request(app))
    assert not any(r["reused"] for r in second["results"]) and sum(fakes.measurements.values()) == first + 2
    third = run(app, request(app))  # the clean measurement is reused
    assert all(r["reused"] for r in third["results"]) and sum(fakes.measurements.values()) == first + 2
