"""The load test's open-loop arrivals and plan, the simulation it is held against, and how the
comparison is judged: pass or fail, with both figures, nothing turning a fail into a pass."""

import asyncio
import time

import numpy as np
import pytest

from core.lambda_model.arrivals import BURST_MULTIPLIER
from serving.loadtest import (
    NEAREST,
    LoadPlan,
    compare,
    load_fed,
    nearest_draws,
    p99_determined_requests,
    predicted_figures,
    regime,
)
from serving.open_loop import Outgoing, RequestTiming, burst_windows, rate_at, run_open_loop, schedule


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
            entered = time.monotonic()  # its "pool": the lock it waited for
            await asyncio.sleep(0.2)
        headers = {"X-Inference-Ms": "200.0", "X-Cold-Load": "0", "X-Pool-Entered-At": f"{entered:.6f}"}
        return web.Response(body=b"ok", headers=headers)

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
    # when each entered the server's "pool", on the generator's clock: the last waited behind the four others
    fronts = sorted(t.front_ms for t in timings)
    assert fronts[0] == pytest.approx(0, abs=80) and fronts[-1] == pytest.approx(800, abs=250)


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


CALIBRATION = {**FED, "summary": {"handoff_p50_ms": 0.5}}


def timing(i, latency_ms, queued_ms, compute_ms, cold=False, status=200):
    return RequestTiming(
        index=i,
        label="m",
        scheduled_s=i * 0.1,
        started_s=i * 0.1,
        finished_s=i * 0.1 + latency_ms / 1000,
        status=status,
        cold=cold,
        queued_ms=queued_ms,
        compute_ms=compute_ms,
    )


def test_the_simulation_is_fed_what_the_load_measured_its_cold_starts_too_for_a_lambda_like_pool():
    """The service (each warm request's time in its worker plus the calibrated hand-over), the
    overhead (each answered request's latency beyond queued and worker) and, Lambda-like, the cold
    starts (a cold request's time queued: its wait for its worker) come from the load itself; the
    calibration's are the fallback when the load answered too few."""
    load = [timing(i, 10.0 + i % 3, 0.2, 4.0) for i in range(40)]
    load += [timing(40, 905.0, 890.0, 5.0, cold=True), timing(41, 1210.0, 1200.0, 4.0, cold=True)]
    load += [timing(42, 1.0, None, None, status=503)]  # refused: no figures from it
    fed = load_fed(CALIBRATION, load, lambda_like=True)
    assert fed["service_ms"] == [4.5] * 40
    assert sorted(fed["overhead_ms"])[:3] == pytest.approx([5.8] * 3) and max(fed["overhead_ms"]) == pytest.approx(10)
    assert len(fed["overhead_ms"]) == 42 and fed["cold_start_ms"] == [890.0, 1200.0]
    assert fed["sources"] == {
        "arrivals": "scheduled",  # the endpoint did not say when each entered its pool
        "overhead": "load, nearest in time",
        "service": "load, nearest in time",
        "cold_start": "load",
    }
    assert len(fed["service_draws_ms"]) == len(fed["overhead_draws_ms"]) == len(load)  # one per arrival
    predicted = predicted_figures([t.scheduled_s for t in load], fed, 5, idle_s=30, max_workers=2)
    assert predicted["fed"]["cold_start_ms"] == pytest.approx(1045 + 4.5) and predicted["fed"]["cold_starts_fed"] == 2
    # the default endpoint's "cold" requests waited for a load already under way: not a cold start each
    assert load_fed(CALIBRATION, load, lambda_like=False)["cold_start_ms"] == [500.0]
    few = load_fed(CALIBRATION, load[:5] + load[40:42], lambda_like=True)
    assert few["service_ms"] == FED["service_ms"] and few["overhead_ms"] == [2.0]
    assert few["cold_start_ms"] == [890.0, 1200.0] and few["sources"]["service"] == "calibration"


def test_each_arrival_is_fed_the_service_and_overhead_of_a_warm_request_near_it_in_time():
    """The host slows down with its load (a spiky pattern's bursts): an arrival in a slow stretch is
    fed a slow stretch's request (its service and overhead together), not one drawn from the whole test."""
    quick = [timing(i, 9.0, 0.1, 3.0) for i in range(200)]
    slow = [timing(200 + i, 40.0, 0.1, 10.0) for i in range(200)]
    cold = [timing(400, 700.0, 690.0, 4.0, cold=True)]
    service, overhead = nearest_draws(quick + cold + slow, handoff_ms=0.5)
    assert len(service) == len(overhead) == 401
    assert set(service[: 200 - NEAREST]) == {3.5} and np.allclose(overhead[: 200 - NEAREST], 5.9)
    assert set(service[-(200 - NEAREST) :]) == {10.5} and np.allclose(overhead[-(200 - NEAREST) :], 29.9)
    assert service[200] in (3.5, 10.5)  # the cold request's own is not a warm service: a neighbour's
    fed = load_fed(CALIBRATION, quick[:150] + slow[:50], lambda_like=True)
    predicted = predicted_figures([i * 0.1 for i in range(200)], fed, 20, idle_s=30, max_workers=2)
    # 10 req/s, no queueing: the simulated latencies are the draws (not the calibration's 10 ms + 2 ms)
    assert predicted["p50_ms"] == pytest.approx(9.4) and predicted["p90_ms"] == pytest.approx(40.4)


