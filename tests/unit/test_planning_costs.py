"""`ayci plan`'s time estimate, learned from stored results (`core/plan_costs.py`, `core/planning.py`).

Wall time on a shared 2-core machine is noise, so these tests do not time a run: they store the
results of a run whose timings are known (when each combination finished, its measuring, its
conversion), and check that the plan of the same matrix, estimated from what those results say,
comes within 25 % of that run's wall time; and that racing's expected saving follows its formula.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta

import pytest

from adapters.memory_store import MemoryStore
from core.plan_costs import (
    DEFAULT_PRIORS,
    PRIOR_RACING_RUNS,
    PRIORS,
    SAMPLING_CAP_S,
    EngineCosts,
    learn_costs,
    priors_for,
    sampling_s,
    stored_costs,
)
from core.planning import plan_run
from core.racing import QUICK_TIME_CAP_SHARE
from schemas import keys
from schemas.combos import Combo, Optimizer, Workload
from schemas.events import RequestSubmitted

SHA = "a" * 64
STARTED = datetime(2026, 12, 6, 1, 0, tzinfo=UTC)
# what each engine costs in the run stored: overhead per combination, conversion per artifact
OVERHEAD = {"base": 9.0, "onnx": 5.0}
CONVERSION = {"base": 2.0, "onnx": 12.0}
STARTUP_S = 4.0  # from the submission to the first combination's start
IMAGE = PRIORS[Workload.image_classification]  # the workload of `_request`'s model


def _request(**update) -> RequestSubmitted:
    body = {
        "model": {
            "sha256": SHA,
            "size_bytes": 1_000_000,
            "format": "pt2",
            "workload": "image_classification",
            "input_size": [32, 32],
        },
        "matrix": {"optimizers": {"intel": ["base", "onnx"]}, "batch_sizes": [1, 4], "memory_sizes_mb": [1024, 3538]},
        "owner": "local",
        "force": True,
        "precision": "exact",  # the stored run measured everything to full precision
    }
    return RequestSubmitted.model_validate({**body, **update})


def _p50(combo: Combo) -> float:
    """The latencies of the run stored: 3 ms per sample at a full vCPU (base), 2 ms (onnx)."""
    per_sample = 3.0 if combo.optimizer == Optimizer.base else 2.0
    return per_sample * combo.batch_size / min(1.0, combo.memory_mb / 1769)


def _store_run(store: MemoryStore, request: RequestSubmitted, run_id: str = "run-1") -> float:
    """Store the results of `request` measured one after another, as a run would; its wall time."""
    now = STARTED + timedelta(seconds=STARTUP_S)
    store.put_bytes(keys.run_record(run_id), json.dumps({"submitted_at": STARTED.isoformat()}).encode())
    converted = set()
    for combo in request.matrix.combos():
        optimizer = combo.optimizer.value
        artifact = f"{optimizer}-b{combo.batch_size if optimizer != 'base' else 0}"
        if artifact not in converted:
            converted.add(artifact)
            now += timedelta(seconds=CONVERSION[optimizer])
        p50 = _p50(combo)
        measuring = OVERHEAD[optimizer] + sampling_s(p50)
        now += timedelta(seconds=measuring)
        result = {
            "combo": combo.model_dump(mode="json"),
            "model": {"sha256": SHA},
            "run_id": run_id,
            "measured_at": now.isoformat(),
            "measurement_s": measuring - 2.0,  # the measuring process alone: the launcher's work is outside
            "conversion_s": CONVERSION[optimizer],
            "tuning_s": 0.0,
            "artifact_key": artifact,
            "latency_ms": {"p50": p50, "p99": p50 * 1.2},
        }
        combo_key = f"{optimizer}-b{combo.batch_size}-{combo.memory_mb}"
        store.put_bytes(keys.result_version(combo_key, run_id), json.dumps(result).encode())
        store.put_bytes(keys.result(combo_key), json.dumps(result).encode())
    return (now - STARTED).total_seconds()


def test_the_plan_of_a_matrix_comes_within_a_quarter_of_the_stored_run_it_learned_from():
    store = MemoryStore()
    request = _request()
    actual = _store_run(store, request)
    plan = plan_run(request, None, store, shapes=lambda batch: {})
    estimated = plan.wall_s
    assert abs(estimated - actual) <= 0.25 * actual, (estimated, actual)
    assert plan.as_dict()["estimates"]["from"] == "learned from stored results: base 4, onnx 4"
    # each engine's figures are what the run says, not the priors
    assert plan.costs.conversion_s[Optimizer.onnx] == CONVERSION["onnx"]
    assert plan.costs.overhead_s[Optimizer.onnx] == pytest.approx(OVERHEAD["onnx"])
    assert plan.costs.overhead_s[Optimizer.base] == pytest.approx(OVERHEAD["base"], abs=STARTUP_S / 2)


def test_a_larger_matrix_of_the_same_model_is_estimated_from_its_stored_latencies():
    """Batch 8 and 512 MB were never measured: their latency is scaled from the stored ones
    (by batch and by the vCPU share), and so is the time their samples take."""
    store = MemoryStore()
    _store_run(store, _request())
    larger = _request(
        matrix={"optimizers": {"intel": ["base", "onnx"]}, "batch_sizes": [1, 8], "memory_sizes_mb": [512, 3538]}
    )
    plan = plan_run(larger, None, store, shapes=lambda batch: {})
    expected = 0.0
    artifacts = set()
    for combo in larger.matrix.combos():
        optimizer = combo.optimizer.value
        artifact = (optimizer, combo.batch_size if optimizer != "base" else 0)
        if artifact not in artifacts:
            artifacts.add(artifact)
            expected += CONVERSION[optimizer]
        expected += OVERHEAD[optimizer] + sampling_s(_p50(combo))
    assert abs(plan.wall_s - expected) <= 0.25 * expected, (plan.wall_s, expected)
    assert plan.costs.expected_p50_ms(SHA, Combo(hardware="intel", optimizer="onnx", batch_size=8, memory_mb=512)) == (
        pytest.approx(_p50(Combo(hardware="intel", optimizer="onnx", batch_size=8, memory_mb=512)))
    )


def test_without_stored_results_the_plan_rests_on_the_priors_and_says_so():
    plan = plan_run(_request(), None, MemoryStore(), shapes=lambda batch: {})
    assert (
        plan.as_dict()["estimates"]["from"]
        == "priors for image classification, measured on ResNet-18 (no results of its workload stored yet)"
    )
    measured = [c for c in plan.combos if c.state == "measure"]
    assert all(c.measurement_s == IMAGE.overhead_s[c.combo.optimizer] + c.sampling_s for c in measured)
    assert all(0 < c.sampling_s <= SAMPLING_CAP_S for c in measured)


def test_racing_is_expected_to_save_the_sampling_of_the_combinations_it_does_not_refine():
    store = MemoryStore()
    _store_run(store, _request())
    plan = plan_run(_request(precision="quick"), None, store, shapes=lambda batch: {})
    measured = [c for c in plan.combos if c.state == "measure"]
    # the stored run measured to full precision: a quick pass's overhead is its at the priors' ratio, its sampling
    # a quarter of the cap at most
    for c in measured:
        engine = c.combo.optimizer
        overhead = plan.costs.overhead_s[engine] * IMAGE.quick_overhead_s[engine] / IMAGE.overhead_s[engine]
        assert plan.costs.quick_overhead_s[engine] == pytest.approx(overhead)
        assert c.quick_measurement_s == pytest.approx(
            overhead + min(c.sampling_s, QUICK_TIME_CAP_SHARE * SAMPLING_CAP_S)
        )
    quick = sum(c.quick_measurement_s for c in measured)
    refined = IMAGE.refined_share * sum(c.measurement_s for c in measured)
    assert plan.racing_wall_s == pytest.approx(sum(c.conversion_s for c in measured) + quick + refined)
    assert plan.wall_s == plan.racing_wall_s  # a quick run's estimate is the racing one
    totals = plan.as_dict()["totals"]
    assert totals["estimated_racing_saves_s"] == pytest.approx(plan.exact_wall_s - plan.racing_wall_s, abs=0.1)
    assert plan_run(_request(), None, store, shapes=lambda batch: {}).wall_s == pytest.approx(plan.exact_wall_s)
    assert (
        plan.as_dict()["estimates"]["racing"]["from"]
        == "priors for image classification, measured on ResNet-18 (no racing run of its workload stored yet)"
    )


def test_racing_expects_tvm_tuned_only_at_the_share_of_batch_sizes_racing_runs_tuned():
    """TVM's tuning (minutes per batch size) is skipped where the other engines' figures show it
    cannot change the answer; a plan charges TVM's conversion, quick pass and refinement at the
    share of TVM artifacts racing runs tuned, not at every batch size."""
    matrix = {"optimizers": {"intel": ["onnx", "tvm"]}, "batch_sizes": [1, 4], "memory_sizes_mb": [1024, 3538]}
    plan = plan_run(_request(precision="quick", matrix=matrix), None, MemoryStore(), shapes=lambda batch: {})
    onnx = [c for c in plan.combos if c.state == "measure" and c.combo.optimizer == Optimizer.onnx]
    tvm = [c for c in plan.combos if c.state == "measure" and c.combo.optimizer == Optimizer.tvm]
    assert sum(c.conversion_s for c in tvm) > 10 * sum(c.conversion_s for c in onnx)  # tuning: the bulk of it

    def charged(combos, share):
        quick = sum(c.conversion_s + c.quick_measurement_s for c in combos)
        return share * (quick + IMAGE.refined_share * sum(c.measurement_s for c in combos))

    expected = charged(onnx, 1.0) + charged(tvm, IMAGE.tvm_tuned_share)
    assert plan.racing_wall_s == pytest.approx(expected)
    assert plan.exact_wall_s > plan.racing_wall_s + 0.5 * sum(c.conversion_s for c in tvm)


def test_where_tvm_was_never_ahead_at_the_budget_a_race_is_planned_without_its_tuning():
    """At 64 trials TVM has never been seen ahead of ONNX Runtime (`core.tuning_stakes.never_ahead`):
    with ONNX Runtime at each of TVM's sizes, a race skips TVM at every batch size, so its plan
    charges none of TVM's work and says why; where ONNX Runtime is not in the matrix, or the budget
    has shown a gain (600 trials), the plan charges the share stored races tuned."""
    from ayci.cli.plan import estimate_basis

    matrix = {"optimizers": {"intel": ["onnx", "tvm"]}, "batch_sizes": [1, 4], "memory_sizes_mb": [1024, 3538]}
    plan = plan_run(_request(precision="quick", matrix=matrix, tuning_trials=64), None, MemoryStore(), lambda b: {})
    onnx = [c for c in plan.combos if c.state == "measure" and c.combo.optimizer == Optimizer.onnx]
    quick = sum(c.conversion_s + c.quick_measurement_s for c in onnx)
    assert plan.racing_wall_s == pytest.approx(quick + IMAGE.refined_share * sum(c.measurement_s for c in onnx))
    assert plan.costs.tvm_tuned_share == 0.0
    assert plan.as_dict()["estimates"]["racing"]["tvm_skipped"] == plan.costs.tvm_skipped
    assert "TVM tuned at none of its batch sizes: TVM tuned with 64 trials has never been seen ahead of ONNX " in (
        estimate_basis(plan)
    )
    assert "p99 1.20), and ONNX Runtime has a figure at each of TVM's sizes" in plan.costs.tvm_skipped
    from ayci.cli.common import estimate_line

    assert estimate_line(plan).endswith(
        f"; TVM's tuning will be skipped: {plan.costs.tvm_skipped} (`--precision exact` measures it)"
    )
    exact = plan_run(_request(precision="exact", matrix=matrix, tuning_trials=64), None, MemoryStore(), lambda b: {})
    assert exact.costs.tvm_skipped is not None and "skipped" not in estimate_line(exact)  # exact tunes it
    longer = plan_run(_request(precision="quick", matrix=matrix, tuning_trials=600), None, MemoryStore(), lambda b: {})
    assert longer.costs.tvm_skipped is None and longer.costs.tvm_tuned_share == IMAGE.tvm_tuned_share
    alone = {**matrix, "optimizers": {"intel": ["base", "tvm"]}}
    without = plan_run(_request(precision="quick", matrix=alone, tuning_trials=64), None, MemoryStore(), lambda b: {})
    assert without.costs.tvm_skipped is None and without.costs.tvm_tuned_share == IMAGE.tvm_tuned_share


def _store_racing_run(
    store: MemoryStore,
    run_id: str,
    *,
    quick: int,
    refined: int,
    tvm: dict[int, str],
    model: str = SHA,
    trials: int = 600,
) -> None:
    """A racing run's traces: its quick results (what marks it a racing run), its race (figures
    that raced, predicted sizes among them, and `refine`) and its summary, TVM at each batch size
    of `tvm` measured ("tuned"), skipped ("skipped") or out of memory after tuning ("inference")."""
    combo = {"hardware": "intel", "optimizer": "onnx", "batch_size": 1, "memory_mb": 1769}
    for i in range(quick):  # its quick measurements
        result = {
            "combo": combo,
            "model": {"sha256": model},
            "run_id": run_id,
            "precision": "quick",
            "measured_at": STARTED.isoformat(),
            "latency_ms": {"p50": 2.0, "p99": 2.4},
        }
        store.put_bytes(keys.result_version(f"onnx-{i}", f"{run_id}.quick"), json.dumps(result).encode())
    raced = {f"c{i}": {"predicted": i >= quick} for i in range(quick + 5)}  # the race weighs predicted sizes too
    decided = {"quick": raced, "refine": {f"k{i}": {} for i in range(refined)}}
    store.put_bytes(keys.racing(run_id), json.dumps(decided).encode())
    rows, failures = [], []
    for batch, what in tvm.items():
        for memory in (1024, 3538):
            tvm_combo = {**combo, "optimizer": "tvm", "batch_size": batch, "memory_mb": memory}
            if what == "tuned":
                rows.append({"combo": tvm_combo})
            else:
                failures.append({"combo": tvm_combo, "stage": what})
        failures.append(
            {"combo": {**combo, "optimizer": "tvm", "batch_size": batch, "memory_mb": 2048}, "stage": "prediction"}
        )  # a predicted size: not a TVM artifact of its own
    summary = {"results": rows, "failures": failures, "request": {"tuning_trials": trials}}
    store.put_bytes(keys.summary(run_id), json.dumps(summary).encode())


def test_racing_shares_are_learned_from_the_racing_runs_stored():
    store = MemoryStore()
    _store_racing_run(store, "race-1", quick=30, refined=2, tvm={1: "tuned", 2: "skipped", 4: "skipped"})
    _store_racing_run(store, "race-2", quick=10, refined=1, tvm={1: "inference", 2: "skipped"})
    costs = stored_costs(store, workload="image_classification")
    assert costs.racing_runs == 2
    runs, quick, artifacts = PRIOR_RACING_RUNS  # the priors count as that many runs beside the stored ones
    assert costs.refined_share == pytest.approx((IMAGE.refined_share * runs * quick + 3) / (runs * quick + 40))
    # an out-of-memory TVM was tuned first: 2 of 5 tuned
    assert costs.tvm_tuned_share == pytest.approx(
        (IMAGE.tvm_tuned_share * runs * artifacts + 2) / (runs * artifacts + 5)
    )
    assert costs.racing_source() == "learned from 2 stored racing runs of its workload"
    # the stored runs move the shares from the priors toward what they did
    assert IMAGE.refined_share > costs.refined_share > 3 / 40
    assert IMAGE.tvm_tuned_share < costs.tvm_tuned_share < 2 / 5
    # a run not archived yet (no summary) teaches nothing
    _store_racing_run(store, "race-3", quick=10, refined=10, tvm={1: "tuned"})
    store.put_bytes(keys.summary("race-3"), b"not yet")
    assert stored_costs(store, workload="image_classification").refined_share == pytest.approx(costs.refined_share)


def test_a_models_own_racing_run_says_how_much_its_next_race_refines():
    """How much a race refines is the model's (its engines within each other's slack or not): a model's own racing
    run is what its next one is expected to do, another model's of the workload only moves the priors."""
    store = MemoryStore()
    other = "b" * 64
    _store_racing_run(store, "theirs", quick=30, refined=27, tvm={1: "tuned", 2: "tuned"}, model=other)
    theirs = stored_costs(store, SHA, "image_classification")  # not this model's: beside the priors
    assert theirs.racing_source() == "learned from 1 stored racing run of its workload"
    assert IMAGE.refined_share < theirs.refined_share < 27 / 30
    _store_racing_run(store, "mine", quick=20, refined=4, tvm={1: "skipped", 2: "tuned", 4: "skipped"})
    mine = stored_costs(store, SHA, "image_classification")
    assert mine.racing_source() == "learned from this model's 1 stored racing run"
    assert mine.refined_share == pytest.approx(4 / 20) and mine.tvm_tuned_share == pytest.approx(1 / 3)
    # the other model's plan learns from its own run
    assert stored_costs(store, other, "image_classification").racing_source() == (
        "learned from this model's 1 stored racing run"
    )


