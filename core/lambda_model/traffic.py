"""What cold starts cost under a traffic profile: a discrete-event simulation of a Lambda
instance pool for one measured combination.

Each instance serves one request at a time. A request that finds no idle instance starts a new
one: a cold start (its latency is the measured cold start, which ends with the first answer).
An idle instance is reused (the most recently freed first) until it has been idle longer than
the idle timeout, then it is reclaimed. Warm latencies are drawn from the measured distribution
(its quantiles: min, p50, p90, p99, max, piecewise linear), cold starts from the measured cold
start with the same relative spread.

Traffic (a profile and its arrivals, steady, spiky or a file's) is `core/lambda_model/arrivals.py`.

Bounded whatever the rate and pattern: a request (`traffic_report`, every row of it and every way of
serving each row) has one `Budget` of simulated arrivals (`REQUEST_EVENTS`) and of computing
(`REQUEST_WALL_S`), shared by its simulations. Each simulation covers a window of the duration (all
of it when the traffic fits, else at least `MIN_WINDOW_S`: one burst period), and when even that
window holds more arrivals than its share, the arrivals are thinned (each kept with probability
`kept`, which keeps a Poisson process Poisson) and the counts, instances and bill scaled back by
`1 / kept`: the row then says it was thinned. Memory follows the events: the arrivals are drawn
already thinned, never generated in full.

Lambda's scaling rules (`data/lambda_limits.json`, `concurrency`): the requests in flight at once
(on-demand and provisioned instances together) stay within the concurrency limit (`Traffic.
concurrency_limit`, the account's default 1,000 when not given), and a function starts at most
1,000 new execution environments every 10 seconds (a bucket of 1,000 refilled continuously, as AWS
says it makes a best attempt to; never more than 1,000 in it). A request past either is throttled
(a 429 error, not billed, not answered): each way of serving counts them and their share, and the
pick (`traffic_report`) takes only a way that throttles at most `THROTTLE_PICK_MAX` (1 %) of its
requests, since a p99 counts a throttled request as slower than any answer.

Billing as AWS bills it (`schemas/lambda_billing.py`, the price file's `billing` block): provisioned
concurrency in 5-minute steps; SnapStart only where the combination may use it (`core/lambda_rules`:
a zip on Python 3.12+, 512 MB of ephemeral storage, no provisioned concurrency), with its cache for at
least 3 hours, its restore fee per GB of memory restored, and per restore the Billed Restore Duration
(the runtime's load plus the after-restore hooks) as duration, the snapshot's restore itself adding
latency only; ephemeral storage above the free 512 MB priced per GB-second of billed duration.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from core.lambda_model.arrivals import MAX_EVENTS, Traffic, TrafficError, window_of
from core.lambda_model.prediction import draw_latencies, latency_quantiles
from core.lambda_model.unconfined import is_estimated
from core.lambda_rules import fit_of_row
from schemas.cost import load_prices
from schemas.documents import RunSummary, SummaryResult
from schemas.lambda_billing import load_billing
from schemas.lambda_limits import load_limits

MAX_WALL_S = 5.0
REQUEST_EVENTS = 400_000  # simulated arrivals per request, all its rows and ways of serving them together
REQUEST_WALL_S = 10.0  # computing per request
MIN_SIMULATION_EVENTS = 5_000  # fewer per simulation says little: rows past that are left out, and said so
SIMULATIONS_PER_ROW = 4  # on demand, provisioned at the mean and at the peak, SnapStart
WALL_CHECK_EVERY = 4096  # arrivals between looks at the clock
# the pick's rule: a way of serving that throttles more than this share of its requests is never picked
# (its p99, counting a throttled request as slower than any answer, is a failure)
THROTTLE_PICK_MAX = 0.01
SCALING_WINDOW_S = 10.0  # Lambda's scaling rate: `concurrency.scaling_per_10_s` new environments per 10 s


@dataclass
class Budget:
    """What one request may simulate: `events` arrivals and `wall_s` seconds of computing, for all
    its simulations; `used` counts the arrivals simulated so far."""

    events: int = REQUEST_EVENTS
    wall_s: float = REQUEST_WALL_S
    used: int = 0
    started: float = field(default_factory=time.perf_counter)

    @property
    def deadline(self) -> float:
        return self.started + self.wall_s

    def take(self, events: int) -> int:
        """Up to `events` of what is left (0: spent)."""
        granted = max(0, min(events, self.events - self.used))
        self.used += granted
        return granted

    def give_back(self, events: int) -> None:
        self.used -= events


@dataclass
class PoolResult:
    """`requests` arrivals simulated, of which `throttled` were refused; `latencies_ms` of those answered,
    `on_provisioned` marks those a provisioned instance served, `cold` those that started an instance."""

    requests: int
    cold_starts: int
    latencies_ms: np.ndarray
    peak_instances: int
    instance_seconds: float  # instances alive (busy or idle, until reclaimed)
    window_s: float
    cut_short: bool
    wall_s: float
    notes: list[str] = field(default_factory=list)
    on_provisioned: np.ndarray | None = None
    throttled: int = 0
    cold: np.ndarray | None = None

    @property
    def cold_share(self) -> float:
        return self.cold_starts / self.requests if self.requests else 0.0

    @property
    def throttled_share(self) -> float:
        return self.throttled / self.requests if self.requests else 0.0


@dataclass(frozen=True)
class Scaling:
    """Lambda's scaling rules in a simulation: at most `limit` requests in flight (on-demand and
    provisioned instances together), and new environments from a bucket of `burst` refilled at
    `per_s` (1,000 per 10 s)."""

    limit: float
    per_s: float
    burst: float

    @classmethod
    def lambdas(cls, limit: int) -> Scaling:
        rate = load_limits().concurrency.scaling_per_10_s
        return cls(limit=limit, per_s=rate / SCALING_WINDOW_S, burst=rate)


FLUID_BINS = 100_000  # at most this many time steps in the throttling of a thinned window
ERLANG_MAX_SERVERS = 2_000  # beyond, Erlang's loss is the fluid one within a few percent of its share


def erlang_b(servers: np.ndarray, load: np.ndarray) -> np.ndarray:
    """Erlang's loss formula, per element: the share of Poisson arrivals offered `load` (mean requests in
    flight) that find all `servers` busy, whatever the latency's distribution. Past `ERLANG_MAX_SERVERS`
    the fluid share `1 - servers / load` (at least 0)."""
    servers = np.asarray(servers, dtype=int)
    load = np.asarray(load, dtype=float)
    blocked = np.ones(len(load))
    small = servers <= ERLANG_MAX_SERVERS
    for n in range(1, int(servers[small].max()) + 1 if small.any() else 1):
        step = load * blocked / (n + load * blocked)
        blocked = np.where(small & (servers >= n), step, blocked)
    fluid = np.clip(1 - servers / np.maximum(load, 1e-12), 0.0, 1.0)
    return np.where(load > 0, np.where(small, blocked, fluid), 0.0)


def fluid_throttled(
    times: np.ndarray,
    window_s: float,
    kept: float,
    service_s: float,
    scaling: Scaling,
    provisioned: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Which of a thinned window's arrivals Lambda's scaling rules throttle (a thinned pool is too small to
    hit a limit of the full one request by request): per time step, the requests in flight the full traffic
    offers (Little: arrivals / `kept` per second x `service_s`), the environments it has (the `provisioned`
    ones, and on-demand ones started from the scaling bucket towards the offered load plus three standard
    deviations of a Poisson count, kept for the window as idle instances outlive a 10-minute one), all
    within the limit; the share Erlang's loss formula gives for them is throttled, each arrival of the step
    with that probability."""
    if not len(times):
        return np.zeros(0, dtype=bool)
    dt = max(1.0, window_s / FLUID_BINS)
    bins = np.minimum((times / dt).astype(int), int(window_s / dt))
    counts = np.bincount(bins, minlength=int(window_s / dt) + 1)
    load = counts / kept / dt * service_s
    cap = max(0.0, scaling.limit - provisioned)
    environments, tokens = 0.0, scaling.burst
    servers = np.empty(len(counts), dtype=int)
    for b, offered in enumerate(load):
        if b:
            tokens = min(scaling.burst, tokens + scaling.per_s * dt)
        wanted = min(cap, max(0.0, offered - provisioned) + 3 * math.sqrt(offered))
        started = min(max(0.0, wanted - environments), tokens)
        environments, tokens = environments + started, tokens - started
        servers[b] = math.floor(min(scaling.limit, provisioned + environments) + 1e-9)
    share = erlang_b(servers, load)
    return rng.uniform(0, 1, len(times)) < share[bins]


