"""Fixtures shared by all tests: a tiny example model (so tests stay fast on 2 cores), and
`skip_unless_required`, the one way a test skips for a missing piece of the machine."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest

from core.logs import configure_logging
from schemas.combos import MEASUREMENT_VERSION

configure_logging("console")

TINY_IMAGE_SIZE = [32, 32]

# What a test may need of the machine, each with the variable that makes its absence a failure.
# scripts/test.sh (what CI runs) sets them all: there a missing piece fails instead of skipping.
REQUIRE = {
    "AYCI_REQUIRE_LOCALSTACK": "LocalStack answering (scripts/localstack.sh start)",
    "AYCI_REQUIRE_ARM": "the aarch64 root and qemu (scripts/arm-sysroot.sh)",
    "AYCI_REQUIRE_CGROUPS": "cgroups v2 that confine measurements (root)",
    "AYCI_REQUIRE_CHROMIUM": "Debian's chromium (scripts/system-packages.sh)",
    "AYCI_REQUIRE_TRANSFORMERS": "the transformers library (requirements-dev.txt)",
    "AYCI_REQUIRE_TVM": "Apache TVM (requirements.txt)",
}


# Libraries a test module may `pytest.importorskip` at its top (where a call of ours would break
# the import order): the skip of the whole module becomes a failure when the variable is set.
REQUIRED_IMPORTS = {"tvm": "AYCI_REQUIRE_TVM", "transformers": "AYCI_REQUIRE_TRANSFORMERS"}


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    report = yield
    if report.skipped:
        reason = str(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr)
        for module, variable in REQUIRED_IMPORTS.items():
            if f"could not import '{module}'" in reason and required(variable):
                report.outcome, report.longrepr = "failed", f"{reason} ({variable} is set)"
    return report


def required(variable: str) -> bool:
    return os.environ.get(variable, "") not in ("", "0")


def skip_unless_required(variable: str, reason: str) -> NoReturn:
    """Skip the calling test because `reason`, or fail it when `variable` (a key of `REQUIRE`) is set."""
    if variable not in REQUIRE:
        raise ValueError(f"unknown requirement {variable}; one of {', '.join(REQUIRE)}")
    if required(variable):
        pytest.fail(f"{reason} ({variable} is set)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)  # also at a test module's top (a library it imports)


def import_or_skip_unless_required(module: str, variable: str) -> ModuleType:
    """`module` (a third-party library, never AYCI's own: a broken import of AYCI must fail),
    imported; a skip, or a failure when `variable` is set, if it is not installed."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module.split(".")[0]:
            raise  # the library is there but something it imports is not: a real failure
        skip_unless_required(variable, f"{module} is not installed")


@pytest.fixture(autouse=True)
def _logging_outlives_captured_output():
    """The CLI points the logs at the `sys.stderr` of its call, which is a captured stream
    under `capsys` and closed after the test: point them back at the session's (set up
    first, this is torn down after `capsys`)."""
    yield
    configure_logging("console")


@pytest.fixture(scope="session")
def tiny_image_model(tmp_path_factory) -> Path:
    """The example ResNet-18 exported at 32x32 (real model, small input)."""
    from workloads.examples import export_example

    return export_example(
        "image_classification", TINY_IMAGE_SIZE, tmp_path_factory.mktemp("models") / "resnet18-32.pt2"
    )


@pytest.fixture(scope="session")
def tiny_onnx(tiny_image_model, tmp_path_factory):
    """The tiny model converted for ONNX Runtime at batch 1 and the base model's reference outputs for
    batch 1 (`bench.resnet_artifact.Artifact`), for the tests that measure an artifact directly
    (confinement, the quota lift, the paired measurement, the measuring function): read only."""
    from bench.resnet_artifact import onnx_artifact

    return onnx_artifact(
        tiny_image_model, "image_classification", TINY_IMAGE_SIZE, tmp_path_factory.mktemp("tiny-onnx")
    )


@pytest.fixture(scope="session")
def finished_base_onnx_tvm(tmp_path_factory, tiny_image_model) -> tuple:
    """One finished run on the embedded default: the tiny model on intel base, onnx and tvm
    (untuned), batch 1, 1769 MB, real engines, short measurements. Shared by the tests that only
    read it or work from its results (export, import checks), each of which once ran its own.
    (app, data folder, summary, run id); a test may add runs of its own to the app."""
    import json

    from ayci.bootstrap import embedded
    from ayci.settings import Settings
    from schemas import keys
    from schemas.combos import Matrix
    from schemas.events import RequestSubmitted
    from services.request.submission import new_run, store_model

    data = tmp_path_factory.mktemp("base-onnx-tvm") / "data"
    app = embedded(Settings(data_dir=data, measure_time_cap_s=1.0, measure_min_iterations=5))
    model = store_model(app.store, tiny_image_model, "image_classification", TINY_IMAGE_SIZE)
    matrix = Matrix(optimizers={"intel": ["base", "onnx", "tvm"]}, batch_sizes=[1], memory_sizes_mb=[1769])
    # exact: a race would skip untuned TVM (never seen ahead of ONNX Runtime, `core.tuning_stakes.never_ahead`)
    envelope = new_run(RequestSubmitted(model=model, matrix=matrix, tuning_trials=0, precision="exact"))
    app.publisher.publish([envelope])
    app.bus.run_until_idle()
    return app, data, json.loads(app.store.get_bytes(keys.summary(envelope.run_id))), envelope.run_id


SMALL_IMAGE_SIZE = [128, 128]


@pytest.fixture(scope="session")
def small_image_model(tmp_path_factory) -> Path:
    """The example ResNet-18 at 128x128 (~15 ms an inference on one thread), for tests that
    predict from measured anchors. At 32x32 (~1 ms) an inference fits in the CPU share of 512 MB,
    so that anchor timed like 1 vCPU, and 2 threads were no faster than 1: the anchors sat at the
    noise floor, and the prediction refused them (rightly) now and then."""
    from workloads.examples import export_example

    return export_example(
        "image_classification", SMALL_IMAGE_SIZE, tmp_path_factory.mktemp("models") / "resnet18-128.pt2"
    )


def disturbed_away(recommendation: dict, label: str) -> bool:
    """Whether `label` is kept from `recommendation` (a summary's, or the page's results') only because its
    measurement was disturbed (a busy host: other work took the core it needed, through every retry): what a test
    of a pick on a shared CI machine must accept, and nothing else."""
    why = (recommendation.get("excluded") or {}).get(label)
    return why is not None and why.startswith("disturbed")


def wait_until_serving(url: str, why_not: callable, alive: callable = lambda: True, timeout_s: float = 60) -> None:
    """Wait until `url` answers; fail with `why_not()` (e.g. the server's log) if the server
    dies (`alive()` false) or does not answer within `timeout_s`."""
    import time
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except OSError:
            if not alive() or time.monotonic() > deadline:
                pytest.fail(why_not())
            time.sleep(0.3)


def measured_result(
    label: str,
    *,
    p99: float,
    cost: float,
    agreement: float = 1.0,
    cold_start_ms: float = 900.0,
    peak_rss_mb: float = 300.0,
) -> dict:
    """A stored result of the combination `label` ("intel/onnx/b1/1769MB"), as the inference
    service writes it, with the figures the table shows (p50 and p90 derived from p99)."""
    hardware, optimizer, batch, memory = label.split("/")
    p50 = p99 / 2
    latency = {
        "p50": p50,
        "p90": p99 * 0.8,
        "p99": p99,
        "mean": p50,
        "min": p50,
        "max": p99,
        "ci95_low": p50,
        "ci95_high": p50,
        "cv": 0.1,
        "iterations": 100,
        "converged": True,
        "billed_ms_mean": float(int(p50) + 1),
    }
    cold = {
        "process_start": 50.0,
        "imports": cold_start_ms / 2 - 50,
        "model_load": cold_start_ms / 4,
        "first_inference": cold_start_ms / 4,
        "total": cold_start_ms,
    }
    return {
        "combo_key": f"key-{label}",
        "measurement_version": MEASUREMENT_VERSION,
        "measured_at": "2026-01-01T00:00:00+00:00",
        "run_id": "r0",
        "conversion_s": 1.0,
        "artifact_key": f"artifact-{label}",
        "model": {
            "sha256": "ab" * 32,
            "size_bytes": 1000,
            "format": "pt2",
            "workload": "image_classification",
            "input_size": [32, 32],
        },
        "combo": {
            "hardware": hardware,
            "optimizer": optimizer,
            "batch_size": int(batch[1:]),
            "memory_mb": int(memory[:-2]),
        },
        "latency_ms": latency,
        "cold_start_ms": cold,
        "warmup_iterations": 10,
        "peak_rss_mb": peak_rss_mb,
        "cost": {"per_million_inferences_usd": cost},
        "agreement": {"score": agreement, "metric": "top1"},
        "document_version": 1,
        "environment": ENVIRONMENT,
    }


ENVIRONMENT = {
    "cpu_model": "test CPU",
    "cpu_flags": ["avx2"],
    "host_cores": 2,
    "kernel": "6.0",
    "cgroup": "v2",
    "ayci_version": "test",
    "python": "3.11.7",
    "machine": "x86_64",
    "libraries": {"torch": "2.13.0", "onnxruntime": "1.31.1"},
}


def archived_summary(
    run_id: str, status: str, results: list[dict], failures: list[dict], input_size=(224, 224)
) -> dict:
    """A run summary as the archiver stores it, its recommendation made by the archiver's own
    `recommend`. A failure is {"label", "stage", "reason"}."""
    from report.recommendation import recommend

    return {
        "run_id": run_id,
        "status": status,
        "archived_at": "2026-01-01T00:00:00+00:00",
        "closed_at_deadline": False,
        "model": {
            "sha256": "ab" * 32,
            "size_bytes": 1000,
            "format": "pt2",
            "workload": "image_classification",
            "input_size": list(input_size),
        },
        "request": {},
        "results": results,
        "failures": [{"combo_key": f"k{i}", "combo": _combo_of(f["label"]), **f} for i, f in enumerate(failures)],
        "recommendation": recommend(results, slo_p99_ms=None, min_agreement=0.99).model_dump(mode="json"),
    }


def _combo_of(label: str) -> dict:
    hardware, optimizer, batch, memory = label.split("/")
    return {"hardware": hardware, "optimizer": optimizer, "batch_size": int(batch[1:]), "memory_mb": int(memory[:-2])}
