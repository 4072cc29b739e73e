"""Racing runs through every service on the embedded bus (fakes for the engines and the
measurement, as tests/unit/test_pipeline.py): the quick pass, the refinements, the dominated
combinations listed with their evidence, and the quick answer against the exact run's."""

from __future__ import annotations

import json

import pytest

from adapters.memory_store import MemoryStore
from core.plan_costs import PRIORS, sampling_s
from core.racing import answer_lines, time_left_s
from core.results import latest_result
from report.table import summary_rows
from schemas import keys
from schemas.combos import Matrix, Optimizer, Workload
from schemas.documents import RunSummary, SummaryResult
from schemas.events import STORED, Envelope, RequestSubmitted, RunPlanned
from services.archiver.racing import time_left
from services.request.submission import new_run
from tests.fakes import embedded_with_fakes
from tests.unit.test_pipeline import Fakes, stored_model

# p50 in ms at 1 vCPU of each optimizer: base is slower than onnx everywhere, int8 the fastest
SPEED = {"base": 40.0, "onnx": 12.0, "onnx_int8": 8.0}
FULL_CAP_S = 12.0


class RacingFakes(Fakes):
    """Figures that depend on the optimizer and the memory size; a quick pass (a shorter time cap)
    measures fewer samples: wider intervals and figures a few % off."""

    def __init__(self) -> None:
        super().__init__()
        self.caps: list[tuple[str, int, float]] = []
        self.quick_bias = 1.04
        self.crash_refinements = False
        self.converge_quick: set[tuple[str, int]] = set()  # (optimizer, memory): converges within the quick cap
        # (optimizer, memory): a slow, steady model: 10 quick samples of a 1 % CV, 40 in a full measurement
        self.settled_quick: set[tuple[str, int]] = set()

    def measure(self, spec, python_command) -> dict:
        quick = spec.time_cap_s < FULL_CAP_S
        self.crash = self.crash_refinements and not quick
        report = super().measure(spec, python_command)
        self.caps.append((spec.optimizer, spec.memory_mb, spec.time_cap_s))
        converges = not quick or (spec.optimizer, spec.memory_mb) in self.converge_quick
        p50 = SPEED[spec.optimizer] * 1769 / min(spec.memory_mb, 1769) * (1.0 if converges else self.quick_bias)
        samples, tail = (300, 0.05) if converges else (30, 0.25)
        settled = (spec.optimizer, spec.memory_mb) in self.settled_quick
        if settled:
            samples, tail = (10 if quick else 40), 0.01
        report["latency_ms"] |= {
            "p50": p50,
            "p90": p50 * 1.1,
            "p99": p50 * 1.2,
            "mean": p50,
            "ci95_low": p50 * 0.98,
            "ci95_high": p50 * 1.02,
            "p99_ci95_low": p50 * 1.2 * (1 - tail),
            "p99_ci95_high": p50 * 1.2 * (1 + tail),
            "cv": 0.01 if settled else 0.1,
            "iterations": samples,
            "converged": converges,  # 30 samples cannot (100 at least: measuring/measure.py)
            "billed_ms_mean": float(int(p50) + 1),
        }
        return report


@pytest.fixture
def fakes() -> RacingFakes:
    return RacingFakes()


@pytest.fixture
def app(tmp_path, fakes):
    return embedded_with_fakes(tmp_path, fakes, MemoryStore(), time_cap_s=FULL_CAP_S)


def submit(app, *, precision: str, optimizers=("base", "onnx", "onnx_int8"), memory=(1024, 1769), **extra) -> dict:
    matrix = Matrix(optimizers={"intel": list(optimizers)}, batch_sizes=[1], memory_sizes_mb=list(memory))
    extra = {"force": True, **extra}
    request = RequestSubmitted(model=stored_model(app), matrix=matrix, precision=precision, **extra)
    envelope = new_run(request)
    app.publisher.publish([envelope])
    app.bus.run_until_idle()
    return json.loads(app.store.get_bytes(keys.summary(envelope.run_id)))


PICKS = ("fastest", "cheapest", "balanced")


def label(row: dict) -> str:
    c = row["combo"]
    return f"{c['hardware']}/{c['optimizer']}/b{c['batch_size']}/{c['memory_mb']}MB"