def simulate(
    times: np.ndarray,
    warm_ms: list[tuple[float, float]],
    cold_ms: float,
    idle_timeout_s: float,
    rng: np.random.Generator,
    window_s: float,
    cut_short: bool = False,
    provisioned: int = 0,
    max_instances: int | None = None,
    deadline: float | None = None,
    scaling: Scaling | None = None,
    cold_samples_ms: np.ndarray | None = None,
    overhead_ms: float | np.ndarray = 0.0,
    warm_draws_ms: np.ndarray | None = None,
    overhead_draws_ms: np.ndarray | None = None,
) -> PoolResult:
    """Serve the arrivals `times` (s) with a pool of instances (see the module's docstring).
    `provisioned` instances are always initialized: a request takes one of them first, and
    only spills over to on-demand instances when all are busy (`served_provisioned` counts).
    `max_instances` caps the on-demand pool (an endpoint's workers, `serving/`): a request that
    finds none idle at the cap waits for the first to free up, and its latency includes the wait.
    `scaling` (Lambda's concurrency limit and scaling rate; None: unbounded) throttles a request
    that would take the requests in flight past the limit, or start an instance when the scaling
    bucket is empty.
    `cold_samples_ms` (cold starts measured, e.g. a live pool's, `serving/loadtest.py`): each cold
    start is drawn from them instead of spreading `cold_ms` as the warm latency spreads.
    `overhead_ms` (a figure, or samples to draw from): added to each answered request's latency
    without holding its instance (a front end's HTTP and (de)serialization, measured).
    `warm_draws_ms` and `overhead_draws_ms` (a load test's check only, `serving/loadtest.py`): one
    service time and one overhead per arrival, drawn by the caller, instead of drawing them here
    from `warm_ms` and `overhead_ms` independently of the time: a live pool's host slows down with
    its own load (a spiky pattern's bursts), which a Lambda instance does not; the product's traffic
    answer never passes them."""
    started = time.perf_counter()
    deadline = min(deadline or math.inf, started + MAX_WALL_S)
    for given in (warm_draws_ms, overhead_draws_ms):
        if given is not None and len(given) != len(times):
            raise ValueError(f"one draw per arrival: {len(given)} draws for {len(times)} arrivals")
    warm = draw_latencies(warm_ms, rng, len(times)) if warm_draws_ms is None else np.asarray(warm_draws_ms, float)
    p50 = dict(warm_ms).get(0.5) or float(np.median(warm))
    cold = (
        cold_ms * warm / p50  # the cold start spreads as the warm latency does
        if cold_samples_ms is None
        else rng.choice(np.asarray(cold_samples_ms, dtype=float), len(times))
    )
    kept = [0.0] * provisioned  # heap of the times provisioned instances become free
    busy: list[float] = []  # heap of the times busy on-demand instances become free
    idle: deque[float] = deque()  # free since (ascending): the newest at the right
    latencies = np.empty(len(times))
    on_provisioned = np.zeros(len(times), dtype=bool)
    started_cold = np.zeros(len(times), dtype=bool)
    answered = np.ones(len(times), dtype=bool)
    cold_starts = peak = throttled = 0
    alive_s = 0.0
    limit = scaling.limit if scaling else math.inf
    tokens, refilled = (scaling.burst, float(times[0]) if len(times) else 0.0) if scaling else (math.inf, 0.0)
    notes = []
    for i, t in enumerate(times):
        if kept and kept[0] <= t:
            latencies[i] = warm[i]
            on_provisioned[i] = True
            heapq.heapreplace(kept, t + warm[i] / 1000)
            continue
        while busy and busy[0] <= t:
            idle.append(heapq.heappop(busy))
        while idle and t - idle[0] > idle_timeout_s:  # reclaimed
            alive_s += idle_timeout_s
            idle.popleft()
        if len(busy) + provisioned >= limit:  # the concurrency limit: every provisioned instance counts
            throttled += 1
            answered[i] = False
            continue
        if idle:
            free_since = idle.pop()
            alive_s += t - free_since
            latency = warm[i]
        elif max_instances is not None and len(busy) >= max_instances:
            latency = (heapq.heappop(busy) - t) * 1000 + warm[i]  # queued behind the instance that frees first
            alive_s -= latency / 1000 - warm[i] / 1000  # that instance was alive and counted while it was busy
        else:
            if scaling:
                tokens, refilled = min(scaling.burst, tokens + (t - refilled) * scaling.per_s), t
                if tokens < 1:  # the scaling rate: no new environment yet
                    throttled += 1
                    answered[i] = False
                    continue
                tokens -= 1
            cold_starts += 1
            started_cold[i] = True
            latency = cold[i]
        latencies[i] = latency
        heapq.heappush(busy, t + latency / 1000)
        alive_s += latency / 1000
        peak = max(peak, len(busy))
        if i % WALL_CHECK_EVERY == WALL_CHECK_EVERY - 1 and time.perf_counter() > deadline:
            latencies, answered = latencies[: i + 1], answered[: i + 1]
            window_s, cut_short = max(float(t), 1e-3), True
            notes.append(f"stopped by the time bound after {time.perf_counter() - started:.1f} s at {i + 1:,} requests")
            break
    alive_s += sum(min(idle_timeout_s, window_s - s) for s in idle)
    n = len(latencies)
    result = PoolResult(
        n,
        cold_starts,
        latencies[answered]
        + (
            np.asarray(overhead_draws_ms, dtype=float)[: len(latencies)][answered]
            if overhead_draws_ms is not None
            else rng.choice(overhead_ms, int(answered.sum()))
            if np.ndim(overhead_ms)
            else float(overhead_ms)
        ),
        peak,
        alive_s,
        window_s,
        cut_short,
        time.perf_counter() - started,
        notes,
        throttled=throttled,
    )
    result.on_provisioned = on_provisioned[:n][answered]
    result.cold = started_cold[:n][answered]
    return result


