"""The measuring process: `python -m measuring.measure SPEC.json SPAWNED_AT`.

Runs in a process of its own (started, and confined, by `launcher.py`), so its cold start
and peak memory are its own. Loads one artifact with one engine, checks its outputs against
the base model's reference outputs, warms up until timings settle, then times until both the
p50's and the p99's 95 % confidence intervals are tight (+-2 % and +-10 %), with at least
100 samples so the p99 is not the maximum of a handful (or until the time cap: then the
report says how many samples the p99 rests on and marks it an estimate). Prints one JSON object.

Imports stay minimal before the clock starts: the cold-start split is
process start -> engine imports -> model load (and compile, for engines that compile on load:
`COMPILES_ON_LOAD` in the engine module) -> first inference. Before the model-load mark the
process has imported only the engine's runtime (`import_runtime(artifact)` of the engine
module): no pydantic, no torch for an ONNX or TVM artifact. Which of the heavy libraries were
loaded at the mark is reported (`cold_start_ms.loaded_at_model_load`).
"""

import time

_MAIN_STARTED = time.time()

import contextlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402

import engines  # noqa: E402

RELATIVE_CI_TARGET = 0.02  # the p50's 95 % interval, relative half-width
RELATIVE_TAIL_TARGET = 0.10  # the p99's 95 % interval, relative half-width
TAIL_MIN_SAMPLES = 100  # below this the p99 is an estimate (the max of a few samples)
WATCHED_MODULES = ("torch", "onnxruntime", "tvm", "onnx", "pydantic", "numpy")
WARMUP_WINDOW = 5
WARMUP_SETTLE = 0.05  # warm-up ends when a window's median moves less than this


def median_ci(samples: list[float]) -> tuple[float, float, float]:
    """Median and its distribution-free 95 % confidence interval (order statistics)."""
    ordered = sorted(samples)
    n = len(ordered)
    median = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    half = 1.96 * math.sqrt(n) / 2
    low = ordered[max(0, math.floor(n / 2 - half) - 1)]
    high = ordered[min(n - 1, math.ceil(n / 2 + half))]
    return median, low, high


def quantile_ci(ordered: list[float], q: float) -> tuple[float, float]:
    """The distribution-free 95 % confidence interval of the q-quantile of sorted samples:
    the order statistics at n*q -+ 1.96 sqrt(n q (1 - q)) (binomial ranks)."""
    n = len(ordered)
    half = 1.96 * math.sqrt(n * q * (1 - q))
    return ordered[max(0, math.floor(n * q - half) - 1)], ordered[min(n - 1, math.ceil(n * q + half))]


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    rank = q / 100 * (len(ordered) - 1)
    lo, hi = math.floor(rank), math.ceil(rank)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def timed(run, inputs) -> float:
    started = time.perf_counter()
    run(inputs)
    return (time.perf_counter() - started) * 1000