def test_a_quick_run_measures_every_combination_briefly_and_only_contenders_fully(app, fakes):
    summary = submit(app, precision="quick")
    quick = [(o, m) for o, m, cap in fakes.caps if cap < FULL_CAP_S]
    full = [(o, m) for o, m, cap in fakes.caps if cap == FULL_CAP_S]
    assert len(quick) == 6 and all(cap == FULL_CAP_S / 4 for *_, cap in fakes.caps if cap < FULL_CAP_S)
    assert ("base", 1024) not in full and ("base", 1769) not in full  # base is beaten everywhere: never refined
    assert ("onnx_int8", 1769) in full
    rows = {r["combo"]["optimizer"] + f"/{r['combo']['memory_mb']}": r for r in summary["results"]}
    assert len(rows) == 6 and not summary["failures"]  # none dropped
    assert rows["base/1024"].get("precision") == "quick" and rows["onnx_int8/1769"].get("precision") is None
    racing = json.loads(app.store.get_bytes(keys.racing(summary["run_id"])))
    assert set(racing["refine"]) == {rows[k]["combo_key"] for k, r in rows.items() if r.get("precision") != "quick"}


def test_a_dominated_combination_is_listed_with_its_evidence(app, fakes):
    summary = submit(app, precision="quick")
    base = next(r for r in summary["results"] if label(r) == "intel/base/b1/1769MB")
    by = base["dominated_by"]
    assert by.startswith("intel/onnx")
    evidence = base["evidence"]
    assert evidence["by_p99"][1] < evidence["p99"][0] and evidence["by_cost"][1] < evidence["cost"][0]
    assert evidence["p99_ms"] == pytest.approx(base["latency_ms"]["p99"])  # its rough figures
    reason = summary["recommendation"]["excluded"]["intel/base/b1/1769MB"]
    assert reason.startswith(f"dominated by {by} (quick pass, 95 %): p99 ")
    assert "intel/base/b1/1769MB" not in summary["recommendation"]["candidates"]
    # a quick result is never the one a later run reuses
    assert latest_result(app.store, base["combo_key"]) is None


def test_the_quick_answer_picks_what_the_exact_run_picks_with_margins(app, fakes):
    quick = submit(app, precision="quick")
    exact = submit(app, precision="exact")
    assert all(cap == FULL_CAP_S for *_, cap in fakes.caps[-6:])  # the exact run: everything to full precision
    for kind in PICKS:
        assert quick["recommendation"][kind] == exact["recommendation"][kind]
    # the balanced score spans what the race stopped, as the exact run's spans everything it measured
    # (its quick figures 4 % off): the same scale, whatever the race stopped
    stopped = {label(r) for r in quick["results"] if r.get("dominated_by")}
    assert stopped and not stopped & set(quick["recommendation"]["candidates"])
    for name, candidate in quick["recommendation"]["candidates"].items():
        expected = exact["recommendation"]["candidates"][name]["balance_score"]
        assert candidate["balance_score"] == pytest.approx(expected, rel=0.06, abs=1e-3), name
    margins = quick["recommendation"]["margins"]
    assert margins["cheapest"].startswith(f"cheapest: {quick['recommendation']['cheapest']}; the next, ")
    assert " % ± " in margins["cheapest"] and margins["cheapest"].endswith("% more")


def test_a_refinement_replaces_the_quick_result_and_is_the_one_later_runs_reuse(app, fakes):
    summary = submit(app, precision="quick")
    row = next(r for r in summary["results"] if label(r) == "intel/onnx_int8/b1/1769MB")
    assert row.get("precision") is None and row["latency_ms"]["iterations"] == 300
    stored = latest_result(app.store, row["combo_key"])
    assert stored is not None and stored.version == keys.result_version(row["combo_key"], summary["run_id"])
    quick_version = keys.result_version(row["combo_key"], f"{summary['run_id']}.quick")
    assert json.loads(app.store.get_bytes(quick_version))["precision"] == "quick"


