"""What makes a number trustworthy, one function at a time: library versions in the keys, stale
results never reused, a p99 resting on at least 100 samples, host-limited sizes."""

from __future__ import annotations

import itertools

from adapters.memory_store import MemoryStore
from core.results import keep_result, reused_result
from measuring import measure
from measuring.launcher import MeasureSpec
from schemas import versions
from schemas.combos import Combo, ModelRef, artifact_key, combo_key, reference_key
from schemas.documents import MeasuredResult
from tests.conftest import measured_result

MODEL = ModelRef(sha256="ab" * 32, size_bytes=1000, format="onnx", workload="image_classification", input_size=[32, 32])
COMBO = Combo(hardware="intel", optimizer="onnx", batch_size=1, memory_mb=1769)


def test_an_engine_library_upgrade_gives_new_keys(monkeypatch):
    before = combo_key(MODEL, COMBO), artifact_key(MODEL, COMBO, "cpu"), reference_key(MODEL, 1)
    real = versions.library_version
    monkeypatch.setattr(versions, "library_version", lambda name: "99.0" if name == "onnxruntime" else real(name))
    after = combo_key(MODEL, COMBO), artifact_key(MODEL, COMBO, "cpu"), reference_key(MODEL, 1)
    assert all(b != a for b, a in zip(before, after, strict=True))
    # a library the optimizer does not use changes nothing
    monkeypatch.setattr(versions, "library_version", lambda name: "99.0" if name == "apache-tvm" else real(name))
    assert combo_key(MODEL, COMBO) == before[0]


def test_a_stale_result_is_listed_but_never_reused():
    store = MemoryStore()
    key = combo_key(MODEL, COMBO)
    stored = measured_result(COMBO.label, p99=2.0, cost=0.3) | {"combo_key": key}
    keep_result(store, MeasuredResult.model_validate(stored))
    assert reused_result(store, key) is not None
    for stale in ({"measurement_version": "m1"}, {"measurement_version": "m9-from-the-future"}, {"environment": None}):
        keep_result(
            store, MeasuredResult.model_validate(stored | stale | {"run_id": f"r-{len(store.list_keys('results/'))}"})
        )
        assert reused_result(store, key) is None  # measure again
    store.put_bytes(f"results/{key}.json", b'{"not": "a result"')
    assert reused_result(store, key) is None  # unreadable: stale, never a crash
    assert len(store.list_keys(f"results/{key}/")) == 4  # every version still there


def test_the_p99_rests_on_at_least_100_samples(monkeypatch):
    steady = itertools.cycle([1.0, 1.01, 0.99, 1.0, 1.02])
    monkeypatch.setattr(measure, "timed", lambda run, inputs: next(steady))
    stats = measure.measure_warm(None, None, min_iterations=10, cap_s=30)
    assert stats["converged"] and stats["iterations"] >= 100 and stats["p99_samples"] == stats["iterations"]
    assert not stats["p99_estimate"] and stats["p99_ci95_low"] <= stats["p99"] <= stats["p99_ci95_high"]
    # too slow for 100 samples within the cap: the p99 is marked an estimate
    slow = itertools.count()
    monkeypatch.setattr(measure, "timed", lambda run, inputs: (next(slow), __import__("time").sleep(0.02), 50.0)[2])
    stats = measure.measure_warm(None, None, min_iterations=10, cap_s=0.3)
    assert not stats["converged"] and stats["p99_estimate"] and stats["p99_samples"] < 100


def test_a_wide_tail_keeps_measuring_until_it_settles(monkeypatch):
    """A p50 that settles at once, a tail that does not: the rule covers the tail too."""
    spiky = itertools.cycle([1.0] * 99 + [10.0])  # one sample in a hundred ten times slower: right at the p99
    monkeypatch.setattr(measure, "timed", lambda run, inputs: next(spiky))
    stats = measure.measure_warm(None, None, min_iterations=10, cap_s=0.3)
    assert stats["iterations"] > 100 and not stats["converged"]  # the p50 settled at once; the tail never did
    assert stats["p99_ci95_high"] == 10.0 and stats["p99_ci95_low"] == 1.0


def test_host_limited_sizes(monkeypatch):
    from measuring import launcher

    monkeypatch.setattr(launcher, "host_cores", lambda: 2)
    spec = MeasureSpec(
        optimizer="onnx", workload="image_classification", artifact_path=None, reference_path=None, memory_mb=10240
    )
    assert spec.vcpus > 5.7 and spec.threads == 2


