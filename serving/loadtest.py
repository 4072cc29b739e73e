"""`ayci loadtest`: the endpoint driven by Locust, beside the traffic simulation's prediction.

The endpoint runs in this process (`app.ServerThread`, loopback only); Locust runs headless in
a subprocess (`locustfile.py`), bounded by the duration and a request limit. The traffic: Poisson
at `rps` (`steady`), or with bursts of `core.lambda_model.traffic.BURST_MULTIPLIER` x `rps` (`spiky`: one
burst in the middle of each half of the test, a sixth of the half long: the simulation's
30 s of every 10 min, compressed into a test of minutes). Every request is logged (sent at,
model, status, latency, whether it waited for a cold load) and the models' workers and queues
are sampled four times a second.

The prediction: `core.lambda_model.traffic.combination_under_traffic` on the arrival times the test actually
sent to each model (a CSV of arrivals, `Traffic(pattern=FILE)`), the endpoint's idle time as
the idle timeout, the model's measured result. p99 and cold-start share are compared within
`TOLERANCE`; where they differ more, only the differences this test measured (HTTP overhead,
waits for cold loads, the scaler's queue, few cold starts) are named, each with how much of the
gap it can account for, and the verdict says whether the rest is within the tolerance (`compare`).
"""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from core.lambda_model.prediction import latency_quantiles
from core.lambda_model.traffic import BURST_MULTIPLIER, Traffic, arrivals, combination_under_traffic, simulate
from serving.endpoint import TICK_S

TOLERANCE = 0.15
SAMPLE_S = 0.25
BURSTS = 2  # one in each half of the test
BURST_SHARE = 1 / 6  # of each half
PATTERNS = ("steady", "spiky")
MAX_RPS = 200.0  # what Locust and the endpoint can do together on a small machine
MAX_DURATION_S = 3600.0


@dataclass(frozen=True)
class LoadPlan:
    rps: float
    duration_s: float
    pattern: str = "steady"
    per_user_rps: float = 1.0  # each Locust user's mean rate

    def __post_init__(self) -> None:
        if self.pattern not in PATTERNS:
            raise ValueError(f"pattern: steady or spiky, got {self.pattern!r}")
        if not (math.isfinite(self.rps) and 0 < self.rps <= MAX_RPS):
            raise ValueError(f"rps: above 0 and at most {MAX_RPS:g}, got {self.rps:g}")
        if not (math.isfinite(self.duration_s) and 5 <= self.duration_s <= MAX_DURATION_S):
            raise ValueError(f"duration: from 5 s to {MAX_DURATION_S:g} s, got {self.duration_s:g}")

    @property
    def max_requests(self) -> int:
        """The request limit: twice what the plan should send, and 100 more."""
        peak = self.rps * (1 + (BURST_MULTIPLIER - 1) * BURST_SHARE) if self.pattern == "spiky" else self.rps
        return int(2 * peak * self.duration_s) + 100

    def env(self) -> dict[str, str]:
        return {"AYCI_LOAD_PLAN": json.dumps(asdict(self))}

    @classmethod
    def from_env(cls, env) -> LoadPlan:
        return cls(**json.loads(env["AYCI_LOAD_PLAN"]))


def rate_at(plan: LoadPlan, t: float) -> float:
    """Requests per second the plan asks for at `t` s into the test."""
    if plan.pattern == "spiky":
        half = plan.duration_s / BURSTS
        into = t % half
        if half / 2 <= into < half / 2 + half * BURST_SHARE:
            return plan.rps * BURST_MULTIPLIER
    return plan.rps


def users_at(plan: LoadPlan, t: float) -> int | None:
    """Locust users at `t` (None: the test is over)."""
    if t >= plan.duration_s:
        return None
    return max(1, round(rate_at(plan, t) / plan.per_user_rps))


