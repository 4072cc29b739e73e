"""The gate's paired measurement (`measuring/paired_measure.measure_pair`) runs through the launcher's one frame
for a confined measuring child (`launcher.run_confined_child`): the machine's lock, a cgroup of the size's CPU
share where this machine has one, the child's result and the load around it; a failure is a
`MeasurementFailed` with the child's reason. Real ONNX Runtime on the tiny ResNet-18."""

from __future__ import annotations

import pytest

from measuring.confinement import unavailable_reason
from measuring.launcher import MeasurementFailed
from measuring.paired_measure import PairSide, measure_pair


@pytest.fixture(scope="module")
def side(tiny_onnx) -> PairSide:
    return PairSide(optimizer="onnx", artifact_path=tiny_onnx.onnx_path, reference_path=tiny_onnx.reference_path)


def test_a_pair_is_timed_in_rounds_in_one_confined_child(side):
    found = measure_pair(side, side, memory_mb=1769, rounds=2, side_time_s=0.2, timeout_s=600)
    assert len(found["rounds"]) == 2 and [r["order"] for r in found["rounds"]] == ["AB", "BA"]
    for figures in found["rounds"]:
        assert figures["a"]["samples"] > 0 and figures["b"]["p50_ms"] > 0
    assert found["confined"] is (unavailable_reason() is None)
    assert (found["confinement_reason"] is None) is found["confined"]
    assert found["threads"] == 1 and found["lock_wait_s"] >= 0
    assert found["load"]["host_cores"] >= 1 and isinstance(found["load"]["disturbed"], bool)


def test_a_pair_whose_artifact_does_not_load_fails_with_the_child_s_reason(side, tmp_path):
    broken = tmp_path / "model.onnx"
    broken.write_bytes(b"not an onnx model")
    bad = PairSide(optimizer="onnx", artifact_path=broken, reference_path=side.reference_path)
    with pytest.raises(MeasurementFailed, match="paired measuring process"):
        measure_pair(side, bad, memory_mb=1769, rounds=1, side_time_s=0.1, timeout_s=600)