def test_the_table_says_host_limited_and_estimated_tails():
    from report.render import results_csv
    from report.table import summary_rows
    from tests.conftest import archived_summary

    limited = measured_result("intel/onnx/b1/10240MB", p99=1.0, cost=0.1) | {
        "host_limited": True,
        "vcpus": 5.79,
        "vcpus_available": 2,
        "cost": None,
    }
    limited["latency_ms"] |= {"p99_samples": 40, "p99_estimate": True}
    summary = archived_summary(
        "run-1", "complete", [limited, measured_result("intel/onnx/b1/1769MB", p99=5.0, cost=1.0)], []
    )
    (row,) = [r for r in summary_rows(summary) if r.combination == "intel/onnx/b1/10240MB"]
    assert (
        "host-limited: needs 5.8 vCPUs, host has 2; not costed" in row.note
        and "p99 an estimate (40 samples)" in row.note
    )
    assert "host-limited" in results_csv(summary)
    assert summary["recommendation"]["fastest"] == "intel/onnx/b1/1769MB"


def test_the_table_says_how_far_a_quantized_model_s_outputs_moved():
    from report.table import summary_rows
    from tests.conftest import archived_summary

    int8 = measured_result("intel/onnx_int8/b1/1769MB", p99=1.0, cost=0.1)
    int8["agreement"] |= {"max_abs_diff": 0.0023}
    summary = archived_summary(
        "run-1", "complete", [int8, measured_result("intel/onnx/b1/1769MB", p99=5.0, cost=1.0)], []
    )
    rows = {r.combination: r.note for r in summary_rows(summary)}
    assert "quantized: outputs differ from base by up to 0.0023" in rows["intel/onnx_int8/b1/1769MB"]
    assert "quantized" not in rows["intel/onnx/b1/1769MB"]


def test_a_resubmission_reads_the_result_packs_not_one_object_per_combination():
    """`latest_results` takes what a model's packs hold (newest pack first, stale entries
    skipped) and reads by key only what no pack holds."""
    from datetime import UTC, datetime, timedelta

    from core.results import latest_results, pack_results

    store = MemoryStore()
    combos = [
        Combo(hardware="intel", optimizer="onnx", batch_size=1, memory_mb=m) for m in range(1024, 1024 + 64 * 40, 64)
    ]
    combo_keys = [combo_key(MODEL, c) for c in combos]
    at = datetime(2026, 1, 1, tzinfo=UTC)
    for run, stale in (("old", {}), ("new", {})):
        measured = {}
        for combo, key in zip(combos[:30], combo_keys[:30], strict=True):
            result = MeasuredResult.model_validate(
                measured_result(combo.label, p99=2.0, cost=0.1) | {"combo_key": key, "run_id": run} | stale
            )
            measured[keep_result(store, result)] = result.to_dict()
        pack_results(store, MODEL.sha256, run, at, measured)
        at += timedelta(minutes=1)
    # 10 more measured by a run that never closed (no pack): found by key
    for combo, key in zip(combos[30:], combo_keys[30:], strict=True):
        keep_result(
            store,
            MeasuredResult.model_validate(
                measured_result(combo.label, p99=2.0, cost=0.1) | {"combo_key": key, "run_id": "open"}
            ),
        )
    store.calls.clear()
    found = latest_results(store, MODEL.sha256, combo_keys + ["never-measured"])
    assert set(found) == set(combo_keys)
    assert {found[k][0] for k in combo_keys[:30]} == {
        f"results/{k}/new.json" for k in combo_keys[:30]
    }  # the newest pack wins
    assert {found[k][0] for k in combo_keys[30:]} == {f"results/{k}/open.json" for k in combo_keys[30:]}
    assert (
        store.calls["get"] == 2 + 11 and store.calls["list"] == 1
    )  # both packs (one key is in none), then the 11 no pack holds
    # a stale entry in a pack is not reused from it: read by key, and stale there too
    pack_results(
        store,
        MODEL.sha256,
        "stale",
        at,
        {
            "results/x/stale.json": measured_result(combos[0].label, p99=2.0, cost=0.1)
            | {"combo_key": combo_keys[0], "run_id": "stale", "environment": None}
        },
    )
    assert latest_results(store, MODEL.sha256, combo_keys[:1])[combo_keys[0]][0] == f"results/{combo_keys[0]}/new.json"


def test_an_engine_version_leaves_the_reference_key_as_it_was(monkeypatch):
    """A run stored before an engine's change is still served: its reference is found by the same key."""
    from schemas import combos

    before = combo_key(MODEL, COMBO), artifact_key(MODEL, COMBO, "cpu"), reference_key(MODEL, 1)
    monkeypatch.setattr(combos, "ENGINE_VERSION", "e-next")
    after = combo_key(MODEL, COMBO), artifact_key(MODEL, COMBO, "cpu"), reference_key(MODEL, 1)
    assert before[1] != after[1] and before[2] == after[2]
    monkeypatch.setattr(combos, "REFERENCE_VERSION", "r-next")
    assert reference_key(MODEL, 1) != before[2]
