"""The traffic simulation: its cold-start share against the closed form for steady Poisson
traffic, bursts, arrival files, bounds and bad input."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from core.lambda_model.arrivals import Traffic, TrafficError, arrivals, parse_duration
from core.lambda_model.traffic import (
    MIN_SIMULATION_EVENTS,
    SIMULATIONS_PER_ROW,
    Budget,
    Scaling,
    combination_under_traffic,
    draw_latencies,
    pickable,
    simulate,
    traffic_report,
)
from schemas.documents import SummaryResult

WARM = [(0.0, 9.0), (0.5, 10.0), (0.9, 11.0), (0.99, 13.0), (1.0, 15.0)]


def test_cold_share_of_steady_poisson_traffic_matches_the_closed_form():
    """Requests far apart (rate x latency << 1) keep one instance: a request is cold exactly
    when the gap since the previous one passed the idle timeout: P = exp(-rate x timeout)."""
    rate, timeout = 0.02, 60.0
    rng = np.random.default_rng(1)
    times = np.cumsum(rng.exponential(1 / rate, 100_000))
    pool = simulate(times, WARM, 500.0, timeout, rng, float(times[-1]))
    assert pool.cold_share == pytest.approx(math.exp(-rate * timeout), abs=0.01)
    assert pool.peak_instances <= 3  # two requests within one cold start are rare, not impossible


def test_bursts_need_more_instances_and_more_cold_starts_than_steady_traffic():
    steady = combination_under_traffic(typed(), Traffic(rps=2, pattern="steady", idle_timeout_s=600, duration_s=3600))
    spiky = combination_under_traffic(typed(), Traffic(rps=2, pattern="spiky", idle_timeout_s=600, duration_s=3600))
    assert spiky["peak_instances"] > steady["peak_instances"] and spiky["requests"] > steady["requests"]
    assert steady["p50_ms"] == pytest.approx(10.0, rel=0.1) and steady["p999_ms"] >= steady["p99_ms"]
    assert steady["bill_usd"] > 0 and steady["cold_share"] < 0.01


def test_a_capped_pool_queues_instead_of_starting_instances():
    """A burst of 50 simultaneous requests: unbounded, 50 cold starts; capped at 2 instances,
    2 cold starts and the rest wait their turn, the last for about 24 warm latencies after a cold start."""
    times = np.zeros(50)
    free = simulate(times, WARM, 500.0, 600, np.random.default_rng(0), 1.0)
    capped = simulate(times, WARM, 500.0, 600, np.random.default_rng(0), 1.0, max_instances=2)
    assert free.cold_starts == free.peak_instances == 50
    assert capped.cold_starts == capped.peak_instances == 2
    assert capped.latencies_ms.max() > 500 + 20 * 9 and capped.latencies_ms.max() < 600 + 25 * 15
    assert capped.instance_seconds < free.instance_seconds


def test_an_arrival_file_of_times_or_per_minute_counts(tmp_path):
    times = tmp_path / "times.csv"
    times.write_text("seconds\n0\n0.5\n700\n")
    out, window, cut = arrivals(Traffic(rps=1, pattern=str(times)), np.random.default_rng(0))
    assert list(out) == [0.0, 0.5, 700.0] and not cut
    counts = tmp_path / "counts.csv"
    counts.write_text("minute,count\n0,3\n2,1\n")
    out, _, _ = arrivals(Traffic(rps=1, pattern=str(counts)), np.random.default_rng(0))
    assert len(out) == 4 and out[-1] == pytest.approx(150.0 - 10.0)
    unsorted = tmp_path / "unsorted.csv"
    unsorted.write_text("5\n3\n")
    with pytest.raises(TrafficError, match="sorted"):
        arrivals(Traffic(rps=1, pattern=str(unsorted)), np.random.default_rng(0))
    words = tmp_path / "words.csv"
    words.write_text("1\nsoon\n")
    with pytest.raises(TrafficError, match="not a number"):
        arrivals(Traffic(rps=1, pattern=str(words)), np.random.default_rng(0))


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"rps": -1}, "rps"),
        ({"rps": float("inf")}, "rps"),
        ({"rps": 1e9}, "rps"),
        ({"rps": 1, "idle_timeout_s": 0}, "idle_timeout"),
        ({"rps": 1, "duration_s": 1}, "duration"),
        ({"rps": 1, "pattern": "wavy"}, "pattern"),
    ],
)
def test_bad_traffic_is_refused_naming_the_field(kwargs, field):
    with pytest.raises(TrafficError, match=field):
        Traffic(**kwargs)


def test_durations_and_a_run_with_nothing_to_simulate():
    assert [parse_duration(t, "d") for t in ("90", "10m", "2h", "30d")] == [90, 600, 7200, 30 * 86400]
    with pytest.raises(TrafficError, match="idle-timeout"):
        parse_duration("soon", "idle-timeout")
    with pytest.raises(TrafficError, match="nothing to simulate"):
        traffic_report({"results": [result(emulated=True)]}, Traffic(rps=1))


def test_the_pick_is_the_cheapest_meeting_the_slo_with_cold_starts_counted():
    small, large = result(memory_mb=512, p50=30.0, cold=3000.0), result(memory_mb=1769, p50=10.0, cold=800.0)
    report = traffic_report(
        {"results": [small, large]}, Traffic(rps=0.05, idle_timeout_s=60, duration_s=86400), slo_p99_ms=1500
    )
    by_name = {r["combination"]: r for r in report["rows"]}
    assert by_name["intel/onnx/b1/512MB"]["p99_ms"] > 1500  # its cold starts break the SLO
    assert report["recommended"] == "intel/onnx/b1/1769MB (on demand)"
    # a tight SLO no cold start meets: provisioned concurrency is the cheapest way, and it is priced
    tight = traffic_report(
        {"results": [small, large]}, Traffic(rps=0.05, idle_timeout_s=60, duration_s=86400), slo_p99_ms=60
    )
    assert tight["recommended"] == "intel/onnx/b1/512MB (provisioned 1)"
    options = {o["option"]: o for o in {r["combination"]: r for r in tight["rows"]}["intel/onnx/b1/512MB"]["options"]}
    assert (
        options["provisioned 1"]["bill_usd"] > options["on demand"]["bill_usd"]
        and options["provisioned 1"]["cold_share"] < 0.01
    )
    assert "assumed" in options["SnapStart (estimate)"]["assumption"]


MODEL = {"sha256": "a" * 64, "size_bytes": 2**20, "format": "onnx", "workload": "image_classification"}


def typed(*args, **kwargs) -> SummaryResult:
    """`result` as a summary's typed row (what `combination_under_traffic` takes)."""
    return SummaryResult.model_validate(result(*args, **kwargs))