def test_a_quick_measurement_that_converged_is_a_full_one_never_measured_again(app, fakes):
    fakes.converge_quick = {("onnx_int8", 1769)}  # a fast model: its samples meet full precision's rule early
    summary = submit(app, precision="quick")
    assert [cap for o, m, cap in fakes.caps if (o, m) == ("onnx_int8", 1769)] == [FULL_CAP_S / 4]  # measured once
    row = next(r for r in summary["results"] if label(r) == "intel/onnx_int8/b1/1769MB")
    assert row.get("precision") is None and row["latency_ms"]["converged"]
    racing = json.loads(app.store.get_bytes(keys.racing(summary["run_id"])))
    assert row["combo_key"] not in racing["refine"]
    assert set(racing["refine"])  # the contenders that did not converge are still refined
    stored = latest_result(app.store, row["combo_key"])  # a later run reuses it
    assert stored is not None and stored.version == keys.result_version(row["combo_key"], summary["run_id"])
    assert "intel/onnx_int8/b1/1769MB" in summary["recommendation"]["candidates"]
    final = json.loads(app.store.get_bytes(keys.answer(summary["run_id"])))
    assert final["rows"]["intel/onnx_int8/b1/1769MB"]["precision"] == "exact"


def test_a_contender_a_full_measurement_would_not_sharpen_keeps_its_quick_figures_with_the_reason(app, fakes):
    """10 quick samples of a 1 % CV: 40 in a full measurement would still be too few for a p99 of its own, and
    the cost's interval is the run-to-run slack already: measuring it again narrows nothing the race compares."""
    fakes.settled_quick = {("onnx_int8", 1769)}
    summary = submit(app, precision="quick")
    assert [cap for o, m, cap in fakes.caps if (o, m) == ("onnx_int8", 1769)] == [FULL_CAP_S / 4]  # measured once
    row = next(r for r in summary["results"] if label(r) == "intel/onnx_int8/b1/1769MB")
    assert row["precision"] == "quick" and row["kept_quick"].startswith("quick figures kept")
    assert "intel/onnx_int8/b1/1769MB" in summary["recommendation"]["candidates"]  # still a candidate, not stopped
    racing = json.loads(app.store.get_bytes(keys.racing(summary["run_id"])))
    assert row["combo_key"] not in racing["refine"] and racing["kept"]["intel/onnx_int8/b1/1769MB"] == row["kept_quick"]
    assert set(racing["refine"])  # the other contenders are still refined
    table = {r.combination: r for r in summary_rows(RunSummary.model_validate(summary))}
    assert row["kept_quick"] in table["intel/onnx_int8/b1/1769MB"].note


def test_the_running_answer_is_there_after_the_first_pass_and_final_at_the_end(app, fakes):
    seen: list[dict] = []

    def observe(queue: str, event: Envelope) -> None:
        if event.type == "ModelConverted" and event.payload.refine:
            seen.append(json.loads(app.store.get_bytes(keys.answer(event.run_id))))

    app.bus.observers.append(observe)
    summary = submit(app, precision="quick")
    first = seen[0]
    assert first["stage"] in ("quick", "refining") and first["picks"]["cheapest"]
    assert first["dominated"] and first["refining"]
    assert answer_lines(first)[0].startswith(("first answer", "refining"))
    # once decided, the time left: each refinement's overhead and the sampling its own quick p50 needs
    priors = PRIORS[Workload.image_classification]  # the stored model's workload
    assert set(first["refine_s"]) == set(first["refining"]) and first["checks_s"] == 0  # nothing predicted
    quick_p50 = SPEED["onnx_int8"] * fakes.quick_bias
    assert first["refine_s"]["intel/onnx_int8/b1/1769MB"] == pytest.approx(
        priors.overhead_s[Optimizer.onnx_int8] + sampling_s(quick_p50), abs=0.1
    )
    lefts = [time_left_s(doc) for doc in seen]
    assert lefts[0] == pytest.approx(sum(first["refine_s"].values()))
    assert all(a > b for a, b in zip(lefts, lefts[1:], strict=False)) and len(lefts) == len(first["refining"])
    assert f"about {lefts[0]:.0f} s to go" in answer_lines(first)[0]
    final = json.loads(app.store.get_bytes(keys.answer(summary["run_id"])))
    assert final["stage"] == "final" and final["refining"] == []
    assert final["picks"] == {k: summary["recommendation"][k] for k in PICKS}


def test_every_event_delivered_twice_races_once(app, fakes):
    matrix = Matrix(optimizers={"intel": ["base", "onnx_int8"]}, batch_sizes=[1], memory_sizes_mb=[1769])
    request = RequestSubmitted(model=stored_model(app), matrix=matrix, precision="quick", force=True)
    envelope = new_run(request)
    app.publisher.publish([envelope, envelope])
    app.bus.run_until_idle()
    summary = json.loads(app.store.get_bytes(keys.summary(envelope.run_id)))
    assert summary["status"] == "complete" and len(summary["results"]) == 2
    assert sum(1 for _, _, cap in fakes.caps if cap == FULL_CAP_S) == 1  # onnx_int8 refined once