# --- running it
def run_loadtest(endpoint, plan: LoadPlan, out_dir: Path, app) -> dict:
    """Drive `endpoint` (already started; `app` its HTTP app) with Locust by `plan`; the report
    (also written to `out_dir/report.json`, with `requests.csv`, `samples.json`, `loadtest.png`)."""
    from serving.app import ServerThread
    from serving.wire import pack

    out_dir.mkdir(parents=True, exist_ok=True)
    bodies = out_dir / "bodies"
    bodies.mkdir(exist_ok=True)
    for name, model in endpoint.models.items():  # the run's own reference inputs, as a binary body
        with np.load(model.reference_path, allow_pickle=False) as reference:
            inputs = {k.split(":", 1)[1]: reference[k] for k in reference.files if k.startswith("input:")}
        (bodies / f"{name}.npz").write_bytes(pack(inputs))
    log_path = out_dir / "requests.csv"
    samples: list[dict] = []
    stop = threading.Event()
    with ServerThread(app) as url:
        started = time.time()
        sampler = threading.Thread(target=_sample, args=(endpoint, samples, started, stop), daemon=True)
        sampler.start()
        locust = _run_locust(url, plan, bodies, log_path, out_dir)
        stop.set()
        sampler.join()
    (out_dir / "samples.json").write_text(json.dumps(samples))
    requests = read_requests(log_path, started)
    report = {"plan": asdict(plan), "locust": locust, "models": {}, "out_dir": str(out_dir)}
    state = {row["model"]: row for row in endpoint.state()}
    for name, model in endpoint.models.items():
        mine = [r for r in requests if r["model"] == name]
        observed = observed_figures(mine, samples, name, state[name])
        stored = model.result.model_dump(mode="json", exclude_unset=True)  # as the run's summary has it
        predicted = predicted_figures(
            stored,
            [r["t"] for r in mine],
            plan,
            endpoint.policy.idle_s,
            endpoint.policy.max_workers,
            out_dir / f"arrivals-{name}.csv",
        )
        report["models"][name] = {
            "combination": model.label,
            "run_id": model.run_id,
            "observed": observed,
            "predicted": predicted,
            "comparison": compare(observed, predicted, stored),
        }
    plot(requests, samples, plan, out_dir / "loadtest.png")
    report["plot"] = str(out_dir / "loadtest.png")
    (out_dir / "report.json").write_text(json.dumps(report, indent=1))
    return report


def _sample(endpoint, samples: list[dict], started: float, stop: threading.Event) -> None:
    while not stop.wait(SAMPLE_S):
        samples.append(
            {
                "t": time.time() - started,
                "models": {
                    r["model"]: {
                        "workers": r["workers"],
                        "starting": r["starting"],
                        "queue": r["queue_depth"],
                        "loaded": r["loaded"],
                    }
                    for r in endpoint.state()
                },
            }
        )


def _run_locust(url: str, plan: LoadPlan, bodies: Path, log_path: Path, out_dir: Path) -> dict:
    """Locust headless against `url` (loopback), bounded by the plan's duration (its shape),
    `--run-time` and a timeout of its own; its exit and the tail of its output."""
    if not url.startswith("http://127.0.0.1:"):
        raise ValueError(f"the load test drives a loopback endpoint only, not {url}")
    locustfile = Path(__file__).with_name("locustfile.py")
    command = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(locustfile),
        "--headless",
        "--host",
        url,
        "--run-time",
        f"{math.ceil(plan.duration_s) + 5}s",
        "--stop-timeout",
        "5",
        "--only-summary",
        "--loglevel",
        "WARNING",
    ]
    env = {
        **os.environ,
        **plan.env(),
        "AYCI_LOAD_BODIES": str(bodies),
        "AYCI_LOAD_LOG": str(log_path),
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
    }
    with open(out_dir / "locust.log", "w+") as output:
        try:
            code = subprocess.run(
                command, env=env, stdout=output, stderr=subprocess.STDOUT, timeout=plan.duration_s + 60
            ).returncode
        except subprocess.TimeoutExpired:
            code = None
        output.seek(0)
        tail = output.read()[-2000:]
    return {"exit_code": code, "log": str(out_dir / "locust.log"), "tail": tail}


