"""A measurement that judges its own agreement does so with its CPU quota lifted (the outputs do not depend on
the CPU share) and is timed only once the launcher has restored the quota and said so
(`measure.quota_lifted`, `launcher._quota_switch`). Real cgroups, real ONNX Runtime on the tiny ResNet-18;
skipped, with the reason, where cgroups cannot confine here."""

from __future__ import annotations

import pytest

from measuring import launcher
from measuring.confinement import MeasurementGroup, unavailable_reason
from measuring.launcher import MeasurementFailed, MeasureSpec, measure
from schemas.lambda_limits import lambda_vcpus
from tests.conftest import skip_unless_required


@pytest.fixture(scope="module")
def artifact(tiny_onnx) -> dict:
    reason = unavailable_reason()
    if reason is not None:
        skip_unless_required("AYCI_REQUIRE_CGROUPS", f"cgroups cannot confine measurements here: {reason}")
    return {"artifact": tiny_onnx.onnx_path, "reference": tiny_onnx.reference_path}


def _spec(artifact: dict, **kwargs) -> MeasureSpec:
    return MeasureSpec(
        optimizer="onnx",
        workload="image_classification",
        artifact_path=artifact["artifact"],
        reference_path=artifact["reference"],
        memory_mb=512,
        time_cap_s=0.5,
        min_iterations=5,
        tune=False,
        **kwargs,
    )


@pytest.fixture
def quotas(monkeypatch) -> list:
    """Each quota the launcher sets on a measurement's group, in order (None: lifted)."""
    seen = []
    real = MeasurementGroup.set_cpu

    def spy(group, vcpus):
        seen.append(vcpus)
        real(group, vcpus)

    monkeypatch.setattr(MeasurementGroup, "set_cpu", spy)
    return seen


def test_the_agreement_is_judged_unthrottled_and_the_quota_restored_before_the_timing(artifact, quotas):
    report = measure(_spec(artifact))
    assert quotas == [None, lambda_vcpus(512)]
    assert report["confined"] is True and report["agreement"]["score"] == 1.0
    assert report["latency_ms"]["iterations"] >= 5 and report["cold_start_ms"]["total"] > 0


def test_a_known_agreement_is_not_judged_again_and_the_quota_never_moves(artifact, quotas):
    judged = measure(_spec(artifact))
    quotas.clear()
    known = {"threads": 1, "settings": None, "agreement": judged["agreement"], "judged_in": "512 MB"}
    report = measure(_spec(artifact, agreements=[known]))
    assert quotas == [] and report["agreement"]["judged_in"] == "512 MB"


def test_a_quota_the_launcher_does_not_restore_times_nothing(artifact, monkeypatch):
    """The process waits for the launcher's word that its quota is back; without it, it fails instead of
    timing unthrottled."""

    def lift_only(group, vcpus, restored):
        return lambda message: group.set_cpu(None) if message == "quota:lift" else None

    monkeypatch.setattr(launcher, "_quota_switch", lift_only)
    monkeypatch.setattr(launcher, "QUOTA_RESTORE_WAIT_S", 1.0)
    with pytest.raises(MeasurementFailed, match="did not restore the CPU quota"):
        measure(_spec(artifact))