def test_tvm_s_tuned_share_is_learned_from_the_races_with_the_plan_s_budget():
    """At 64 trials a race skips TVM wherever ONNX Runtime has figures; at 600 the figures decide: a
    600-trial plan does not take the 64-trial races' skips for its own, though their refinements count."""
    store = MemoryStore()
    _store_racing_run(store, "small", quick=20, refined=4, tvm={1: "skipped", 2: "skipped"}, trials=64)
    _store_racing_run(store, "large", quick=20, refined=2, tvm={1: "tuned", 2: "skipped"}, trials=600)
    assert stored_costs(store, SHA, "image_classification", tuning_trials=600).tvm_tuned_share == pytest.approx(1 / 2)
    assert stored_costs(store, SHA, "image_classification", tuning_trials=64).tvm_tuned_share == 0.0
    assert stored_costs(store, SHA, "image_classification").tvm_tuned_share == pytest.approx(1 / 4)  # any budget
    for trials in (64, 600, None):
        assert stored_costs(store, SHA, "image_classification", tuning_trials=trials).refined_share == 6 / 40


def test_a_conversion_this_run_did_not_do_is_not_taken_out_of_its_combination():
    """A result whose artifact was converted by an earlier run still carries that conversion's
    time; the gap before it cannot hold it, so the whole gap is its measuring."""
    later = STARTED + timedelta(seconds=30)
    results = [
        {
            "combo": {"hardware": "intel", "optimizer": "onnx", "batch_size": 1, "memory_mb": 1769},
            "model": {"sha256": SHA},
            "run_id": "r",
            "measured_at": when.isoformat(),
            "measurement_s": 8.0,
            "conversion_s": 100.0,
            "artifact_key": artifact,
            "latency_ms": {"p50": 1.0},
        }
        for when, artifact in ((STARTED, "x"), (later, "y"))
    ]
    costs = learn_costs(results)
    assert costs.overhead_s[Optimizer.onnx] == pytest.approx(30.0 - sampling_s(1.0))
    assert costs.conversion_s[Optimizer.onnx] == 100.0