def warm_up(run, inputs, cap_s: float) -> int:
    """Run until the median of consecutive windows settles; returns iterations run."""
    deadline = time.perf_counter() + cap_s
    previous, count = None, 0
    while time.perf_counter() < deadline:
        window = sorted(timed(run, inputs) for _ in range(WARMUP_WINDOW))
        count += WARMUP_WINDOW
        current = window[WARMUP_WINDOW // 2]
        if previous is not None and abs(current - previous) <= WARMUP_SETTLE * previous:
            break
        previous = current
    return count


def converged(samples: list[float]) -> bool:
    """The p50 within +-2 % and the p99 within +-10 % (95 % intervals), on at least 100 samples."""
    if len(samples) < TAIL_MIN_SAMPLES:
        return False
    median, low, high = median_ci(samples)
    if (high - low) / 2 > RELATIVE_CI_TARGET * median:
        return False
    ordered = sorted(samples)
    tail_low, tail_high = quantile_ci(ordered, 0.99)
    return (tail_high - tail_low) / 2 <= RELATIVE_TAIL_TARGET * percentile(ordered, 99)


def measure_warm(run, inputs, min_iterations: int, cap_s: float) -> dict:
    samples: list[float] = []
    deadline = time.perf_counter() + cap_s
    done = False
    while time.perf_counter() < deadline:
        samples.append(timed(run, inputs))
        if len(samples) >= min_iterations and len(samples) % 10 == 0 and converged(samples):
            done = True
            break
    while len(samples) < 3:  # a run slower than its cap still reports something
        samples.append(timed(run, inputs))
    median, low, high = median_ci(samples)
    mean = sum(samples) / len(samples)
    std = math.sqrt(sum((s - mean) ** 2 for s in samples) / max(1, len(samples) - 1))
    tail_low, tail_high = quantile_ci(sorted(samples), 0.99)
    return {
        "p50": median,
        "p90": percentile(samples, 90),
        "p95": percentile(samples, 95),
        "p99": percentile(samples, 99),
        "mean": mean,
        "min": min(samples),
        "max": max(samples),
        "ci95_low": low,
        "ci95_high": high,
        "cv": std / mean if mean else 0.0,
        "iterations": len(samples),
        "converged": done,
        # the p99 rests on this many samples; below 100 it is an estimate (close to the maximum)
        "p99_samples": len(samples),
        "p99_estimate": len(samples) < TAIL_MIN_SAMPLES,
        "p99_ci95_low": tail_low,
        "p99_ci95_high": tail_high,
        # Lambda bills each request rounded up to 1 ms: the mean of those is what a request costs
        "billed_ms_mean": sum(math.ceil(s) for s in samples) / len(samples),
    }


def peak_rss_mb() -> float:
    """This process's peak resident memory. VmHWM starts afresh at exec; `ru_maxrss` would
    carry over the parent's peak from before the fork."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def runtime_environment() -> dict:
    """The measuring process's own Python, machine and engine library versions (read from the
    installed distributions' metadata, after the timing)."""
    import platform
    from importlib import metadata

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "libraries": {name: version(name) for name in ("torch", "onnxruntime", "onnx", "apache-tvm", "numpy")},
    }


def read_reference(path: str) -> tuple[dict, list]:
    """The bound inputs and the base model's outputs the converter stored (`input:{name}`,
    `output:{i}`)."""
    import numpy as np

    reference = np.load(path)
    inputs = {k.split(":", 1)[1]: reference[k] for k in reference.files if k.startswith("input:")}
    return inputs, [reference[f"output:{i}"] for i in range(sum(k.startswith("output:") for k in reference.files))]


def judged_agreement(judge, run, reference_path: str, ref_outputs: list, outputs: list):
    """Agreement on every batch the reference holds (the timed one and its `check{j}:` batches:
    at least 32 samples whatever the batch size), judged as one; it says what it rests on
    (`samples`, `inputs`: synthetic or the user's). A reference stored before it held checks
    is judged on its one batch. The NLP judge counts only the tokens each input's attention mask
    keeps."""
    import numpy as np

    from workloads.agreement import over_batches

    reference = np.load(reference_path)
    references, produced = [list(ref_outputs)], [[np.asarray(o) for o in outputs]]
    fed = [{k.split(":", 1)[1]: reference[k] for k in reference.files if k.startswith("input:")}]
    checks = sorted({int(k.split(":")[0][5:]) for k in reference.files if k.startswith("check")})
    for j in checks:
        prefix = f"check{j}:"
        inputs = {k.split(":", 2)[2]: reference[k] for k in reference.files if k.startswith(prefix + "input:")}
        count = sum(k.startswith(prefix + "output:") for k in reference.files)
        references.append([reference[f"{prefix}output:{i}"] for i in range(count)])
        produced.append([np.asarray(o) for o in run(inputs)])
        fed.append(inputs)
    first = np.shape(ref_outputs[0]) if ref_outputs else ()
    samples = int(reference["basis:samples"]) if "basis:samples" in reference.files else (first[0] if first else 1)
    inputs_kind = str(reference["basis:inputs"]) if "basis:inputs" in reference.files else None
    return over_batches(judge, references, produced, samples=samples, inputs=inputs_kind, fed=fed)


