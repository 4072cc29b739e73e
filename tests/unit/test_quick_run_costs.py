"""What a racing run no longer does twice (issue 38): an artifact's agreement judged once per engine
threads and settings in the run, and `base`'s conversion, which the reference's sandboxed run did."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.memory_store import MemoryStore
from engines import ConversionJob
from measuring.launcher import MeasureSpec, known_agreement
from schemas.combos import ModelRef, Optimizer
from services.converter.handlers import ConverterDeps, _base_checked_by_reference, base_artifact
from tests.fakes import embedded_with_fakes
from tests.unit.test_racing_runs import RacingFakes, submit

AGREEMENT = {"score": 0.9991, "metric": "top1", "samples": 32}


def spec(threads: int, settings: dict | None, known: list[dict]) -> MeasureSpec:
    return MeasureSpec(
        optimizer="onnx",
        workload="image_classification",
        artifact_path=Path("a"),
        reference_path=Path("r"),
        memory_mb=1769 if threads == 1 else 3538,
        engine_settings=settings,
        agreements=known,
    )


def test_an_agreement_is_taken_only_at_the_same_threads_and_settings():
    settings = {"graph_optimization": "all", "intra_op_threads": 1}
    known = [{"threads": 1, "settings": settings, "agreement": AGREEMENT, "judged_in": "intel/onnx/b1/1024MB"}]
    assert known_agreement(spec(1, settings, known)) == known[0]
    assert known_agreement(spec(1, {**settings, "graph_optimization": "basic"}, known)) is None  # other numerics
    assert known_agreement(spec(1, None, known)) is None
    assert known_agreement(spec(1, settings, [])) is None


class AgreementFakes(RacingFakes):
    """Records the agreements each measurement was handed, and reports the one it was handed (as the
    measuring process does) or a fresh judgement otherwise."""

    def __init__(self) -> None:
        super().__init__()
        self.handed: list[tuple[str, int, float, dict | None]] = []

    def measure(self, spec, python_command) -> dict:
        report = super().measure(spec, python_command)
        known = known_agreement(spec)
        self.handed.append((spec.optimizer, spec.memory_mb, spec.time_cap_s, known))
        report["agreement"] = {**known["agreement"], "judged_in": known["judged_in"]} if known else dict(AGREEMENT)
        return report


@pytest.fixture
def fakes() -> AgreementFakes:
    return AgreementFakes()


@pytest.fixture
def app(tmp_path, fakes):
    return embedded_with_fakes(tmp_path, fakes, MemoryStore(), time_cap_s=12.0)


def test_a_racing_run_judges_each_artifacts_agreement_once_per_threads(app, fakes):
    summary = submit(app, precision="quick", optimizers=("onnx", "onnx_int8"), memory=(1024, 1769))
    by_combo = {(o, m, cap): known for o, m, cap, known in fakes.handed}
    for optimizer in ("onnx", "onnx_int8"):
        firsts = [known for (o, _, cap), known in by_combo.items() if o == optimizer and cap < 12.0]
        assert firsts.count(None) == 1, f"{optimizer}: judged once in the quick pass (both sizes run 1 thread)"
    refined = [known for (_, _, cap), known in by_combo.items() if cap == 12.0]
    assert refined and all(known is not None for known in refined)  # the quick pass judged the same computation
    rows = summary["results"]
    assert all(r["agreement"]["score"] == AGREEMENT["score"] for r in rows)
    assert any("judged_in" in r["agreement"] for r in rows)


def test_an_exact_run_judges_every_measurement(app, fakes):
    submit(app, precision="exact", optimizers=("onnx",), memory=(1024, 1769))
    assert fakes.handed and all(known is None for *_, known in fakes.handed)


MODEL = ModelRef(sha256="cd" * 32, size_bytes=4, format="pt2", workload="image_classification", input_size=[32, 32])


def test_bases_artifact_is_the_model_file_once_the_reference_ran_it(tmp_path):
    model_path = tmp_path / "model.pt2"
    model_path.write_bytes(b"PK-the-program")
    out = tmp_path / "out"
    out.mkdir()
    job = ConversionJob(model=MODEL, model_path=model_path, hardware=None, batch_size=1, target_cpu="", out_dir=out)
    conversion = base_artifact(job)
    assert conversion.artifact_file == "model.pt2"
    assert (out / "model.pt2").read_bytes() == b"PK-the-program"
    assert "reference" in conversion.details["checked_by"]
    real = ConverterDeps(store=MemoryStore())
    assert _base_checked_by_reference(real, Optimizer.base)
    assert not _base_checked_by_reference(real, Optimizer.onnx)
    # a caller's own conversion or reference (tests, fakes) proves nothing about the model
    assert not _base_checked_by_reference(ConverterDeps(store=MemoryStore(), convert=lambda o, j: None), Optimizer.base)
    assert not _base_checked_by_reference(
        ConverterDeps(store=MemoryStore(), compute_reference=lambda *a, **k: None), Optimizer.base
    )
