"""The recommendation: fastest, cheapest, balanced, the Pareto front, and who is excluded why."""

import pytest

from report.recommendation import balance_scores, pareto_front, recommend


def result(optimizer, memory, p99, cost, agreement=1.0, emulated=False, hardware="intel", disturbed=False):
    return {
        "combo": {"hardware": hardware, "optimizer": optimizer, "batch_size": 1, "memory_mb": memory},
        "latency_ms": {"p50": p99 * 0.8, "p90": p99 * 0.9, "p99": p99},
        "agreement": {"metric": "top1", "score": agreement},
        "cost": None if cost is None else {"per_million_inferences_usd": cost},
        "emulated": emulated,
        "load": {"disturbed": disturbed},
    }


RESULTS = [
    result("base", 1769, p99=40, cost=1.5),
    result("onnx", 1769, p99=20, cost=0.8),  # beats base on both
    result("onnx", 3538, p99=11, cost=1.0),  # faster, dearer
    result("onnx", 885, p99=60, cost=0.7),  # slower, cheaper
    result("tvm", 1769, p99=5, cost=0.1, agreement=0.5),  # best on both, but wrong answers
    result("onnx", 1769, p99=1, cost=0.01, emulated=True, hardware="arm"),  # emulated: not real
]


def test_fastest_cheapest_balanced_and_pareto():
    rec = recommend(RESULTS, slo_p99_ms=None, min_agreement=0.99, balance_weight=0.5)
    assert rec.fastest == "intel/onnx/b1/3538MB"
    assert rec.cheapest == "intel/onnx/b1/885MB"
    # normalised over the candidates: 1769 MB is (0.18 p99, 0.125 cost): the most balanced
    assert rec.balanced == "intel/onnx/b1/1769MB"
    assert rec.pareto == ["intel/onnx/b1/3538MB", "intel/onnx/b1/1769MB", "intel/onnx/b1/885MB"]
    assert set(rec.candidates) == {
        "intel/base/b1/1769MB",
        "intel/onnx/b1/1769MB",
        "intel/onnx/b1/3538MB",
        "intel/onnx/b1/885MB",
    }


def test_excluded_say_why():
    rec = recommend(RESULTS, slo_p99_ms=None, min_agreement=0.99)
    assert "below the threshold 0.99" in rec.excluded["intel/tvm/b1/1769MB"]
    assert "emulation" in rec.excluded["arm/onnx/b1/1769MB"]
    assert len(rec.excluded) == 2


def test_balance_weight_moves_the_balanced_pick():
    assert recommend(RESULTS, slo_p99_ms=None, min_agreement=0.99, balance_weight=1.0).balanced == "intel/onnx/b1/885MB"
    assert (
        recommend(RESULTS, slo_p99_ms=None, min_agreement=0.99, balance_weight=0.0).balanced == "intel/onnx/b1/3538MB"
    )


def test_slo_excludes_the_slow_ones():
    rec = recommend(RESULTS, slo_p99_ms=25, min_agreement=0.99)
    assert rec.cheapest == "intel/onnx/b1/1769MB"
    assert "above the SLO of 25 ms" in rec.excluded["intel/onnx/b1/885MB"]
    assert "above the SLO" in rec.excluded["intel/base/b1/1769MB"]


def test_lower_agreement_threshold_admits_more():
    rec = recommend(RESULTS, slo_p99_ms=None, min_agreement=0.4)
    assert rec.fastest == rec.cheapest == rec.balanced == "intel/tvm/b1/1769MB"
    assert rec.pareto == ["intel/tvm/b1/1769MB"]


def test_nothing_qualifies():
    rec = recommend(RESULTS, slo_p99_ms=0.5, min_agreement=0.99)
    assert rec.fastest is rec.cheapest is rec.balanced is None
    assert rec.pareto == [] and len(rec.excluded) == len(RESULTS)