def read_requests(path: Path, started: float) -> list[dict]:
    if not path.exists():
        return []
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    return sorted(
        (
            {
                "t": float(r["sent_at"]) - started,
                "model": r["model"],
                "status": int(r["status"]),
                "latency_ms": float(r["latency_ms"]),
                "cold": r["cold"] == "1",
            }
            for r in rows
        ),
        key=lambda r: r["t"],
    )


# --- the figures
def observed_figures(requests: list[dict], samples: list[dict], name: str, state: dict) -> dict:
    answered = [r for r in requests if r["status"] == 200]
    latencies = np.array([r["latency_ms"] for r in answered])
    errors: dict[str, int] = {}
    for r in requests:
        if r["status"] != 200:
            errors[str(r["status"] or "connection")] = errors.get(str(r["status"] or "connection"), 0) + 1
    p50, p90, p95, p99 = np.percentile(latencies, [50, 90, 95, 99]) if len(latencies) else [float("nan")] * 4
    waited = sum(r["cold"] for r in answered)
    cold_starts = sum(state["loads"].values())  # workers started: each a cold start, as an instance's on Lambda
    workers = [s["models"][name]["workers"] + s["models"][name]["starting"] for s in samples if name in s["models"]]
    queued = [s["models"][name]["queue"] for s in samples if name in s["models"]]
    return {
        "requests": len(requests),
        "answered": len(answered),
        "errors": errors,
        "p50_ms": float(p50),
        "p90_ms": float(p90),
        "p95_ms": float(p95),
        "p99_ms": float(p99),
        "cold_starts": cold_starts,
        "cold_share": cold_starts / len(answered) if answered else 0.0,
        "waited_for_load": waited,
        "waited_share": waited / len(answered) if answered else 0.0,
        "loads": state["loads"],
        "evictions": state["evictions"],
        "lost_workers": state["lost_workers"],
        "peak_workers": max(workers, default=0),
        "peak_queue": max(queued, default=0),
    }


def predicted_figures(
    result: dict, sent_at: list[float], plan: LoadPlan, idle_s: float, max_workers: int, arrivals_csv: Path
) -> dict | None:
    """The simulation on the same arrivals (None: too few requests to simulate): as a Lambda
    pool (`combination_under_traffic`, on demand: no cap on instances) and as the endpoint's pool
    (`simulate` with the endpoint's cap on workers: requests queue at the cap)."""
    if len(sent_at) < 2:
        return None
    arrivals_csv.write_text("seconds\n" + "\n".join(f"{t:.6f}" for t in sent_at) + "\n")
    traffic = Traffic(
        rps=max(len(sent_at) / plan.duration_s, 1e-3),
        pattern=str(arrivals_csv),
        idle_timeout_s=idle_s,
        duration_s=max(60.0, plan.duration_s),
    )
    lambda_pool = combination_under_traffic(result, traffic)
    times, window, cut = arrivals(traffic, np.random.default_rng(0))
    capped = simulate(
        times,
        latency_quantiles(result["latency_ms"]),
        result["cold_start_ms"]["total"],
        idle_s,
        np.random.default_rng(1),
        window,
        cut,
        max_instances=max_workers,
    )
    p50, p90, p95, p99 = np.percentile(capped.latencies_ms, [50, 90, 95, 99])
    return {
        "cold_share": capped.cold_share,
        "cold_starts": capped.cold_starts,
        "p50_ms": float(p50),
        "p90_ms": float(p90),
        "p95_ms": float(p95),
        "p99_ms": float(p99),
        "peak_instances": capped.peak_instances,
        "simulated_requests": capped.requests,
        "lambda": {k: lambda_pool[k] for k in ("cold_share", "p50_ms", "p99_ms", "peak_instances")},
    }