def test_tvm_seconds_per_trial_come_from_its_tuned_artifacts():
    result = {
        "combo": {"hardware": "intel", "optimizer": "tvm", "batch_size": 1, "memory_mb": 1769},
        "model": {"sha256": SHA},
        "run_id": "r",
        "measured_at": STARTED.isoformat(),
        "conversion_s": 20.0,
        "tuning_s": 300.0,
        "artifact_key": "t",
        "latency_ms": {"p50": 5.0},
        "conversion": {"trials": 600},
    }
    assert learn_costs([result]).trial_s == 0.5
    assert EngineCosts().trial_s > 0 and stored_costs(None).learned_from == {}


def test_a_quick_pass_is_learned_from_with_its_shorter_sampling():
    """A racing run's quick results (`{run}.quick.json`) are read; their sampling is a quarter of the cap's."""
    store = MemoryStore()
    slow = 100.0  # ms: 20 s of samples at full precision, capped at 15; a quarter of that in a quick pass
    for index, when in enumerate((STARTED, STARTED + timedelta(seconds=10))):
        result = {
            "combo": {"hardware": "intel", "optimizer": "onnx", "batch_size": 1, "memory_mb": 1769 + index},
            "model": {"sha256": SHA},
            "run_id": "r",
            "precision": "quick",
            "measured_at": when.isoformat(),
            "conversion_s": 1.0,
            "artifact_key": "x",
            "latency_ms": {"p50": slow},
        }
        store.put_bytes(keys.result_version(f"k{index}", "r.quick"), json.dumps(result).encode())
    costs = stored_costs(store)
    assert costs.learned_from == {"onnx": 1}
    assert costs.quick_overhead_s[Optimizer.onnx] == pytest.approx(10.0 - QUICK_TIME_CAP_SHARE * SAMPLING_CAP_S)
    # no measurement to full precision stored: its overhead is the quick one's at the priors' ratio
    ratio = DEFAULT_PRIORS.quick_overhead_s[Optimizer.onnx] / DEFAULT_PRIORS.overhead_s[Optimizer.onnx]
    assert costs.overhead_s[Optimizer.onnx] == pytest.approx(costs.quick_overhead_s[Optimizer.onnx] / ratio)


