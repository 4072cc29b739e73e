"""`ayci capacity`'s search: the rate doubled, then bisected, to the highest rate within the SLO;
a level's figures from the open-loop generator's timings; the simulated curve beside it."""

from __future__ import annotations

import csv
import math

import pytest

from serving.capacity import (
    PoolModel,
    Stepping,
    bracket,
    capacity_of,
    default_start_rps,
    level_figures,
    next_rate,
    plot,
    search,
    simulated_capacity,
    simulated_level,
    write_levels_csv,
)
from serving.open_loop import RequestTiming, schedule


def test_the_rate_doubles_while_within_then_bisects_the_bracket():
    stepping = Stepping(start_rps=1.0, precision=0.1)
    assert next_rate([], stepping) == 1.0
    assert next_rate([(1.0, True)], stepping) == 2.0
    assert next_rate([(1.0, True), (2.0, True), (4.0, True)], stepping) == 8.0
    levels = [(1.0, True), (2.0, True), (4.0, True), (8.0, False)]
    assert next_rate(levels, stepping) == 6.0
    levels.append((6.0, True))
    assert next_rate(levels, stepping) == 7.0
    levels.append((7.0, False))
    assert next_rate(levels, stepping) == 6.5
    levels.append((6.5, True))
    assert next_rate(levels, stepping) is None  # 6.5 within, 7 broke it: within 10 %
    assert capacity_of(levels) == 6.5


@pytest.mark.parametrize("true_capacity", [0.9, 3.0, 37.3, 150.0, 499.0])
@pytest.mark.parametrize("start", [1.0, 10.0])
def test_the_search_lands_within_its_precision_below_the_true_capacity(true_capacity, start):
    stepping = Stepping(start_rps=start, precision=0.05, max_levels=30, min_rps=0.1)
    levels = search(lambda rps: rps <= true_capacity, stepping)
    found = capacity_of(levels)
    assert found is not None and found <= true_capacity
    within, broke = bracket(levels)
    assert broke is not None and broke > true_capacity and broke <= within * 1.05
    assert true_capacity / found - 1 <= 0.05
    assert len(levels) == len(set(r for r, _ in levels))  # no rate measured twice


def test_it_stops_at_the_highest_rate_it_may_send_and_after_its_levels():
    levels = search(lambda rps: True, Stepping(start_rps=3.0, max_rps=40.0))
    assert [r for r, _ in levels] == [3.0, 6.0, 12.0, 24.0, 40.0]
    assert capacity_of(levels) == 40.0
    short = search(lambda rps: rps < 1000, Stepping(start_rps=1.0, max_rps=10_000, max_levels=4))
    assert len(short) == 4 and capacity_of(short) == 8.0


def test_nothing_within_the_slo_halves_to_the_floor_and_finds_no_capacity():
    levels = search(lambda rps: False, Stepping(start_rps=8.0, min_rps=1.0))
    assert [r for r, _ in levels] == [8.0, 4.0, 2.0, 1.0]
    assert capacity_of(levels) is None
    low = search(lambda rps: rps <= 2.5, Stepping(start_rps=8.0, min_rps=0.5, precision=0.1))
    assert 2.25 <= capacity_of(low) <= 2.5


def test_a_break_below_a_pass_counts_the_capacity_is_below_every_break():
    levels = [(2.0, True), (4.0, True), (8.0, False), (6.0, True), (5.0, False)]  # 6 passed, 5 did not: noise
    assert bracket(levels) == (4.0, 5.0)
    assert next_rate(levels, Stepping(start_rps=2.0, precision=0.1)) == 4.5


def test_the_stepping_refuses_what_cannot_be_searched():
    for bad in (
        dict(start_rps=0),
        dict(start_rps=5, max_rps=2),
        dict(start_rps=1, precision=0),
        dict(start_rps=1, max_levels=0),
    ):
        with pytest.raises(ValueError):
            Stepping(**bad)
    assert default_start_rps(10.0, 2) == 50.0  # a quarter of 2 workers at 10 ms (200/s), rounded down
    assert default_start_rps(3.0, 1) == 50.0
    assert default_start_rps(5000.0, 1) == 0.5


def timing(i, scheduled, latency_ms, status=200, queued=1.0, compute=5.0):
    return RequestTiming(
        index=i,
        label="m",
        scheduled_s=scheduled,
        started_s=scheduled + 0.0005,
        finished_s=scheduled + latency_ms / 1000,
        status=status,
        error=None if status else "TimeoutError: no answer",
        queued_ms=queued if status == 200 else None,
        compute_ms=compute if status == 200 else None,
    )