def test_a_result_without_cost_is_not_recommended():
    rec = recommend([result("onnx", 1769, p99=10, cost=None)], slo_p99_ms=None, min_agreement=0.99)
    assert rec.fastest is None and "no cost" in rec.excluded["intel/onnx/b1/1769MB"]


def test_disturbed_measurements_are_listed_and_never_recommended():
    rec = recommend(
        [result("onnx", 1769, p99=10, cost=1, disturbed=True), result("base", 1769, p99=20, cost=2)],
        slo_p99_ms=None,
        min_agreement=0.99,
    )
    assert rec.disturbed == ["intel/onnx/b1/1769MB"] and rec.fastest == "intel/base/b1/1769MB"
    assert (
        rec.excluded["intel/onnx/b1/1769MB"] == "disturbed: other work took cores the measurement needed; measure again"
    )


def test_host_limited_and_unconfined_sizes_are_never_recommended():
    """10240 MB is 5.8 vCPUs on Lambda: on a 2-core host it is measured with 2, so it is
    neither the fastest nor the cheapest, whatever its numbers."""
    limited = result("onnx", 10240, p99=1, cost=0.01) | {"host_limited": True, "vcpus": 5.79, "vcpus_available": 2}
    unconfined = result("onnx", 3538, p99=2, cost=0.02) | {"confined": False, "confinement_reason": "no cgroup v2 here"}
    rec = recommend([limited, unconfined, result("onnx", 1769, p99=10, cost=1)], slo_p99_ms=None, min_agreement=0.99)
    assert rec.fastest == rec.cheapest == rec.balanced == "intel/onnx/b1/1769MB"
    assert "host-limited: Lambda gives 10240 MB 5.8 vCPUs, this host has 2" in rec.excluded["intel/onnx/b1/10240MB"]
    assert rec.excluded["intel/onnx/b1/3538MB"] == "unconfined: not measured as Lambda would run it (no cgroup v2 here)"


def test_balance_scores_are_normalised():
    scores = balance_scores({"a": 10, "b": 20, "c": 30}, {"a": 3.0, "b": 2.0, "c": 1.0}, 0.5)
    assert scores == pytest.approx({"a": 0.5, "b": 0.5, "c": 0.5})
    assert balance_scores({"a": 1}, {"a": 1}, 0.3) == {"a": 0.0}


def test_pareto_keeps_ties_and_drops_the_dominated():
    assert pareto_front({"a": 1, "b": 1, "c": 2}, {"a": 1, "b": 1, "c": 2}) == ["a", "b"]


def test_rows_that_are_not_candidates_can_span_the_balanced_scale():
    """A racing run's dominated rows are not candidates, but an exact run would have normalised its
    balanced score over them: `scale` widens the range, and the pick follows."""
    p99, cost = {"a": 10.0, "b": 30.0, "c": 20.0}, {"a": 1.3, "b": 1.1, "c": 1.25}
    alone = balance_scores(p99, cost, 0.5)
    spanned = balance_scores(p99, cost, 0.5, scale=([500.0], [2.4]))
    assert alone["a"] == alone["b"] == 0.5
    assert min(spanned, key=spanned.get) == "b" and spanned["b"] < spanned["a"] < alone["a"]


def test_a_racing_runs_picks_are_printed_once_each_with_its_margin():
    import json
    from pathlib import Path

    from report.terminal import recommendation_lines

    stored = json.loads((Path(__file__).parent / "fixtures" / "summary_v1_predicted.json").read_text())
    fastest = stored["recommendation"]["fastest"]
    plain = [line.plain for line in recommendation_lines(stored)]
    assert f"fastest: {fastest}" in plain  # an exact run: the pick alone
    margin = f"fastest: {fastest}; the next, intel/onnx/b1/512MB, has a p99 12 % ± 3 % higher"
    stored["recommendation"]["margins"] = {"fastest": margin}
    raced = [line.plain for line in recommendation_lines(stored)]
    assert margin in raced and sum(line.startswith("fastest: ") for line in raced) == 1
    assert raced[1:] == plain[1:]  # the other lines as they were