def test_waiting_for_the_measurement_lock_is_not_a_combination_s_cost():
    """On a shared machine a measurement waits for others' work: the plan estimates a quiet machine."""
    results = [
        {
            "combo": {"hardware": "intel", "optimizer": "onnx", "batch_size": 1, "memory_mb": memory},
            "model": {"sha256": SHA},
            "run_id": "r",
            "measured_at": when.isoformat(),
            "lock_wait_s": wait,
            "artifact_key": "x",
            "latency_ms": {"p50": 1.0},
        }
        for memory, when, wait in ((1769, STARTED, 0.0), (3538, STARTED + timedelta(seconds=50), 40.0))
    ]
    assert learn_costs(results).overhead_s[Optimizer.onnx] == pytest.approx(10.0 - sampling_s(1.0))


def test_an_artifact_still_stored_is_not_converted_again():
    """`--force` measures again but the converter reuses a stored artifact: no conversion planned for it."""
    store = MemoryStore()
    request = _request()
    _store_run(store, request)
    before = plan_run(request, None, store, shapes=lambda batch: {})
    store.put_bytes(keys.manifest("onnx-b1"), b"{}")
    after = plan_run(request, None, store, shapes=lambda batch: {})
    assert before.exact_wall_s - after.exact_wall_s == pytest.approx(CONVERSION["onnx"])
    assert all(
        c.conversion_s == 0 for c in after.combos if c.combo.optimizer == Optimizer.onnx and c.combo.batch_size == 1
    )


