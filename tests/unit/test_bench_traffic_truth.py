"""bench/bench_traffic_truth.py's repeat: the live pool's figures against themselves."""

from bench.bench_traffic_truth import reproduction


def _run(p50: float, p99: float, cold: int, verdict: str = "pass") -> dict:
    return {"observed": {"p50_ms": p50, "p99_ms": p99, "cold_starts": cold}, "comparison": {"verdict": verdict}}


def test_a_figure_within_the_checks_bound_of_its_median_is_reproduced():
    seen = reproduction([_run(8.0, 30.0, 12), _run(8.4, 33.0, 13), _run(7.9, 28.0, 11)])
    assert seen["p50"] == {"observed_ms": [7.9, 8.0, 8.4], "median_ms": 8.0, "reproduced": True}
    assert seen["p99"]["median_ms"] == 30.0 and seen["p99"]["reproduced"]
    assert seen["cold_starts"] == [11, 12, 13] and seen["verdicts"] == ["pass"] * 3


def test_a_p99_that_moves_past_the_bound_between_runs_is_not_reproduced():
    # steady 20 req/s at idle 2 s, the same arrivals: 72 and 191 ms (docs/benchmarks.md)
    seen = reproduction([_run(8.8, 72.0, 5, "fail"), _run(7.4, 191.3, 11, "fail"), _run(8.1, 180.0, 10, "fail")])
    assert seen["p99"]["observed_ms"] == [72.0, 180.0, 191.3] and not seen["p99"]["reproduced"]
    assert seen["p50"]["reproduced"]  # 7.4-8.8 around 8.1: within ±15 %


def test_a_row_may_ask_for_more_requests_than_the_default_never_fewer():
    from bench.bench_traffic_truth import DEFAULT_ROWS, parse_rows

    assert parse_rows("steady:20:2:10000,spiky:5,steady:10:0.5:500", 2.0, 2000) == [
        ("steady", 20.0, 2.0, 10000),
        ("spiky", 5.0, 2.0, 2000),
        ("steady", 10.0, 0.5, 2000),  # at least `--requests`
    ]
    edge = [row for row in parse_rows(DEFAULT_ROWS, 2.0, 2000) if row[2] == 2.0]
    assert len(edge) == 4 and all(row[3] == 10000 for row in edge)  # the edge rows: a p99 on one side of the waited


def _measured(requests: int, needs: float | None) -> dict:
    return {"observed": {"requests": requests}, "regime": {"p99_determined_at": needs}}


def test_a_row_whose_p99_its_requests_did_not_pin_is_run_again_with_what_its_shares_need_within_the_time():
    from bench.bench_traffic_truth import requests_to_pin

    assert requests_to_pin(_measured(2000, 1200.0), "steady", 20, 1800) is None  # pinned
    # steady 20 at idle 30 s, shares needing 12,800 (docs/benchmarks.md): a quarter more, in thousands
    assert requests_to_pin(_measured(2000, 12_800.0), "steady", 20, 1800) == 16_000
    assert requests_to_pin(_measured(10_000, 30_700.0), "steady", 20, 1800) == 36_000  # 38,375 wanted: 30 min hold
    assert requests_to_pin(_measured(10_000, 30_700.0), "steady", 10, 1800) == 18_000  # 30 min at 10 req/s
    assert requests_to_pin(_measured(2000, None), "spiky", 5, 1800) == 22_000  # no count pins it: the most 30 min hold
    assert requests_to_pin(_measured(20_000, 30_700.0), "steady", 10, 1800) is None  # no run within the time sends more
    assert requests_to_pin(_measured(2000, 12_800.0), "steady", 20, 0) is None


def test_a_row_where_no_request_waited_is_pinned_and_one_at_one_percent_is_not():
    from bench.bench_traffic_truth import pinned_by

    assert pinned_by(_measured(2000, 0.0)) and pinned_by(_measured(2000, 2000.0))
    assert not pinned_by(_measured(2000, None)) and not pinned_by(_measured(2000, 2001.0))
