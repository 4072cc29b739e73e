"""A racing run's quick pass tunes ONNX Runtime's session settings once per artifact at one engine thread
(`services/inference/handlers.quick_pass_settings`): another size at one thread takes them, with where they
were tuned; a size at more threads tunes for itself, and so does every refinement and every exact measurement."""

from __future__ import annotations

import json

import pytest

from adapters.memory_store import MemoryStore
from core.results import QUICK_SUFFIX
from measuring.launcher import known_agreement
from schemas import keys
from tests.fakes import embedded_with_fakes
from tests.unit.test_quick_run_costs import AGREEMENT
from tests.unit.test_racing_runs import FULL_CAP_S, RacingFakes, submit

TUNED = {"graph_optimization": "all", "arena": True}


class TuningFakes(RacingFakes):
    """Tunes (as `launcher._tune` would) when handed no settings; records what each measurement was handed."""

    def __init__(self) -> None:
        super().__init__()
        self.handed: list[tuple[str, int, bool, dict | None]] = []  # optimizer, memory, quick, settings handed
        self.tuning_caps: list[tuple[bool, float]] = []  # quick, the cap its session search's budget follows

    def measure(self, spec, python_command) -> dict:
        report = super().measure(spec, python_command)
        quick = spec.time_cap_s < FULL_CAP_S
        self.handed.append((spec.optimizer, spec.memory_mb, quick, spec.engine_settings))
        self.tuning_caps.append((quick, spec.tuning_cap_s or spec.time_cap_s))
        if spec.optimizer in ("onnx", "onnx_int8"):
            settings = spec.engine_settings or {**TUNED, "threads": spec.threads}
            report["engine_settings"] = settings
            if spec.engine_settings is None:
                report["engine_tuning"] = {"settings": settings, "tried": [{"settings": settings}], "tuning_s": 1.0}
        known = known_agreement(spec)
        report["agreement"] = {**known["agreement"], "judged_in": known["judged_in"]} if known else dict(AGREEMENT)
        return report


@pytest.fixture
def fakes() -> TuningFakes:
    return TuningFakes()


@pytest.fixture
def app(tmp_path, fakes):
    return embedded_with_fakes(tmp_path, fakes, MemoryStore(), time_cap_s=FULL_CAP_S)


def _rows(summary: dict) -> dict[str, dict]:
    return {f"{r['combo']['optimizer']}/{r['combo']['memory_mb']}": r for r in summary["results"]}


def test_the_quick_pass_tunes_once_per_artifact_at_one_thread(app, fakes):
    summary = submit(app, precision="quick", optimizers=("onnx", "onnx_int8"), memory=(1024, 1769))
    for optimizer in ("onnx", "onnx_int8"):
        quick = [settings for o, _, q, settings in fakes.handed if o == optimizer and q]
        assert len(quick) == 2 and quick.count(None) == 1, f"{optimizer}: tuned at one size, handed at the other"
    refined = [settings for _, _, q, settings in fakes.handed if not q]
    assert refined and all(settings is None for settings in refined)  # a refinement tunes at its own size
    quick_results = [
        json.loads(app.store.get_bytes(keys.result_version(r["combo_key"], f"{summary['run_id']}{QUICK_SUFFIX}")))
        for r in summary["results"]
    ]
    handed = [r for r in quick_results if (r.get("engine_tuning") or {}).get("tuned_at")]
    assert len(handed) == 2  # one size of each artifact
    for row in handed:
        assert row["engine_tuning"]["tuned_at"].startswith(f"intel/{row['combo']['optimizer']}/b1/")
        assert row["engine_settings"] == row["engine_tuning"]["settings"]
        assert row["engine_tuning"]["searched_in_full"] is True  # the search it came from timed every candidate
    # the quick pass's samples take a quarter of the cap; its session search a full measurement's budget
    assert {cap for _, cap in fakes.tuning_caps} == {FULL_CAP_S}


def test_a_size_at_two_threads_tunes_for_itself(app, fakes):
    submit(app, precision="quick", optimizers=("onnx",), memory=(1769, 3538))
    quick = {memory: settings for _, memory, q, settings in fakes.handed if q}
    assert quick == {1769: None, 3538: None}


def test_an_exact_run_tunes_every_measurement(app, fakes):
    submit(app, precision="exact", optimizers=("onnx",), memory=(1024, 1769))
    assert fakes.handed and all(settings is None for *_, settings in fakes.handed)