def test_a_next_batch_size_is_charged_what_the_engines_next_conversions_took():
    """An engine's first artifact of a model makes what its next batch sizes start from (the ONNX
    export, onnx_int8's chosen recipe): its conversion is learned apart from theirs, and a plan
    charges the first batch size one and the others the other."""

    def converted(batch: int, seconds: float, minute: int) -> dict:
        return {
            "combo": {"hardware": "intel", "optimizer": "onnx", "batch_size": batch, "memory_mb": 1769},
            "model": {"sha256": SHA},
            "run_id": "run-1",
            "measured_at": (STARTED + timedelta(minutes=minute)).isoformat(),
            "conversion_s": seconds,
            "artifact_key": f"onnx-b{batch}",
            "latency_ms": {"p50": 2.0, "p99": 2.4},
        }

    costs = learn_costs([converted(4, 0.3, 2), converted(1, 6.4, 0), converted(2, 0.2, 1)])
    assert costs.conversion_s[Optimizer.onnx] == pytest.approx(6.4)
    assert costs.next_conversion_s[Optimizer.onnx] == pytest.approx(0.25)
    matrix = {"optimizers": {"intel": ["onnx"]}, "batch_sizes": [1, 8], "memory_sizes_mb": [1769]}
    plan = plan_run(_request(matrix=matrix), None, None, shapes=lambda batch: {})
    charged = sorted(c.conversion_s for c in plan.combos if c.state == "measure")
    assert charged == [IMAGE.next_conversion_s[Optimizer.onnx], IMAGE.conversion_s[Optimizer.onnx]]


