"""The load test's open-loop arrivals and plan, the simulation it is held against, and how the
comparison is judged: pass or fail, with both figures, nothing turning a fail into a pass."""

import asyncio

import numpy as np
import pytest

from core.lambda_model.arrivals import BURST_MULTIPLIER
from serving.loadtest import LoadPlan, compare, predicted_figures
from serving.open_loop import Outgoing, burst_windows, rate_at, run_open_loop, schedule


def test_spiky_schedule_bursts_in_the_middle_of_each_half_and_stays_within_the_duration():
    assert rate_at("spiky", 3, 60, 5) == 3 and rate_at("spiky", 3, 60, 15) == 3 * BURST_MULTIPLIER
    assert rate_at("spiky", 3, 60, 46) == 3 * BURST_MULTIPLIER and rate_at("spiky", 3, 60, 59) == 3
    assert burst_windows(60) == [(15, 20), (45, 50)]
    times = np.asarray(schedule("spiky", 20, 600, seed=1))
    assert times.min() >= 0 and times.max() < 600 and np.all(np.diff(times) >= 0)
    in_bursts = sum(((times >= a) & (times < b)).sum() for a, b in burst_windows(600))
    assert in_bursts / 100 == pytest.approx(20 * BURST_MULTIPLIER, rel=0.1)  # 100 s of bursts at 10x
    steady = schedule("steady", 20, 600, seed=1)
    assert len(steady) == pytest.approx(12_000, rel=0.05)
    gaps = np.diff(steady)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)  # exponential gaps: Poisson
    assert schedule("steady", 20, 600, seed=1) == steady  # a seed gives the same arrivals


def test_a_file_of_arrival_times_is_sent_as_written(tmp_path):
    path = tmp_path / "arrivals.csv"
    path.write_text("seconds\n0.5\n1.0\n1.25\n9\n")
    assert schedule(str(path), 1, 5) == [0.0, 0.5, 0.75]  # from the first arrival, cut at the duration
    assert LoadPlan(rps=1, duration_s=5, pattern=str(path)).arrivals() == [0.0, 0.5, 0.75]


@pytest.mark.parametrize(
    "kwargs, field",
    [({"rps": 0}, "rps"), ({"rps": 1e6}, "rps"), ({"duration_s": 1}, "duration"), ({"pattern": "wavy"}, "pattern")],
)
def test_a_bad_plan_is_refused_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        LoadPlan(**{"rps": 2, "duration_s": 30, **kwargs})


def test_open_loop_sends_on_schedule_whatever_the_answers_and_counts_from_the_scheduled_time():
    """A server that answers one request at a time, 200 ms each: a closed loop would send the next
    request after each answer; the open loop sends all five within 50 ms, and the last one's
    latency counts its wait behind the four others (about 1 s), not just its own 200 ms."""
    from aiohttp import web

    lock = asyncio.Lock()

    async def slow(request):
        await request.read()
        async with lock:
            await asyncio.sleep(0.2)
        return web.Response(body=b"ok", headers={"X-Inference-Ms": "200.0", "X-Cold-Load": "0"})

    async def main():
        app = web.Application()
        app.router.add_post("/x", slow)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        try:
            return await run_open_loop(
                f"http://127.0.0.1:{port}", [0.0, 0.01, 0.02, 0.03, 0.04], lambda i: Outgoing("/x", b"b", label="m")
            )
        finally:
            await runner.cleanup()

    timings = asyncio.run(main())
    assert [t.status for t in timings] == [200] * 5 and all(t.compute_ms == 200.0 and t.cold is False for t in timings)
    assert max(t.started_s for t in timings) < 0.2  # all sent before the first answer
    assert all(t.send_lag_ms < 100 for t in timings)
    latencies = sorted(t.latency_ms for t in timings)
    assert latencies[0] == pytest.approx(200, abs=80) and latencies[-1] == pytest.approx(1000, abs=250)


def test_open_loop_records_a_refused_connection_as_no_answer():
    timings = asyncio.run(run_open_loop("http://127.0.0.1:9", [0.0], lambda i: Outgoing("/x", b"")))
    assert timings[0].status == 0 and not timings[0].ok and timings[0].error


FED = {"service_ms": [10.0] * 90 + [20.0] * 10, "cold_start_ms": [500.0], "overhead_ms": [2.0]}


def test_the_simulation_is_fed_the_calibration_and_adds_the_overhead_explicitly():
    times = list(np.arange(0, 60, 1.0))  # 1 req/s, 10 ms each: one instance, warm after the first
    predicted = predicted_figures(times, FED, 60, idle_s=30, max_workers=4)
    assert predicted["cold_starts"] == 1 and predicted["simulated_requests"] == 60
    assert predicted["p50_ms"] == pytest.approx(12.0, abs=0.5)  # the service time + the overhead
    assert predicted["fed"]["cold_start_ms"] == pytest.approx(510.0) and predicted["fed"]["overhead_p50_ms"] == 2.0
    reclaimed = predicted_figures(times, FED, 60, idle_s=0.2, max_workers=4)  # idle 0.49 s between requests
    assert reclaimed["cold_starts"] == 60 and reclaimed["p50_ms"] > 500
    assert predicted_figures([1.0], FED, 60, 30, 4) is None


def figures(p50, p99, cold_share):
    return {"p50_ms": p50, "p99_ms": p99, "cold_share": cold_share}


def test_within_the_bounds_passes_with_both_figures():
    result = compare(figures(11.4, 114, 0.0124), figures(10, 100, 0.01))
    assert result["verdict"] == "pass" and all(f["passed"] for f in result["figures"])
    p99 = next(f for f in result["figures"] if f["figure"] == "p99")
    assert p99["observed"] == 114 and p99["predicted"] == 100 and p99["ratio"] == pytest.approx(1.14)
    assert compare(figures(10, 100, 0.01), None)["verdict"] is None


@pytest.mark.parametrize(
    "seen, failing",
    [
        (figures(11.6, 100, 0.01), "p50"),  # 16 % above
        (figures(10, 84, 0.01), "p99"),  # 16 % below
        (figures(10, 100, 0.016), "cold-start share"),  # under 2 %: 0.6 points off
        (figures(10, 100, 0.0), "cold-start share"),  # a share observed as none at all
    ],
)
def test_any_figure_past_its_bound_fails_the_comparison_and_nothing_explains_it_away(seen, failing):
    result = compare(seen, figures(10, 100, 0.01))
    assert result["verdict"] == "fail"
    assert [f["figure"] for f in result["figures"] if not f["passed"]] == [failing]
    assert set(result) == {"verdict", "figures"}  # no explanation field that could turn it


def test_cold_share_is_judged_relatively_from_two_percent_up():
    assert compare(figures(10, 100, 0.124), figures(10, 100, 0.10))["verdict"] == "pass"  # 24 %
    assert compare(figures(10, 100, 0.126), figures(10, 100, 0.10))["verdict"] == "fail"  # 26 %
    assert compare(figures(10, 100, 0.0145), figures(10, 100, 0.0195))["verdict"] == "pass"  # 0.5 points