def _row(result: SummaryResult | dict) -> SummaryResult:
    """A summary's row, typed (a stored row's dict is validated)."""
    return result if isinstance(result, SummaryResult) else SummaryResult.model_validate(result)


def combination_under_traffic(
    result: SummaryResult,
    traffic: Traffic,
    seed: int = 0,
    snapstart_restore_ms: float | None = None,
    budget: Budget | None = None,
) -> dict:
    """A measured (or predicted) combination under `traffic`: cold-start share, throttled share,
    latency percentiles including cold starts (of the answered requests), peak instances and the
    bill over the duration, on demand; and the alternatives priced: provisioned concurrency (as
    many instances as the on-demand pool kept busy at its peak, and as the mean it kept alive) and
    SnapStart (where the combination may use it: `core.lambda_rules`), billed as AWS bills them
    (see the module's docstring). `snapstart_restore_ms`: the snapshot's restore latency (None: the
    price file's assumption). Its simulations take their arrivals from `budget` (a fresh one:
    `SIMULATIONS_PER_ROW` x `MAX_EVENTS`); thinned arrivals are scaled back and the row says so
    (`thinned`, `notes`)."""
    budget = budget or Budget(events=SIMULATIONS_PER_ROW * MAX_EVENTS, wall_s=SIMULATIONS_PER_ROW * MAX_WALL_S)
    warm = latency_quantiles(result.latency_ms.model_dump(exclude_unset=True))
    combo = result.combo
    region = (result.cost.price_region if result.cost else None) or load_prices().default_region
    prices = load_prices().region(region)
    billing = load_billing()
    fit = fit_of_row(result)
    ephemeral_mb = fit.ephemeral_storage_mb if fit else billing.free_ephemeral_storage_mb
    gb = combo.memory_mb / 1024
    cold_split = result.cold_start_ms
    share = max(1, (budget.events - budget.used) // SIMULATIONS_PER_ROW)
    arrived = window_of(traffic, np.random.default_rng(seed), share)  # the same requests for every way of serving
    kept, window, cut = arrived.kept, arrived.window_s, arrived.cut_short
    scaling = Scaling.lambdas(traffic.limit)
    service_s = float(np.mean(draw_latencies(warm, np.random.default_rng(seed), 1000))) / 1000

    def run(cold_ms: float, provisioned: int = 0) -> PoolResult | None:
        """A simulation of the window's arrivals, if the budget still holds them (None: it does not)."""
        granted = budget.take(len(arrived.times))
        if granted < len(arrived.times) or (options and time.perf_counter() > budget.deadline):
            budget.give_back(granted)
            return None
        rng = np.random.default_rng(seed + 1)  # and the same warm latencies
        times, refused = arrived.times, 0
        if kept < 1:  # thinned: Lambda's scaling rules by the fluid model, the rest simulated without them
            throttled = fluid_throttled(
                times, window, kept, service_s, scaling, provisioned, np.random.default_rng(seed + 2)
            )
            times, refused = times[~throttled], int(throttled.sum())
        pool = simulate(
            times,
            warm,
            cold_ms,
            traffic.idle_timeout_s,
            rng,
            window,
            cut,
            provisioned=thinned(provisioned),
            deadline=budget.deadline,
            scaling=scaling if kept == 1 else None,
        )
        pool.requests += refused
        pool.throttled += refused
        budget.give_back(len(arrived.times) - pool.requests)  # stopped early by the clock
        return pool

    def figures(
        pool: PoolResult,
        option: str,
        extra_usd: float = 0.0,
        duration_price: float | None = None,
        kept_n: int = 0,
        unbilled_cold_ms: float = 0.0,
        cold_ms: float = 0.0,
    ) -> dict:
        """An option's figures; `unbilled_cold_ms` of a cold start's `cold_ms` is latency AWS does not bill
        (SnapStart's snapshot restore), spread as the cold start is."""
        scale = traffic.duration_s / pool.window_s / kept if pool.window_s else 0.0
        billed_ms = pool.latencies_ms.copy()
        if unbilled_cold_ms and cold_ms and pool.cold is not None:
            billed_ms[pool.cold] *= 1 - unbilled_cold_ms / cold_ms
        billed = np.ceil(billed_ms) / 1000
        on_kept = pool.on_provisioned if pool.on_provisioned is not None else np.zeros(len(billed), dtype=bool)
        compute = float(billed[~on_kept].sum()) * gb * prices.per_gb_second(combo.hardware)
        if duration_price is not None:
            compute += float(billed[on_kept].sum()) * gb * duration_price
        compute += billing.ephemeral_storage_usd(ephemeral_mb, float(billed.sum()), region)
        requests = pool.requests * scale
        answered = (pool.requests - pool.throttled) * scale  # a throttled request is not billed
        bill = compute * scale + answered * prices.per_million_requests_usd / 1e6 + extra_usd
        p = np.percentile(pool.latencies_ms, [50, 99, 99.9]) if len(pool.latencies_ms) else [float("nan")] * 3
        # the p99 the pick judges: a throttled request counts as slower than any answer
        rank = math.ceil(0.99 * pool.requests) - 1  # the p99's rank among all requests, the throttled last
        p99_all = float(np.sort(pool.latencies_ms)[rank]) if 0 <= rank < len(pool.latencies_ms) else None
        on_demand_peak = pool.peak_instances if kept == 1 else math.ceil(pool.peak_instances / kept)
        return {
            "option": option,
            "cold_share": pool.cold_share,
            "throttled_share": pool.throttled_share,
            "throttled": pool.throttled * scale,
            "p50_ms": float(p[0]),
            "p99_ms": float(p[1]),
            "p999_ms": float(p[2]),
            "p99_counting_throttled_ms": p99_all,
            "peak_instances": min(traffic.limit, on_demand_peak + kept_n),  # a thinned pool's peak overshoots
            "bill_usd": bill,
            "requests": requests,
        }

    def thinned(instances: int) -> int:
        """Instances of the full traffic as the thinned simulation holds them."""
        return instances if kept == 1 or not instances else max(1, round(instances * kept))

    options: list[dict] = []
    on_demand = run(cold_split.total)
    if on_demand is None:
        raise TrafficError("the simulation budget of this request is spent: ask for fewer combinations")
    options.append(figures(on_demand, "on demand"))
    mean_alive = on_demand.instance_seconds / on_demand.window_s / kept if on_demand.window_s else 0.0
    peak = on_demand.peak_instances if kept == 1 else math.ceil(on_demand.peak_instances / kept)
    notes = list(on_demand.notes)
    left_out = []
    provisioned_prices = prices.provisioned(combo.hardware)
    if provisioned_prices:
        kept_price, duration_price = provisioned_prices
        provisioned_s = billing.provisioned_seconds(traffic.duration_s)  # billed in 5-minute steps
        for n in sorted({min(traffic.limit, max(1, math.ceil(mean_alive))), min(traffic.limit, peak)}):
            pool = run(cold_split.total, provisioned=n)
            if pool is None:
                left_out.append(f"provisioned {n}")
                continue
            options.append(figures(pool, f"provisioned {n}", n * gb * provisioned_s * kept_price, duration_price, n))
    snapstart_priced = prices.snapstart_cache_per_gb_second_usd and prices.snapstart_restore_per_gb_usd
    if fit is None:
        notes.append("SnapStart not priced: its eligibility is unknown (the row names no model)")
    elif not fit.snapstart:
        notes.append(f"no SnapStart: {fit.snapstart_reason}")
    elif snapstart_priced and cold_split.first_inference is not None:
        # a snapshot taken after the imports and the model load: a cold start restores it (latency AWS does
        # not bill), loads the runtime and runs the after-restore hooks (the billed restore), then answers
        restore_ms = billing.snapstart_restore_latency_ms if snapstart_restore_ms is None else snapstart_restore_ms
        restored_ms = restore_ms + billing.snapstart_billed_restore_ms + cold_split.first_inference
        pool = run(restored_ms)
        if pool is None:
            left_out.append("SnapStart")
        else:
            scale = traffic.duration_s / pool.window_s / kept if pool.window_s else 0.0
            fees = (
                gb * billing.snapstart_cache_seconds(traffic.duration_s) * prices.snapstart_cache_per_gb_second_usd
                + pool.cold_starts * scale * gb * prices.snapstart_restore_per_gb_usd
            )
            options.append(
                {
                    **figures(pool, "SnapStart (estimate)", fees, unbilled_cold_ms=restore_ms, cold_ms=restored_ms),
                    "restores": pool.cold_starts * scale,
                    "assumption": (
                        f"snapshot restore {restore_ms:g} ms (assumed, not billed) + billed restore "
                        f"{billing.snapstart_billed_restore_ms:g} ms (the runtime's load "
                        f"{billing.snapstart_runtime_load_ms:g} ms, assumed, + after-restore hooks "
                        f"{billing.snapstart_after_restore_hooks_ms:g} ms) + the first inference "
                        f"{cold_split.first_inference:.0f} ms; cache billed "
                        f"{billing.snapstart_cache_seconds(traffic.duration_s) / 3600:g} h"
                    ),
                }
            )
    if on_demand.cut_short and not on_demand.notes:
        notes.append(f"{on_demand.window_s / 3600:.1f} h simulated ({on_demand.requests:,} requests), scaled")
    if kept < 1:
        notes.append(
            f"thinned: 1 arrival in {1 / kept:,.0f} simulated ({on_demand.requests:,} of "
            f"{on_demand.requests / kept:,.0f} in {window:,.0f} s), counts and bill scaled back"
        )
    if on_demand.throttled:
        notes.append(
            f"throttled {on_demand.throttled_share:.2%} on demand (concurrency limit {traffic.limit:,}, "
            f"scaling {load_limits().concurrency.scaling_per_10_s:,} environments per 10 s)"
        )
    if ephemeral_mb > billing.free_ephemeral_storage_mb:
        notes.append(
            f"ephemeral storage {ephemeral_mb} MB: {ephemeral_mb - billing.free_ephemeral_storage_mb} MB priced"
        )
    if left_out:
        notes.append(f"not simulated (the request's simulation budget was spent): {', '.join(left_out)}")
    best = options[0]
    keys = ("cold_share", "throttled_share", "throttled", "p50_ms", "p99_ms", "p999_ms", "peak_instances")
    return {
        "combination": result.label,
        "predicted": result.predicted,
        **{k: best[k] for k in (*keys, "bill_usd", "requests")},
        "mean_instances": mean_alive,
        "options": options,
        "simulated_requests": on_demand.requests,
        "simulated_s": on_demand.window_s,
        "thinned": kept < 1,
        "kept": kept,
        "notes": notes,
    }


def pickable(option: dict, slo_p99_ms: float | None) -> bool:
    """The pick's rule: at most `THROTTLE_PICK_MAX` of the requests throttled, and with an SLO, the
    p99 counting each throttled request as slower than any answer within it."""
    if option.get("throttled_share", 0.0) > THROTTLE_PICK_MAX:
        return False
    if slo_p99_ms is None:
        return True
    p99 = option.get("p99_counting_throttled_ms", option["p99_ms"])
    return p99 is not None and p99 <= slo_p99_ms


def traffic_report(
    summary: RunSummary | dict, traffic: Traffic, slo_p99_ms: float | None = None, budget: Budget | None = None
) -> dict:
    """Every timed combination of a run under `traffic`, and the cheapest (combination, way of
    serving it: on demand, provisioned concurrency, SnapStart) that `pickable` allows: its p99
    including cold starts meets the SLO (none given: the cheapest) and it throttles at most 1 % of
    its requests. All rows share one `budget` (a fresh one: `REQUEST_EVENTS`
    arrivals, `REQUEST_WALL_S`): each row's simulations get an equal share of at least
    `MIN_SIMULATION_EVENTS`, and rows past what the budget holds are left out (`left_out` says how many)."""
    budget = budget or Budget()
    results = summary.results if isinstance(summary, RunSummary) else map(_row, summary["results"])
    timed = [
        r for r in results if not r.emulated and not r.host_limited and (r.confined is not False or is_estimated(r))
    ]  # an unconfined estimate (`core/lambda_model/unconfined.py`) stands for its memory size
    if not timed:
        raise TrafficError("the run has no combination timed as Lambda would run it: nothing to simulate")
    fits = max(1, (budget.events - budget.used) // (SIMULATIONS_PER_ROW * MIN_SIMULATION_EVENTS))
    rows = []
    for i, r in enumerate(timed[:fits]):
        if rows and time.perf_counter() > budget.deadline:
            break
        share = Budget(
            events=(budget.events - budget.used) // (min(len(timed), fits) - i), wall_s=0, started=budget.deadline
        )  # this row's equal share of what is left, within the request's deadline
        rows.append(combination_under_traffic(r, traffic, budget=share))
        budget.used += share.used
    meeting = [(r, o) for r in rows for o in r["options"] if pickable(o, slo_p99_ms)]
    best = min(meeting, key=lambda ro: (ro[1]["bill_usd"], ro[1]["p99_ms"])) if meeting else None
    pick = f"{best[0]['combination']} ({best[1]['option']})" if best else None
    limits = load_limits()
    return {
        "traffic": {
            "rps": traffic.rps,
            "pattern": traffic.pattern,
            "idle_timeout_s": traffic.idle_timeout_s,
            "duration_s": traffic.duration_s,
            "concurrency_limit": traffic.limit,
            "concurrency_limit_source": traffic.limit_source,
            "scaling_per_10_s": limits.concurrency.scaling_per_10_s,
        },
        "slo_p99_ms": slo_p99_ms,
        "pick_rule": (
            f"the cheapest way of serving that throttles at most {THROTTLE_PICK_MAX:.0%} of its requests"
            + (
                ", with its p99 (a throttled request counted as slower than any answer) within the SLO"
                if slo_p99_ms
                else ""
            )
        ),
        "rows": sorted(rows, key=lambda r: r["bill_usd"]),
        "recommended": pick,
        "simulated_events": budget.used,
        "event_budget": budget.events,
        "thinned": any(r["thinned"] for r in rows),
        "throttled": any(o["throttled"] for r in rows for o in r["options"]),
        "left_out": len(timed) - len(rows),
    }