TUNING_BUDGET_S = 8.0  # all candidates together (the default is always tried), at most half the (tuning) time cap
TUNING_TIMING_S = 1.0  # timing per candidate (less with a short time cap), at least TUNING_MIN_SAMPLES samples
TUNING_MIN_SAMPLES = 5
TUNING_MAX_SAMPLES = 25
AGREEMENT_SLACK = 1e-3  # a candidate agrees if it scores at least the default's score minus this
TUNING_MARGIN = 0.05  # settings other than the default win only when faster by this much, twice


def tuning_budget_s(spec: dict) -> float:
    """The session search's budget: `TUNING_BUDGET_S`, at most half its cap (`tuning_cap_s`, else the
    measurement's `time_cap_s`). A racing run's quick pass times its samples for a quarter of the cap and
    searches with a full measurement's budget: its settings are then the ones a refinement would find."""
    return min(TUNING_BUDGET_S, 0.5 * float(spec.get("tuning_cap_s") or spec["time_cap_s"]))


def tune(spec: dict) -> dict:
    """Try the engine's session settings one at a time (each released before the next):
    agreement with the reference, then a short timing. The default settings are kept unless the
    fastest that agrees beat them by `TUNING_MARGIN` in that screening and again when both are
    timed once more (the challenger first: in the screening the default ran first, on a cold
    process). One short timing each was not enough: on the example encoder at 2 threads the
    screening picked `basic` graph optimizations, which then measured 1.4x slower than the
    default in the benchmark's interleaved rounds."""
    import gc
    from pathlib import Path

    import numpy as np

    from workloads import workload_module

    engine = engines.module(spec["optimizer"])
    artifact, threads = Path(spec["artifact_path"]), int(spec["threads"])
    inputs, ref_outputs = read_reference(spec["reference_path"])
    judge = workload_module(spec["workload"]).agreement
    candidates = engine.tuning_candidates(threads)
    budget_s = tuning_budget_s(spec)
    timing_s = min(TUNING_TIMING_S, budget_s / (len(candidates) + 2))  # + the confirmation's two

    def p50_ms(run) -> tuple[float, int]:
        for _ in range(3):
            run(inputs)
        samples, deadline = [], time.perf_counter() + timing_s
        while len(samples) < TUNING_MIN_SAMPLES or (
            len(samples) < TUNING_MAX_SAMPLES and time.perf_counter() < deadline
        ):
            samples.append(timed(run, inputs))
        return sorted(samples)[len(samples) // 2], len(samples)

    started, tried, default_score = time.perf_counter(), [], None
    for settings in candidates:
        if tried and time.perf_counter() - started > budget_s - 2 * timing_s:
            tried.append({"settings": settings, "skipped": "the tuning budget was spent"})
            continue
        loaded = time.perf_counter()
        run = engine.load(artifact, threads, settings=settings)
        load_ms = (time.perf_counter() - loaded) * 1000
        score = judge(ref_outputs, [np.asarray(o) for o in run(inputs)]).score
        default_score = score if default_score is None else default_score
        entry = {"settings": settings, "load_ms": load_ms, "agreement": score}
        if score < default_score - AGREEMENT_SLACK:
            tried.append({**entry, "rejected": "agrees less than the default settings"})
        else:
            p50, count = p50_ms(run)
            tried.append({**entry, "p50_ms": p50, "samples": count})
        del run
        gc.collect()
    timed_ok = [t for t in tried if "p50_ms" in t]
    default, best = timed_ok[0], min(timed_ok, key=lambda t: t["p50_ms"])
    outcome = {"settings": default["settings"], "tried": tried}
    if best is not default and best["p50_ms"] < default["p50_ms"] * (1 - TUNING_MARGIN):
        again = {}
        for role, settings in (("challenger", best["settings"]), ("default", default["settings"])):
            run = engine.load(artifact, threads, settings=settings)
            again[role] = p50_ms(run)[0]
            del run
            gc.collect()
        confirmed = again["challenger"] < again["default"] * (1 - TUNING_MARGIN)
        outcome["confirmation"] = {
            "challenger_p50_ms": again["challenger"],
            "default_p50_ms": again["default"],
            "confirmed": confirmed,
        }
        if confirmed:
            outcome["settings"] = best["settings"]
    # the budget says the search is a full measurement's: a quick pass's search has the same (`tuning_budget_s`)
    return {**outcome, "tuning_s": time.perf_counter() - started, "budget_s": budget_s}


def profile(spec: dict) -> dict:
    """A profiled pass (never the combination's timing): the unprofiled p50 over `profile_runs`
        inferences after a warm-up, then the engine's profiler over as many (`profile` of the engine
        module: a Chrome trace and its operator calls), each profiled inference timed too, so the
        profiler's overhead is known. The trace, bounded (`core.profiles.bounded_trace`: a note in its
    `otherData` says what was cut), is written to `trace_path`, the rest reported."""
    from pathlib import Path

    engine = engines.module(spec["optimizer"])
    artifact, threads, runs = Path(spec["artifact_path"]), int(spec["threads"]), int(spec["profile_runs"])
    settings = spec.get("settings")
    inputs, _ = read_reference(spec["reference_path"])
    run = engine.load(artifact, threads, settings=settings) if settings else engine.load(artifact, threads)
    warm_up(run, inputs, cap_s=float(spec["time_cap_s"]) / 4)
    unprofiled = sorted(timed(run, inputs) for _ in range(runs))
    del run
    work = Path(spec["trace_path"]).parent
    trace, calls, run_ms = engine.profile(artifact, threads, inputs, runs, work, settings=settings)
    from core.profiles import MAX_TRACE_EVENTS, bounded_trace

    bounded, _ = bounded_trace(trace, max_events=spec.get("trace_max_events") or MAX_TRACE_EVENTS)
    Path(spec["trace_path"]).write_text(json.dumps(bounded))  # never an unbounded object, here or stored
    return {
        "calls": calls,
        "runs": runs,
        "unprofiled_p50_ms": unprofiled[len(unprofiled) // 2],
        "profiled_p50_ms": sorted(run_ms)[len(run_ms) // 2],
        "peak_rss_mb": peak_rss_mb(),
    }


def main(spec_path: str, spawned_at: float) -> dict:
    with open(spec_path) as file:
        spec = json.load(file)
    if spec.get("mode") == "tune":
        return tune(spec)
    if spec.get("mode") == "profile":
        return profile(spec)
    t_imports = time.time()
    from pathlib import Path

    artifact = Path(spec["artifact_path"])
    engine = engines.module(spec["optimizer"])
    engine.import_runtime(artifact)
    t_load = time.time()
    loaded_at_mark = [name for name in WATCHED_MODULES if name in sys.modules]
    settings = spec.get("settings")
    run = (
        engine.load(artifact, int(spec["threads"]), settings=settings)
        if settings
        else engine.load(artifact, int(spec["threads"]))
    )
    t_first = time.time()
    inputs, ref_outputs = read_reference(spec["reference_path"])
    outputs = run(inputs)
    t_done = time.time()
    from workloads import workload_module

    known = spec.get("known_agreement")  # judged already in this run: same artifact, threads and settings
    if known:
        agreement = {**known["agreement"], "judged_in": known.get("judged_in")}
    else:
        with quota_lifted(spec.get("quota_lift")):
            agreement = judged_agreement(
                workload_module(spec["workload"]).agreement, run, spec["reference_path"], ref_outputs, outputs
            ).as_dict()
    warmup_iterations = warm_up(run, inputs, cap_s=float(spec["time_cap_s"]) / 4)
    latency = measure_warm(run, inputs, int(spec["min_iterations"]), float(spec["time_cap_s"]))
    peak_mb = peak_rss_mb()  # before looking for where outputs diverge: that is not serving
    divergence = known.get("divergence") if known else None
    if not known and agreement["score"] < DIVERGENCE_BELOW and hasattr(engine, "first_divergent_node"):
        divergence = where_outputs_diverge(engine, artifact, inputs, int(spec["threads"]), settings)
    return {
        "cold_start_ms": {
            "process_start": (_MAIN_STARTED - spawned_at) * 1000,
            "imports": (t_load - t_imports) * 1000,
            "model_load": (t_first - t_load) * 1000,
            "first_inference": (t_done - t_first) * 1000,
            "total": (t_done - spawned_at) * 1000,
            "model_load_compiles": bool(getattr(engine, "COMPILES_ON_LOAD", False)),
            "loaded_at_model_load": loaded_at_mark,
            "artifact_bytes": artifact.stat().st_size,
        },
        "runtime": runtime_environment(),
        "latency_ms": latency,
        "warmup_iterations": warmup_iterations,
        "agreement": agreement,
        "peak_rss_mb": peak_mb,
        **({"engine_settings": settings} if settings else {}),
        **({"divergence": divergence} if divergence else {}),
    }


QUOTA_RESTORE_WAIT_S = 60.0  # how long the process waits for its launcher to restore its CPU quota


@contextlib.contextmanager
def quota_lifted(lift: dict | None):
    """Judging agreement runs the artifact on every reference batch (at least 32 samples): its outputs depend
    on the artifact, inputs, threads and settings, not on the CPU share, and at 512 MB's 0.29 vCPU it took 13 s
    of base's 42 s measurement. The launcher lifts this process's CPU quota meanwhile (`lift`: the sandbox's
    progress mark, the file it writes once the quota is back) and restores it before the warm-up; the process
    asks with a progress line each way and waits for the file before it goes on: nothing is timed unthrottled.
    The cold start before it was measured under the quota."""
    if not lift:
        yield
        return
    sys.stdout.write(f"\n{lift['mark']}quota:lift\n")
    sys.stdout.flush()
    try:
        yield
    finally:
        sys.stdout.write(f"\n{lift['mark']}quota:restore\n")
        sys.stdout.flush()
        deadline = time.monotonic() + float(lift.get("wait_s", QUOTA_RESTORE_WAIT_S))
        while not os.path.exists(lift["ack"]):
            if time.monotonic() > deadline:
                raise RuntimeError("the launcher did not restore the CPU quota after the agreement: nothing timed")
            time.sleep(0.002)


DIVERGENCE_BELOW = 0.9999  # an agreement score below this looks for the first node whose output diverges


def where_outputs_diverge(engine, artifact, inputs: dict, threads: int, settings: dict | None) -> dict:
    """Where the combination's outputs start to differ from base's: the first node of its graph
    whose output, run as measured, differs from the same graph run unoptimized
    (`first_divergent_node` of the engine); or, when none does, that the export itself differs."""
    import tempfile
    from pathlib import Path

    try:
        with tempfile.TemporaryDirectory(prefix="divergence-") as tmp:
            node = engine.first_divergent_node(artifact, artifact, inputs, threads, Path(tmp), settings=settings)
    except Exception as exc:  # the explanation of a failure must not fail the measurement
        return {"error": f"{type(exc).__name__}: {exc}"[:500]}
    if node is None:
        return {
            "compared_with": "the same ONNX graph unoptimized",
            "node": None,
            "detail": "no node diverges from the unoptimized graph: the ONNX export itself differs from base",
        }
    return {"compared_with": "the same ONNX graph unoptimized", **node}


if __name__ == "__main__":
    result = main(sys.argv[1], float(sys.argv[2]))
    sys.stdout.write("\n@@RESULT@@" + json.dumps(result) + "\n")