def result(
    memory_mb: int = 1769, p50: float = 10.0, cold: float = 500.0, optimizer: str = "onnx", model=MODEL, **extra
) -> dict:
    return {
        "combo": {"hardware": "intel", "optimizer": optimizer, "batch_size": 1, "memory_mb": memory_mb},
        **({"model": {"input_size": [32, 32], **model}} if model else {}),
        "latency_ms": {"p50": p50, "p90": p50 * 1.1, "p99": p50 * 1.3, "min": p50 * 0.9, "max": p50 * 1.5},
        "cold_start_ms": {"total": cold, "first_inference": p50 * 2},
        "confined": True,
        **extra,
    }


def test_spiky_traffic_at_the_highest_rate_stays_within_the_budget_and_says_it_was_thinned():
    """100,000 req/s with bursts for 30 days: 3.8e11 requests; the request simulates at most its
    budget of arrivals, every row together, in seconds, and scales the counts back."""
    budget = Budget(events=200_000)
    started = time.perf_counter()
    rows = [result(memory_mb=m) for m in (1024, 1769, 3008)]
    traffic = Traffic(rps=100_000, pattern="spiky", concurrency_limit=1_000_000)
    report = traffic_report({"results": rows}, traffic, budget=budget)
    assert time.perf_counter() - started < 15
    assert 0 < report["simulated_events"] <= budget.events and report["thinned"]
    for row in report["rows"]:
        assert row["thinned"] and any("thinned" in note for note in row["notes"])
        # scaled back: the month's requests (bursts add 45 %), not the simulated handful
        assert row["requests"] == pytest.approx(100_000 * 1.45 * 30 * 86400, rel=0.05)
        assert row["simulated_requests"] < budget.events and row["peak_instances"] > 1000


def test_the_account_s_default_limit_throttles_the_heaviest_traffic_as_the_fluid_model_says():
    """100,000 req/s of ~10.5 ms requests need ~1,050 in flight: the default limit of 1,000 (from the
    data file) throttles ~5 % of steady traffic; with 10x bursts for 30 s in 10 minutes, ~90 % of the
    bursts' requests too: ~35 % in all. Nothing throttling that much is picked."""
    steady = traffic_report({"results": [result()]}, Traffic(rps=100_000), budget=Budget(events=200_000))
    assert steady["traffic"]["concurrency_limit"] == 1000 and "default" in steady["traffic"]["concurrency_limit_source"]
    assert steady["rows"][0]["throttled_share"] == pytest.approx(1 - 1000 / (100_000 * 0.0106), abs=0.02)
    assert steady["throttled"] and steady["recommended"] is None
    spiky = traffic_report(
        {"results": [result()]}, Traffic(rps=100_000, pattern="spiky"), budget=Budget(events=200_000)
    )
    assert spiky["rows"][0]["throttled_share"] == pytest.approx(0.35, abs=0.05)
    assert spiky["rows"][0]["peak_instances"] <= 1000
    assert any("throttled" in note for note in spiky["rows"][0]["notes"])