def test_a_plan_learns_from_its_own_models_results_where_the_store_holds_enough():
    """A model's load, agreement and conversions are its own: a store holding the model's results
    and another's estimates its engines from its own; a model never measured, from all of them."""
    store = MemoryStore()
    _store_run(store, _request())  # this model: onnx overhead 5 s, conversion 12 s
    other = "b" * 64

    def slow(seconds: int, batch: int) -> dict:  # another model, measured 60 s apart, its conversions 40 s
        return {
            "combo": {"hardware": "intel", "optimizer": "onnx", "batch_size": batch, "memory_mb": 1769},
            "model": {"sha256": other},
            "run_id": "run-other",
            "measured_at": (STARTED + timedelta(hours=1, seconds=seconds)).isoformat(),
            "conversion_s": 40.0,
            "artifact_key": f"other-b{batch}",
            "latency_ms": {"p50": 2.0, "p99": 2.4},
        }

    for i in range(9):
        store.put_bytes(keys.result_version(f"other-{i}", "run-other"), json.dumps(slow(60 * i, 1 + i)).encode())
    own = stored_costs(store, SHA)
    assert own.overhead_s[Optimizer.onnx] == pytest.approx(OVERHEAD["onnx"])
    assert own.conversion_s[Optimizer.onnx] == CONVERSION["onnx"]
    anyone = stored_costs(store, "c" * 64)
    assert anyone.overhead_s[Optimizer.onnx] > 2 * OVERHEAD["onnx"]  # the other model's 60 s gaps weigh in
    assert anyone.conversion_s[Optimizer.onnx] == pytest.approx((CONVERSION["onnx"] + 40.0) / 2)