def test_a_level_counts_the_requests_after_its_warm_up_and_splits_queued_from_computing():
    warm = [timing(i, i * 0.01, 5000.0) for i in range(100)]  # the first second: slow, not counted
    counted = [timing(100 + i, 1.0 + i * 0.01, 10.0 + (i % 100) * 0.1, queued=2.0, compute=6.0) for i in range(200)]
    seen = level_figures(warm + counted, 100.0, warmup_s=1.0, duration_s=2.0, slo_ms=25.0, max_error_share=0.0)
    assert seen.requests == 200 and seen.answered == 200 and seen.errors == {}
    assert seen.p50_ms < seen.p90_ms < seen.p95_ms < seen.p99_ms < 20.0
    assert seen.p95_ms == pytest.approx(19.4, abs=0.05)  # 10.0 to 19.9 ms, twice each
    assert seen.queued_ms == 2.0 and seen.computing_ms == 6.0
    assert seen.other_ms == pytest.approx(seen.p50_ms - 8.0, abs=1.0)
    assert seen.throughput_rps == pytest.approx(100.0, rel=0.02)
    assert seen.within_slo
    refused = counted + [timing(300, 2.5, 1.0, status=503), timing(301, 2.6, 30_000.0, status=0)]
    broke = level_figures(warm + refused, 100.0, warmup_s=1.0, duration_s=2.0, slo_ms=25.0, max_error_share=0.0)
    assert broke.errors == {"503": 1, "TimeoutError": 1} and not broke.within_slo
    tolerant = level_figures(warm + refused, 100.0, warmup_s=1.0, duration_s=2.0, slo_ms=25.0, max_error_share=0.05)
    assert tolerant.within_slo
    slow = level_figures(warm + counted, 100.0, warmup_s=1.0, duration_s=2.0, slo_ms=19.0, max_error_share=0.0)
    assert not slow.within_slo  # p99 ~19.9 ms


CONSTANT_10MS = PoolModel(
    warm_quantiles=[(0.0, 10.0), (0.5, 10.0), (1.0, 10.0)], cold_ms=500.0, max_workers=2, idle_s=30
)


def test_the_simulated_curve_queues_past_what_the_pool_can_serve():
    # 2 workers at 10 ms: at most 200 answers a second
    def at(rps):
        arrivals = schedule("steady", rps, 13.0, seed=1)
        return simulated_level(CONSTANT_10MS, arrivals, rps, warmup_s=3.0, duration_s=10.0, slo_ms=50.0, seed=1)

    light, heavy = at(20.0), at(400.0)
    assert light.p50_ms == pytest.approx(10.0) and light.p99_ms < 25.0 and light.within_slo
    assert light.throughput_rps == pytest.approx(20.0, rel=0.15)
    assert heavy.p99_ms > 1000.0 and not heavy.within_slo  # the queue grows for the whole level
    assert heavy.throughput_rps < 210.0
    overhead = simulated_level(
        PoolModel(**{**CONSTANT_10MS.__dict__, "overhead_ms": 3.0}), schedule("steady", 20.0, 13.0, seed=1),
        20.0, 3.0, 10.0, 50.0, seed=1,
    )  # fmt: skip
    assert overhead.p50_ms == pytest.approx(13.0)
    found, levels = simulated_capacity(
        CONSTANT_10MS, Stepping(start_rps=10.0, max_rps=1000.0), 3.0, 10.0, 50.0, "steady"
    )
    assert found is not None and 100.0 < found < 200.0, levels
    assert [level.rps for level in levels][:4] == [10.0, 20.0, 40.0, 80.0]
    assert found == capacity_of([(level.rps, level.within_slo) for level in levels])
    assert all(level.p99_ms > 50.0 for level in levels if not level.within_slo)