def test_one_budget_for_all_rows_leaves_out_what_it_cannot_hold():
    many = [result(memory_mb=128 + 64 * i) for i in range(30)]
    report = traffic_report({"results": many}, Traffic(rps=1000), budget=Budget(events=100_000))
    assert report["simulated_events"] <= 100_000
    assert len(report["rows"]) == 100_000 // (SIMULATIONS_PER_ROW * MIN_SIMULATION_EVENTS) and report["left_out"] == 25


def test_a_low_rate_is_not_thinned_and_the_budget_does_not_change_it():
    traffic = Traffic(rps=0.01, pattern="spiky", idle_timeout_s=600, duration_s=30 * 86400)
    small = traffic_report({"results": [result()]}, traffic, budget=Budget(events=200_000))
    large = traffic_report({"results": [result()]}, traffic, budget=Budget(events=4_000_000))
    assert not small["thinned"] and small["rows"] == large["rows"]
    assert small["rows"][0]["requests"] == small["rows"][0]["simulated_requests"]


def erlang_b(servers: int, load: float) -> float:
    blocked = 1.0
    for n in range(1, servers + 1):
        blocked = load * blocked / (n + load * blocked)
    return blocked


def test_the_concurrency_limit_throttles_poisson_traffic_as_erlang_s_loss_formula_says():
    """Poisson arrivals at 1,000 req/s of ~10 ms each offer 10.3 requests in flight; a limit of 8 loses
    what Erlang B(8, A) says (whatever the latency's distribution); a throttled request is not answered."""
    rng = np.random.default_rng(3)
    times = np.cumsum(rng.exponential(1 / 1000, 200_000))
    scaling = Scaling(limit=8, per_s=100.0, burst=1000.0)
    pool = simulate(times, WARM, 10.0, 600, rng, float(times[-1]), scaling=scaling)
    mean_ms = np.mean(draw_latencies(WARM, np.random.default_rng(0), 100_000))
    assert pool.throttled_share == pytest.approx(erlang_b(8, 1000 * mean_ms / 1000), abs=0.01)
    assert len(pool.latencies_ms) == pool.requests - pool.throttled and pool.peak_instances == 8
    unlimited = simulate(times, WARM, 10.0, 600, np.random.default_rng(3), float(times[-1]))
    assert unlimited.throttled == 0 and unlimited.peak_instances > 8


def test_the_scaling_rate_starts_1000_environments_at_once_then_100_a_second():
    """3,000 requests in the first second, each holding its instance 5 s: the bucket's 1,000 start at
    once, ~100 more within the second (refilled continuously); the rest are throttled (limit 10,000)."""
    times = np.linspace(0, 1, 3000)
    pool = simulate(times, WARM, 5000.0, 600, np.random.default_rng(0), 60.0, scaling=Scaling(10_000, 100.0, 1000.0))
    assert pool.cold_starts == pytest.approx(1100, abs=5) and pool.throttled == 3000 - pool.cold_starts


def test_a_way_of_serving_throttling_beyond_one_percent_is_never_picked():
    assert pickable({"throttled_share": 0.0, "p99_ms": 50.0, "p99_counting_throttled_ms": 50.0}, None)
    assert not pickable({"throttled_share": 0.02, "p99_ms": 5.0, "p99_counting_throttled_ms": None}, None)
    # within 1 %, the p99 judged counts the throttled requests as the slowest
    assert not pickable({"throttled_share": 0.005, "p99_ms": 40.0, "p99_counting_throttled_ms": 70.0}, 60)
    # a limit of 1 for 2 req/s of 10 ms requests throttles ~2 %: the cheapest is then a larger limit's row
    tiny = Traffic(rps=2, duration_s=6 * 3600, concurrency_limit=1)  # 43,200 requests: not thinned
    report = traffic_report({"results": [result()]}, tiny)
    assert (
        0.01 < report["rows"][0]["throttled_share"] < 0.05 and report["traffic"]["concurrency_limit_source"] == "given"
    )
    assert report["recommended"] is None and "1%" in report["pick_rule"]