def within(observed: float, predicted: float) -> bool:
    if predicted == 0:
        return observed == 0
    return abs(observed - predicted) / predicted <= TOLERANCE


@dataclass(frozen=True)
class Cause:
    """A measured difference between the endpoint and the simulation, and how much of a gap
    (in the figure's unit, in the gap's direction) it can account for."""

    reason: str
    allowance: float


def compare(observed: dict, predicted: dict | None, result: dict) -> dict:
    """The load test against the simulation of the same arrivals: each figure (p99, cold-start
    share) agrees when it is within `TOLERANCE` of the prediction, or when the causes this test
    measured (`p99_causes`, `cold_share_causes`) account for the rest of the gap; the verdict is
    "agrees" when both figures do, "disagrees" otherwise. `explained` names only the measured
    causes behind a gap, `unexplained` each gap they leave."""
    if predicted is None:
        return {
            "verdict": None,
            "p99_within": None,
            "cold_share_within": None,
            "explained": [],
            "unexplained": ["too few requests reached this model to simulate"],
        }
    cold_ms = result["cold_start_ms"]["total"]
    figures = {
        "p99": (observed["p99_ms"], predicted["p99_ms"], p99_causes(observed, predicted, cold_ms), "ms"),
        "cold_share": (observed["cold_share"], predicted["cold_share"], cold_share_causes(observed, predicted), ""),
    }
    report: dict = {"explained": [], "unexplained": []}
    for name, (seen, guess, causes, unit) in figures.items():
        gap = seen - guess
        slack = TOLERANCE * guess
        report[f"{name}_within"] = within(seen, guess)
        report[f"{name}_ratio"] = seen / guess if guess else None
        if report[f"{name}_within"]:
            report[f"{name}_agrees"] = True
            continue
        allowed = slack + sum(c.allowance for c in causes)
        report[f"{name}_agrees"] = abs(gap) <= allowed
        report["explained"].extend(c.reason for c in causes)
        if not report[f"{name}_agrees"]:
            label = "p99" if name == "p99" else "cold-start share"
            shown = (lambda v: f"{v:.1f} ms") if unit == "ms" else (lambda v: f"{v:.2%}")
            report["unexplained"].append(
                f"the {label} observed, {shown(seen)}, is {shown(abs(gap))} {'above' if gap > 0 else 'below'} the "
                f"simulated {shown(guess)}; the tolerance ({TOLERANCE:.0%}) and the measured causes account for "
                f"{shown(allowed)}"
            )
    report["verdict"] = "agrees" if report["p99_agrees"] and report["cold_share_agrees"] else "disagrees"
    return report


def p99_causes(observed: dict, predicted: dict, cold_ms: float) -> list[Cause]:
    """What this test measured that moves its p99 away from the simulated one, in the gap's direction."""
    gap = observed["p99_ms"] - predicted["p99_ms"]
    tail_rank = max(1, round(observed["answered"] * 0.01))
    causes = []
    if gap > 0:
        overhead = observed["p50_ms"] - predicted["p50_ms"]
        if overhead > TOLERANCE * predicted["p50_ms"]:
            causes.append(
                Cause(
                    f"HTTP, the body's (de)serialization and Locust add about {overhead:.1f} ms a request (p50 "
                    f"{observed['p50_ms']:.1f} ms against the simulated {predicted['p50_ms']:.1f} ms)",
                    overhead,
                )
            )
        if observed["waited_for_load"] >= tail_rank and predicted["cold_starts"] < tail_rank:
            causes.append(
                Cause(
                    f"{observed['waited_for_load']} requests waited for {observed['cold_starts']} cold loads (every "
                    "request queued while the only workers load waits for them, where the simulation charges a cold "
                    f"start to the request that caused it): with {observed['answered']} requests the observed p99 "
                    f"(about the {tail_rank}. slowest) falls on a wait of up to the {cold_ms:.0f} ms cold start, the "
                    f"simulated one on warm requests ({predicted['cold_starts']} cold starts)",
                    cold_ms,
                )
            )
        if predicted["cold_starts"] > observed["cold_starts"] and observed.get("peak_queue", 0) > 0:
            causes.append(
                Cause(
                    f"up to {observed['peak_queue']} requests queued where the simulation started an instance: the "
                    f"scaler adds a worker only if requests still wait at its next look (every {TICK_S * 1000:.0f} ms)",
                    TICK_S * 1000,
                )
            )
    elif predicted["cold_starts"] >= tail_rank and observed["waited_for_load"] < tail_rank:
        causes.append(
            Cause(
                f"with {observed['answered']} requests the p99 is about the {tail_rank}. slowest: the simulated p99 "
                f"falls on its {predicted['cold_starts']} cold starts ({cold_ms:.0f} ms measured), the load test's "
                f"on warm requests (only {observed['waited_for_load']} waited for a load)",
                cold_ms,
            )
        )
    return causes