TRIALS = 64  # within TVM's tuning time limit at either workload's seconds per trial


def _tvm_plan(workload: str, store: MemoryStore | None = None, precision: str = "exact"):
    matrix = {"optimizers": {"intel": ["onnx", "tvm"]}, "batch_sizes": [1, 4], "memory_sizes_mb": [1024, 3538]}
    size = [16] if workload == "nlp" else [32, 32]
    model = {**_request().model.model_dump(mode="json"), "workload": workload, "input_size": size}
    request = _request(matrix=matrix, model=model, precision=precision, tuning_trials=TRIALS)
    return plan_run(request, None, store, shapes=lambda batch: {})


def test_with_nothing_stored_a_plan_charges_its_workloads_priors():
    """A convolutional network's TVM build and tuning trials took 4 and 2 times an encoder's, its race refined
    0.22 of its quick measurements against the encoder's 0.9: one figure for both missed each by 40 %."""
    nlp = PRIORS[Workload.nlp]
    assert IMAGE.trial_s > 1.5 * nlp.trial_s and IMAGE.conversion_s[Optimizer.tvm] > 3 * nlp.conversion_s[Optimizer.tvm]
    image_plan, nlp_plan = _tvm_plan("image_classification"), _tvm_plan("nlp")
    tvm_conversion = {
        name: sum(c.conversion_s for c in plan.combos if c.combo.optimizer == Optimizer.tvm)
        for name, plan in (("image", image_plan), ("nlp", nlp_plan))
    }
    trials = TRIALS
    assert tvm_conversion["image"] == pytest.approx(
        IMAGE.conversion_s[Optimizer.tvm] + IMAGE.next_conversion_s[Optimizer.tvm] + 2 * trials * IMAGE.trial_s
    )
    assert tvm_conversion["nlp"] == pytest.approx(
        nlp.conversion_s[Optimizer.tvm] + nlp.next_conversion_s[Optimizer.tvm] + 2 * trials * nlp.trial_s
    )
    assert image_plan.costs.refined_share == IMAGE.refined_share and nlp_plan.costs.refined_share == nlp.refined_share
    assert "all-MiniLM-L6-v2" in nlp_plan.as_dict()["estimates"]["from"]
    # a workload with no runs measured here: the mean of those measured
    custom = _tvm_plan("object_detection")
    assert custom.costs.priors is DEFAULT_PRIORS and priors_for("no such workload") is DEFAULT_PRIORS
    assert custom.costs.trial_s == pytest.approx((IMAGE.trial_s + nlp.trial_s) / 2)
    assert custom.as_dict()["estimates"]["from"].startswith("priors for a workload not measured here")


