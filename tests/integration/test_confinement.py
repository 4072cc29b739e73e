"""Measurements confined by the kernel's cgroups to a Lambda memory size (real cgroups).

Skipped, with the reason, where cgroups cannot confine a process here (no cpu or memory
controller, not root); `AYCI_REQUIRE_CGROUPS=1` turns that skip into a failure.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ayci.bootstrap import embedded
from ayci.cli import main as cli_main
from ayci.cli import warn_if_unconfined
from ayci.settings import Settings
from measuring import launcher
from measuring.confinement import Limits, MeasurementGroup, unavailable_reason
from measuring.launcher import ONE_THREAD_FOR_ITS_SIZE, MeasurementFailed, MeasureSpec, measure
from schemas import keys
from schemas.combos import Matrix
from schemas.events import RequestSubmitted
from services.inference.handlers import estimated
from services.request.submission import new_run, store_model
from tests.conftest import TINY_IMAGE_SIZE, skip_unless_required
from workloads import workload_module

BIG_BATCH = 4096  # 4,096 images of 32x32: ResNet-18's activations alone pass 512 MB


@pytest.fixture(scope="module")
def cgroups() -> None:
    reason = unavailable_reason()
    if reason is None:
        return
    skip_unless_required("AYCI_REQUIRE_CGROUPS", f"cgroups cannot confine measurements here: {reason}")


@pytest.fixture(scope="module")
def onnx_model(tiny_onnx, tmp_path_factory) -> dict:
    """The tiny model as an ONNX artifact (its batch axis is dynamic), the base model's
    reference outputs for batch 1, and the inputs of a big batch (with placeholder outputs:
    it never gets as far as comparing them)."""
    work = tmp_path_factory.mktemp("confined")
    references = {1: tiny_onnx.reference_path, BIG_BATCH: work / f"reference-b{BIG_BATCH}.npz"}
    pixels = workload_module("image_classification").example_inputs(BIG_BATCH, TINY_IMAGE_SIZE)["pixels"]
    np.savez(references[BIG_BATCH], **{"input:pixels": pixels, "output:0": np.zeros((BIG_BATCH, 1000), np.float32)})
    return {"artifact": tiny_onnx.onnx_path, "references": references}


def spec(onnx_model, memory_mb: int, batch: int = 1) -> MeasureSpec:
    return MeasureSpec(
        optimizer="onnx",
        workload="image_classification",
        artifact_path=onnx_model["artifact"],
        reference_path=onnx_model["references"][batch],
        memory_mb=memory_mb,
        time_cap_s=0.5,
        min_iterations=5,
    )


def test_confined_measurement_reports_how_it_ran(cgroups, onnx_model):
    report = measure(spec(onnx_model, 1769))
    assert report["confined"] is True and report["confinement_reason"] is None
    assert report["vcpus"] == 1.0 and report["threads"] == 1
    assert 0 < report["cgroup_peak_mb"] <= 1769
    assert report["agreement"]["score"] == 1.0
    load = report["load"]
    assert load["host_cores"] >= 1 and load["other_busy_cores"] is not None and isinstance(load["disturbed"], bool)
    # the host's speed probed before and after (measuring/host_speed.py): against its fastest probe, never faster
    assert load["host_slowdown"] is None or load["host_slowdown"] >= 1.0
    assert load["other_work_limit_cores"] == pytest.approx(load["host_cores"] - 1 + 0.25)  # 1 vCPU needed
    cold = report["cold_start_ms"]
    assert cold["process_start"] > 0 and cold["imports"] > 0 and cold["model_load"] > 0 and cold["first_inference"] > 0
    assert cold["model_load_compiles"] is True  # ONNX Runtime optimises the graph for this CPU on load
    latency = report["latency_ms"]
    assert latency["iterations"] >= 5 and latency["cv"] >= 0 and latency["billed_ms_mean"] >= 1


def test_out_of_memory_at_128_mb_is_a_failure_with_its_peak(cgroups, onnx_model):
    with pytest.raises(MeasurementFailed) as failed:
        measure(spec(onnx_model, 128))
    assert failed.value.reason.startswith("out of memory at 128 MB (peak ")
    assert 100 <= failed.value.peak_rss_mb <= 129


def test_a_batch_that_does_not_fit_is_killed_where_batch_1_fits(cgroups, onnx_model):
    fits = measure(spec(onnx_model, 512, batch=1))
    assert fits["confined"] and fits["peak_rss_mb"] <= 512
    with pytest.raises(MeasurementFailed, match="out of memory at 512 MB"):
        measure(spec(onnx_model, 512, batch=BIG_BATCH))


def test_cpu_quota_gives_half_a_core_at_885_mb(cgroups):
    group = MeasurementGroup.create(Limits.for_memory(885))
    busy = "import time\nend = time.time() + 1.5\nwhile time.time() < end: pass\nprint(time.process_time())"
    try:
        started = time.time()
        done = subprocess.run(group.wrap([sys.executable, "-c", busy]), capture_output=True, text=True, check=True)
        share = float(done.stdout) / (time.time() - started)
        outcome = group.outcome()
    finally:
        group.remove()
    # the quota is a ceiling (other work on the machine can only lower the share)
    assert 0.05 < share <= 0.6, share
    assert outcome.throttled_periods and outcome.throttled_periods > 0
    assert not outcome.oom_killed


def test_unconfined_measurement_says_why(onnx_model, monkeypatch):
    monkeypatch.setattr(launcher, "unavailable_reason", lambda: "no memory controller (test)")
    report = measure(spec(onnx_model, 1769))
    assert report["confined"] is False and "no memory controller (test)" in report["confinement_reason"]
    # no cgroups here: the launcher measures one thread and marks it; the inference handler
    # estimates the memory size from it (core/lambda_model/unconfined.py)
    assert report["threads"] == 1 and report[ONE_THREAD_FOR_ITS_SIZE] is True
    estimate = estimated(report, spec(onnx_model, 1769))
    assert estimate["estimate"]["mark"] == "estimated, unconfined" and estimate["interval"]
    # unconfined, a peak above the memory size is still that size's failure
    with pytest.raises(MeasurementFailed, match="out of memory at 128 MB"):
        measure(spec(onnx_model, 128))


def test_cli_warns_once_when_measurements_cannot_be_confined(tiny_image_model, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("measuring.confinement.unavailable_reason", lambda: "not root (test)")
    monkeypatch.setattr(launcher, "unavailable_reason", lambda: "not root (test)")
    monkeypatch.setenv("AYCI_MEASURE_TIME_CAP_S", "0.5")
    warn_if_unconfined.cache_clear()
    code = cli_main(
        [
            "run",
            "--model",
            str(tiny_image_model),
            "--input-size",
            "32,32",
            "--matrix",
            "intel=onnx",
            "--memory",
            "1769,3538",
            "--data-dir",
            str(tmp_path / "data"),
        ]
    )
    captured = capsys.readouterr()
    err, out = " ".join(captured.err.split()), " ".join(captured.out.split())  # the console wraps lines
    assert code == 0
    assert err.count("will not be confined") == 1 and "not root (test)" in err
    summary = json.loads(next(Path(tmp_path / "data/runs").glob("*/summary.json")).read_text())
    assert [r["confined"] for r in summary["results"]] == [False, False]
    # each size estimated from one unconfined thread (core/lambda_model/unconfined.py), and marked so
    assert all(r["estimate"]["mark"] == "estimated, unconfined" and r["threads"] == 1 for r in summary["results"])
    assert 'marked "estimated, unconfined"' in err and "intel/onnx/b1/" in out
    warn_if_unconfined.cache_clear()


def test_emulated_results_are_unconfined_not_costed_not_recommended(cgroups, tiny_image_model, tmp_path):
    app = embedded(Settings(data_dir=tmp_path / "data", measure_time_cap_s=0.5, measure_min_iterations=5))
    # this machine's own Python standing in for an emulator: what matters is the flag
    app.runners["inference"].service.deps.runtime_for = lambda hardware: ([sys.executable], True)
    model = store_model(app.store, tiny_image_model, "image_classification", TINY_IMAGE_SIZE)
    request = RequestSubmitted(
        model=model, matrix=Matrix(optimizers={"arm": ["onnx"]}, batch_sizes=[1], memory_sizes_mb=[1769])
    )
    envelope = new_run(request)
    app.publisher.publish([envelope])
    app.bus.run_until_idle()
    summary = json.loads(app.store.get_bytes(keys.summary(envelope.run_id)))
    (result,) = summary["results"]
    assert result["emulated"] is True and result["confined"] is False and result["cost"] is None
    assert "emulated" in result["confinement_reason"]
    rec = summary["recommendation"]
    assert rec["fastest"] is None and "emulation" in rec["excluded"]["arm/onnx/b1/1769MB"]