def test_the_simulation_is_fed_the_arrivals_as_the_pool_saw_them_and_each_ones_time_before_it():
    """Two requests sent together reach the pool one after the other when the front end takes them
    in turn: the simulation's arrivals are the times they entered the pool (`X-Pool-Entered-At`),
    and each request's own time before it is added to its simulated latency."""
    load = []
    for second in range(30):  # a lone request, then each second a pair sent 1 ms apart
        pair = [(second, 1.0)] if second == 0 else [(second, 1.0), (second + 0.001, 15.0)]
        for at, front in pair:
            cold = not load
            queued = 500.0 if cold else 0.1
            load.append(
                RequestTiming(
                    index=len(load),
                    label="m",
                    scheduled_s=at,
                    started_s=at,
                    finished_s=at + (front + queued + 10.0 + 2.0) / 1000,
                    status=200,
                    cold=cold,
                    queued_ms=queued,
                    compute_ms=10.0,
                    entered_s=at + front / 1000,
                )
            )
    fed = load_fed(CALIBRATION, load, lambda_like=True)
    assert fed["sources"]["arrivals"] == "pool entries"
    assert fed["entered_s"][2] == pytest.approx(1.016) and fed["overhead_ms"] == pytest.approx([2.0] * len(load))
    assert fed["overhead_draws_ms"][1] == pytest.approx(3.0) and fed["overhead_draws_ms"][2] == pytest.approx(17.0)
    predicted = predicted_figures([t.scheduled_s for t in load], fed, 30, idle_s=30, max_workers=2)
    # the second of each pair entered after the first was answered: one instance serves them all
    assert predicted["cold_starts"] == 1 and predicted["peak_instances"] == 1
    assert predicted["fed"]["front_p99_ms"] == pytest.approx(15.0)
    assert predicted["p90_ms"] == pytest.approx(15 + 10.5 + 2)  # the pair's second: its front end, service, rest
    scheduled = {k: v for k, v in fed.items() if k != "entered_s"}
    assert predicted_figures([t.scheduled_s for t in load], scheduled, 30, 30, 2)["cold_starts"] == 2  # overlapped


def test_the_regime_says_where_the_p99_lies_by_the_share_that_waited_for_a_cold_start():
    fed = {"service_ms": [4.0] * 100, "cold_start_ms": [600.0], "overhead_ms": [5.0]}
    warm = predicted_figures(list(np.arange(0, 200, 0.1)), fed, 200, idle_s=30, max_workers=2)
    # two starts at the first two requests, the next two queued more than half a start behind them (of 2,000)
    assert warm["cold_starts"] == 2 and warm["waited_for_cold_share"] == pytest.approx(4 / 2000)
    assert regime({}, warm)["regime"] == "warm tail"
    # 1 req/s, idle 0.2 s (a worker frees 0.6 s after its request): every request starts a worker
    cold = predicted_figures(list(np.arange(0, 60, 1.0)), fed, 60, idle_s=0.2, max_workers=2)
    assert cold["waited_for_cold_share"] == 1.0
    assert regime({"waited_for_cold_share": 0.9}, cold) == {
        "regime": "cold starts",
        "predicted_share": 1.0,
        "observed_share": 0.9,
        "p99_determined_at": pytest.approx(4 * 0.9 / 0.89**2),  # far from 1 %: a handful of requests
    }
    assert regime({}, {**warm, "waited_for_cold_share": 0.01})["regime"] == "edge"
    assert regime({}, {**warm, "waited_for_cold_share": 0.01})["p99_determined_at"] is None  # no count does
    assert regime({}, None) == {"regime": None}
    # on the edge: 0.8 % waited, 1.1 requests a cold start (observed), 0.9 % simulated: the p99 needs the larger
    edge = regime({"waited_for_cold_share": 0.008, "cold_share": 0.008 / 1.1}, {**warm, "waited_for_cold_share": 0.009})
    assert edge["p99_determined_at"] == pytest.approx(4 * 1.1 * 0.009 / 0.001**2)
    assert p99_determined_requests(0.008) == pytest.approx(8000) and p99_determined_requests(0.0) == 0


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