def test_snapstart_bills_the_restore_fee_the_billed_restore_and_three_hours_of_cache():
    """The snapshot's restore adds latency but is not billed: a slower restore leaves the bill as it
    was; the cache is billed for 3 hours even for a 2-hour duration; the fee per GB per restore."""
    from schemas.cost import load_prices
    from schemas.lambda_billing import load_billing

    traffic = Traffic(rps=0.003, idle_timeout_s=60, duration_s=7200)
    fast = combination_under_traffic(typed(), traffic, snapstart_restore_ms=100)
    slow = combination_under_traffic(typed(), traffic, snapstart_restore_ms=4000)
    fast_ss, slow_ss = (next(o for o in r["options"] if o["option"].startswith("SnapStart")) for r in (fast, slow))
    assert slow_ss["p99_ms"] > fast_ss["p99_ms"] + 3000
    assert slow_ss["restores"] == fast_ss["restores"]
    assert slow_ss["bill_usd"] == pytest.approx(fast_ss["bill_usd"], rel=1e-4)
    east, billing = load_prices().region("us-east-1"), load_billing()
    cache = 1769 / 1024 * 3 * 3600 * east.snapstart_cache_per_gb_second_usd
    restores = fast_ss["restores"] * 1769 / 1024 * east.snapstart_restore_per_gb_usd
    assert fast_ss["restores"] >= 1 and fast_ss["bill_usd"] > cache + restores
    billed_restore = billing.snapstart_billed_restore_ms
    assert f"billed restore {billed_restore:g} ms" in fast_ss["assumption"] and "not billed" in fast_ss["assumption"]


def test_snapstart_is_priced_only_where_the_combination_may_use_it():
    torch = combination_under_traffic(typed(optimizer="base", model={**MODEL, "format": "pt2"}), Traffic(rps=0.01))
    assert not any(o["option"].startswith("SnapStart") for o in torch["options"])
    assert any("no SnapStart" in n and "container image" in n for n in torch["notes"])
    unknown = combination_under_traffic(typed(model=None), Traffic(rps=0.01))
    assert not any(o["option"].startswith("SnapStart") for o in unknown["options"])
    assert any("eligibility is unknown" in n for n in unknown["notes"])


def test_provisioned_concurrency_is_billed_in_five_minute_steps():
    """Kept 1 h 0 min 1 s: billed 1 h 5 min; the difference is exactly 5 minutes of one instance."""
    from schemas.cost import load_prices

    price = load_prices().region("us-east-1").provisioned_x86_64_per_gb_second_usd
    bills = []
    for duration in (3600, 3601):
        row = combination_under_traffic(typed(), Traffic(rps=0.001, idle_timeout_s=60, duration_s=duration))
        bills.append(next(o for o in row["options"] if o["option"] == "provisioned 1")["bill_usd"])
    assert bills[1] - bills[0] == pytest.approx(300 * 1769 / 1024 * price, rel=0.02)


def test_a_concurrency_limit_is_a_whole_number_within_bounds():
    for bad in (0, -5, 2.5, 10**7, True):
        with pytest.raises(TrafficError, match="concurrency_limit"):
            Traffic(rps=1, concurrency_limit=bad)


def test_a_thinned_window_throttles_as_the_request_by_request_simulation_does():
    """50 req/s of ~10.6 ms against a limit of 2 for an hour (180,000 requests): simulated whole, and
    thinned to a tenth (Erlang's loss per second of the thinned window) agree on the throttled share."""
    traffic = Traffic(rps=50, duration_s=3600, concurrency_limit=2)
    whole = traffic_report({"results": [result()]}, traffic, budget=Budget(events=4_000_000))
    thinned = traffic_report({"results": [result()]}, traffic, budget=Budget(events=80_000))
    assert not whole["thinned"] and thinned["thinned"]
    expected = erlang_b(2, 50 * 0.0106)
    assert whole["rows"][0]["throttled_share"] == pytest.approx(expected, abs=0.01)
    assert thinned["rows"][0]["throttled_share"] == pytest.approx(expected, abs=0.01)


def test_a_load_test_may_give_one_service_and_overhead_per_arrival_and_must_give_one_each():
    times = np.arange(0, 10, 1.0)  # 1 req/s, one instance kept warm
    draws = np.array([5.0] * 5 + [50.0] * 5)
    result = simulate(
        times,
        [(0, 1.0), (0.5, 1.0), (1, 1.0)],
        100.0,
        30,
        np.random.default_rng(0),
        10,
        warm_draws_ms=draws,
        overhead_draws_ms=draws / 5,
    )
    assert result.cold_starts == 1
    assert list(result.latencies_ms[1:]) == pytest.approx([6.0] * 4 + [60.0] * 5)  # each its own, in order
    with pytest.raises(ValueError, match="one draw per arrival"):
        simulate(times, [(0, 1.0), (1, 1.0)], 100.0, 30, np.random.default_rng(0), 10, warm_draws_ms=draws[:3])