def cold_share_causes(observed: dict, predicted: dict) -> list[Cause]:
    """What this test measured that moves its cold-start share away from the simulated one: few
    cold starts, where one more or less is within counting noise (two standard deviations of a
    Poisson count of the simulated number)."""
    answered = max(1, observed["answered"])
    noise = 2 * math.sqrt(max(1, predicted["cold_starts"]))
    if abs(observed["cold_starts"] - predicted["cold_starts"]) > noise:
        return []
    return [
        Cause(
            f"the cold shares rest on {observed['cold_starts']} cold loads observed and {predicted['cold_starts']} "
            f"simulated out of {observed['answered']} requests, a difference within counting noise "
            f"(2 x sqrt({max(1, predicted['cold_starts'])}) = {noise:.1f} loads)",
            noise / answered,
        )
    ]


def plot(requests: list[dict], samples: list[dict], plan: LoadPlan, path: Path) -> None:
    """Latency of every request against time (cold loads and errors marked) above the workers
    of each model and the traffic's rate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(11, 7), height_ratios=[3, 2])
    for label, chosen, style in (
        ("warm", lambda r: r["status"] == 200 and not r["cold"], dict(s=6, color="tab:blue", alpha=0.5)),
        ("waited for a cold load", lambda r: r["status"] == 200 and r["cold"], dict(s=14, color="tab:orange")),
        ("refused / failed", lambda r: r["status"] != 200, dict(s=14, color="tab:red", marker="x")),
    ):
        picked = [r for r in requests if chosen(r)]
        if picked:
            top.scatter(
                [r["t"] for r in picked],
                [max(r["latency_ms"], 0.1) for r in picked],
                label=f"{label} ({len(picked)})",
                **style,
            )
    top.set_yscale("log")
    top.set_ylabel("latency (ms)")
    top.set_title(f"ayci loadtest: {plan.pattern}, {plan.rps:g} req/s for {plan.duration_s:g} s")
    top.legend(loc="upper right", fontsize=8)
    models = sorted({m for s in samples for m in s["models"]})
    times = [s["t"] for s in samples]
    for name in models:
        bottom.step(
            times,
            [
                s["models"].get(name, {}).get("workers", 0) + s["models"].get(name, {}).get("starting", 0)
                for s in samples
            ],
            where="post",
            label=f"{name} workers",
        )
    bottom.set_ylabel("workers (ready + loading)")
    bottom.set_xlabel("seconds into the test")
    rate = bottom.twinx()
    grid = np.linspace(0, plan.duration_s, 400)
    rate.plot(grid, [rate_at(plan, t) for t in grid], color="grey", linestyle=":", label="planned req/s")
    rate.set_ylabel("planned req/s")
    bottom.legend(loc="upper left", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