def test_a_resubmitted_quick_run_reuses_quick_passes_and_an_exact_run_never_does(app, fakes):
    first = submit(app, precision="quick")
    measured = len(fakes.caps)
    again = submit(app, precision="quick", force=False)
    assert len(fakes.caps) == measured  # nothing measured twice
    assert all(r["reused"] for r in again["results"])
    for kind in PICKS:
        assert again["recommendation"][kind] == first["recommendation"][kind]
    assert "intel/base/b1/1769MB" in again["recommendation"]["excluded"]  # still dominated, with its evidence
    exact = submit(app, precision="exact", force=False)
    remeasured = {(o, m) for o, m, cap in fakes.caps[measured:]}
    assert {("base", 1024), ("base", 1769)} <= remeasured  # only quick figures were stored for these
    assert all(cap == FULL_CAP_S for *_, cap in fakes.caps[measured:])
    assert not any(r.get("precision") == "quick" for r in exact["results"])


def test_a_refinement_that_dies_ends_and_the_quick_figures_stand(app, fakes):
    fakes.crash_refinements = True
    summary = submit(app, precision="quick")
    assert summary["status"] == "complete" and not summary["failures"]
    assert all(r.get("precision") == "quick" for r in summary["results"])  # measured once each, quickly
    assert summary["recommendation"]["cheapest"]
    assert {q for q, _, _ in app.bus.dead_letters} == {"inference-intel"}


def test_with_predict_families_race_and_a_checked_pick_is_measured_in_full(app, fakes, monkeypatch):
    # base 10 times int8's time: a predicted size's cost interval (from quick anchors, widened for run-to-run
    # noise) spans 0.3-1.8 times its figure, and a family stops only when every size of it is dominated
    monkeypatch.setitem(SPEED, "base", 80.0)
    decided: list[dict] = []

    def observe(queue: str, event: Envelope) -> None:
        if event.type == "ModelConverted" and event.payload.refine and not decided:
            decided.append(json.loads(app.store.get_bytes(keys.answer(event.run_id))))

    app.bus.observers.append(observe)
    summary = submit(
        app, precision="quick", optimizers=("base", "onnx_int8"), memory=(512, 1024, 1769, 2048, 3538), predict=True
    )
    # the time left counts the predicted picks' checks (a full measurement each) beside the refinements
    predicted_picks = {p for p in decided[0]["picks"].values() if p and decided[0]["rows"][p]["predicted"]}
    assert (decided[0]["checks_s"] > 0) == bool(predicted_picks)
    # a predicted pick is charged a full measurement at its family's nearest measured size's latency
    plan = RunPlanned.model_validate_json(app.store.get_bytes(keys.plan(summary["run_id"])), context=STORED)
    measured = [SummaryResult.of(r) for r in summary["results"] if not r.get("predicted")]
    pick = next(c for c in plan.predicted.values() if c.optimizer == Optimizer.onnx_int8 and c.memory_mb == 2048)
    left = time_left(plan, measured, [], {"picks": {"cheapest": pick.label}})
    nearest = next(r for r in measured if r.label == "intel/onnx_int8/b1/1769MB").latency_ms.p50
    priors = PRIORS[Workload.image_classification]
    assert left == {
        "refine_s": {},
        "checks_s": pytest.approx(priors.overhead_s[pick.optimizer] + sampling_s(nearest), abs=0.1),
    }
    assert time_left_s(decided[0]) == pytest.approx(sum(decided[0]["refine_s"].values()) + decided[0]["checks_s"])
    assert summary["status"] in ("complete", "partial")
    base = [r for r in summary["results"] if r["combo"]["optimizer"] == "base" and not r.get("predicted")]
    assert base and all(r.get("dominated_by") for r in base)  # the whole family stopped, each with its evidence
    int8 = [r for r in summary["results"] if r["combo"]["optimizer"] == "onnx_int8" and not r.get("predicted")]
    assert int8 and all(r.get("precision") is None for r in int8)  # its anchors refined
    for check in summary["recommendation"].get("checks") or []:
        memory = int(check["combination"].split("/")[-1][:-2])
        caps = [cap for o, m, cap in fakes.caps if (o, m) == ("onnx_int8", memory)]
        assert caps == [FULL_CAP_S]  # a predicted pick's check is a full measurement, never a quick one
