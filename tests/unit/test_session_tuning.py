"""measuring.measure.tune: the default session settings are kept unless another setting
is faster by the margin twice (screening, then both timed again). The engine is a fake whose
runs take a chosen time per settings and per load (reported to `measure.timed`, so a busy
machine changes nothing), standing in for ONNX Runtime sessions."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

import engines
from measuring import measure

LOGITS = np.eye(1, 10, 3, dtype=np.float32)


@pytest.fixture
def engine(monkeypatch):
    """`engines.fake_engine`: settings {"name": ...}; `ms[name]` lists the time (ms) a run of
    each successive load of those settings takes (the last repeats)."""
    module = types.ModuleType("engines.fake_engine")
    module.ms, module.loads = {}, []
    module.tuning_candidates = lambda threads: [{"name": "default"}, {"name": "other"}]

    def load(path, threads, settings=None):
        name = settings["name"]
        times = module.ms[name]
        run_ms = times[min(sum(1 for loaded in module.loads if loaded == name), len(times) - 1)]
        module.loads.append(name)

        def run(inputs):
            return [LOGITS]

        run.ms = run_ms
        return run

    module.load = load
    monkeypatch.setitem(sys.modules, "engines.fake_engine", module)
    monkeypatch.setitem(engines._MODULES, "fake", "engines.fake_engine")
    monkeypatch.setattr(measure, "timed", lambda run, inputs: (run(inputs), run.ms)[1])
    return module


def _tune(engine, tmp_path, **ms):
    engine.ms.update(ms)
    reference = tmp_path / "reference.npz"
    np.savez(reference, **{"input:pixels": np.zeros((1, 3, 8, 8), np.float32), "output:0": LOGITS})
    return measure.tune(
        {
            "optimizer": "fake",
            "workload": "image_classification",
            "artifact_path": str(tmp_path / "model"),
            "reference_path": str(reference),
            "threads": 2,
            "time_cap_s": 60,
        }
    )


def test_settings_faster_twice_by_the_margin_win(engine, tmp_path):
    outcome = _tune(engine, tmp_path, default=[6.0], other=[3.0])
    assert outcome["settings"] == {"name": "other"}
    assert outcome["confirmation"]["confirmed"] is True
    assert engine.loads == ["default", "other", "other", "default"]  # the challenger first in the confirmation
    assert outcome["budget_s"] == measure.TUNING_BUDGET_S  # a 60 s cap: the whole budget, said with the outcome


def test_settings_that_won_the_screening_by_chance_lose_the_confirmation(engine, tmp_path):
    outcome = _tune(engine, tmp_path, default=[6.0], other=[3.0, 9.0])  # a burst of other work in the screening
    assert outcome["settings"] == {"name": "default"}
    confirmation = outcome["confirmation"]
    assert confirmation["confirmed"] is False and confirmation["challenger_p50_ms"] > confirmation["default_p50_ms"]


def test_settings_within_the_margin_do_not_replace_the_default(engine, tmp_path):
    outcome = _tune(engine, tmp_path, default=[6.0], other=[5.9])
    assert outcome["settings"] == {"name": "default"} and "confirmation" not in outcome
    assert engine.loads == ["default", "other"]


def test_a_quick_pass_searches_with_a_full_measurement_s_budget():
    """The quick pass times a quarter of the cap (3 s of 12); its search has the full one's budget."""
    full = measure.tuning_budget_s({"time_cap_s": 12.0})
    assert measure.tuning_budget_s({"time_cap_s": 3.0}) < full
    assert measure.tuning_budget_s({"time_cap_s": 3.0, "tuning_cap_s": 12.0}) == full
    assert measure.tuning_budget_s({"time_cap_s": 60.0}) == measure.TUNING_BUDGET_S