def test_the_levels_csv_and_the_plot_are_written(tmp_path):
    rows = []
    for level, rps in enumerate((10.0, 20.0, 40.0)):
        arrivals = schedule("steady", rps, 8.0, seed=level)
        sim = simulated_level(CONSTANT_10MS, arrivals, rps, 3.0, 5.0, 50.0, seed=level)
        measured = {**sim.__dict__, "errors": {"503": level}, "queued_ms": 1.0, "computing_ms": 9.0, "other_ms": 0.5}
        measured["within_slo"] = level == 0
        rows.append({"level": level, "measured": measured, "simulated": sim.__dict__})
    write_levels_csv(rows, tmp_path / "capacity.csv")
    with open(tmp_path / "capacity.csv", newline="") as handle:
        written = list(csv.DictReader(handle))
    assert [float(r["rps"]) for r in written] == [10.0, 20.0, 40.0]
    assert [int(r["errors"]) for r in written] == [0, 1, 2]
    assert all(not math.isnan(float(r["p95_ms"])) and float(r["simulated_p99_ms"]) > 0 for r in written)
    report = {
        "levels": rows,
        "plan": {"slo_ms": 50.0},
        "capacity_rps": 10.0,
        "simulated_capacity_rps": 150.0,
        "simulated_levels": [
            simulated_level(CONSTANT_10MS, schedule("steady", rps, 8.0, seed=9), rps, 3.0, 5.0, 50.0, seed=9).__dict__
            for rps in (80.0, 160.0)
        ],
        "combination": "intel/onnx/b1/1769MB",
        "run_id": "abcdef123456",
    }
    plot(report, tmp_path / "capacity.png")
    assert (tmp_path / "capacity.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_simulation_is_fed_the_calibration_and_draws_the_overhead_per_request():
    calibration = {"service_ms": [4.0] * 50 + [6.0] * 50, "cold_start_ms": [300.0, 500.0, 400.0]}
    calibration["overhead_ms"] = [1.0] * 50 + [9.0] * 50
    fed = PoolModel.calibrated(calibration, max_workers=2, idle_s=30.0)
    assert fed.cold_ms == pytest.approx(400.0 + 5.0)  # to ready, then the request's own service
    assert fed.summary()["overhead_p50_ms"] == pytest.approx(5.0)
    level = simulated_level(fed, schedule("steady", 10.0, 23.0, seed=3), 10.0, 3.0, 20.0, 50.0, seed=3)
    # a request is 4 or 6 ms of service, plus 1 or 9 ms of overhead drawn for it
    assert 5.0 - 1e-6 <= level.p50_ms <= 15.0 + 1e-6 and 15.0 - 1e-6 <= level.p99_ms < 20.0  # (a rare short wait)
    assert level.p90_ms > 9.0  # the 9 ms overheads are drawn, not their median alone


def test_the_view_shows_each_level_the_capacity_and_where_the_time_went():
    import io

    from rich.console import Console

    from report.studies import capacity_view

    def level(rps, p99, within, queued, errors=None):
        figures = simulated_level(CONSTANT_10MS, schedule("steady", rps, 8.0, seed=1), rps, 3.0, 5.0, 50.0, seed=1)
        measured = {**figures.__dict__, "p99_ms": p99, "within_slo": within, "errors": errors or {}}
        measured |= {"queued_ms": queued, "computing_ms": 9.0, "other_ms": 2.0, "send_lag_p99_ms": 0.5}
        return {"level": 0, "measured": measured, "simulated": figures.__dict__}

    fed = PoolModel.calibrated(
        {"service_ms": [9.0, 10.0, 11.0], "cold_start_ms": [500.0], "overhead_ms": [2.0]}, 2, 30.0
    ).summary()
    report = {
        "run_id": "r1",
        "combination": "intel/onnx/b1/1769MB",
        "plan": {"slo_ms": 50.0},
        "levels": [
            level(40.0, 20.0, True, 0.5),
            level(80.0, 70.0, False, 41.0, {"503": 3}),
            level(60.0, 30.0, True, 4.0),
        ],
        "capacity_rps": 60.0,
        "bracket": [60.0, 80.0],
        "simulated_capacity_rps": 150.0,
        "simulated_from_run_capacity_rps": None,
        "fed": fed,
        "endpoint": {"max_workers": 2, "max_queue": 32, "lambda_like": True},
        "files": {"csv": "c.csv", "plot": "c.png", "requests": "r.csv"},
    }
    console = Console(file=io.StringIO(), width=220, color_system=None)
    for part in capacity_view(report):
        console.print(part)
    text = console.file.getvalue()
    assert "p95 ms" in text and "3 x 503" in text
    assert text.index("│            40 ") < text.index("│            60 ") < text.index("│            80 ")  # by rate
    assert "capacity: 60 req/s with p99 within 50 ms (80 req/s broke it)" in text
    assert "where the time went at 80 req/s (the lowest rate that broke it), mean per answer: queued 41.0 ms" in text
    assert "simulated: 150 req/s, fed this machine's calibration (service p50 10.00" in text
    assert "fed the run's stored measurement: none within the SLO" in text
    assert "endpoint: Lambda-like, up to 2 workers" in text