def test_another_workloads_results_do_not_replace_a_plans_priors():
    """An encoder's stored conversions and race say little of a convolutional network's: a plan learns from its
    own workload's results, and keeps its priors where there are none."""
    store = MemoryStore()
    _store_run(store, _request())  # an image model: onnx conversion 12 s, overhead 5 s
    _store_racing_run(store, "race-1", quick=30, refined=3, tvm={1: "skipped"})
    for key in store.list_keys(keys.results_prefix()):  # the stored model's results say it is an image model
        result = json.loads(store.get_bytes(key))
        result["model"]["workload"] = "image_classification"
        store.put_bytes(key, json.dumps(result).encode())
    other = "b" * 64
    image = stored_costs(store, other, "image_classification")
    assert image.conversion_s[Optimizer.onnx] == CONVERSION["onnx"]  # the same workload's model weighs in
    assert image.racing_runs == 1 and image.refined_share < IMAGE.refined_share
    nlp = stored_costs(store, other, "nlp")
    assert nlp.conversion_s == PRIORS[Workload.nlp].conversion_s and nlp.overhead_s == PRIORS[Workload.nlp].overhead_s
    assert nlp.racing_runs == 0 and nlp.refined_share == PRIORS[Workload.nlp].refined_share
    assert nlp.source().startswith("priors")


def test_a_run_says_the_plans_time_as_it_is_submitted():
    from ayci.cli.common import estimate_line
    from core.racing import duration_text

    store = MemoryStore()
    _store_run(store, _request())
    quick = plan_run(_request(precision="quick"), None, store, shapes=lambda batch: {})
    exact = plan_run(_request(), None, store, shapes=lambda batch: {})
    measured = quick.count("measure")
    about = {plan.precision: duration_text(plan.wall_s) for plan in (quick, exact)}
    assert quick.wall_s != exact.wall_s  # each line says its own plan's time
    assert estimate_line(quick).startswith(f"plan: about {about['quick']} to measure {measured} combinations (racing")
    assert estimate_line(exact).startswith(f"plan: about {about['exact']} to measure {measured} combinations (each to")
    assert estimate_line(dataclasses.replace(exact, combos=[])) is None  # nothing measured: nothing to say
