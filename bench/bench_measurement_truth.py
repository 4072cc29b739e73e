"""Measurement truth: do the reported p50 and p99 match a plain timing loop of the same artifact
under the same Lambda limits, for every engine? And does one combination measured again give
the same p50?

For the example ResNet-18 (224x224) and the NLP example (sequence 128), batch 1, each engine
(torch `base`, ONNX Runtime `onnx`, TVM `tvm`, untuned unless --trials) at each memory size,
alternately: the pipeline's measurement (`measuring.launcher.measure`: its own process,
confined, warm-up, convergence rule) and an independent loop that shares none of AYCI's
measuring code: its own cgroup (this file writes `cpu.max`/`memory.max`, or v1's quota and
limit, from Lambda's rule of 1,769 MB a vCPU, and the loop writes its own pid into the group),
its own thread count and number of calls (for --loop-seconds after a warm-up), the engine's own
API, `time.perf_counter`, and its own check of other work on the machine (`/proc/stat`). Both hold
the machine's measurement lock, one after the other; a pair during which other work reached into
the cores the measurement needed (by either side's check) is dropped and repeated (up to
--attempts), and the number dropped is printed. Prints each pair's p50 and p99 ratio and the
median ratios over the undisturbed pairs; goal 0.9-1.1 each.

Repeatability: one combination (ONNX Runtime, ResNet-18, 1769 MB) measured --repeat times;
the coefficient of variation of its p50; goal at most 5 %.

    .venv/bin/python bench/bench_measurement_truth.py [--memory 1769] [--rounds 2] [--engines base,onnx,tvm]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import engines  # noqa: E402
from adapters.local_store import LocalFolderStore  # noqa: E402
from bench.cache import CACHE, cache_key, exported_example  # noqa: E402
from core import measurement_lock  # noqa: E402
from engines import ConversionJob  # noqa: E402
from engines.targets import target_cpu  # noqa: E402
from measuring.confinement import unavailable_reason  # noqa: E402
from measuring.launcher import MeasureSpec, measure  # noqa: E402
from schemas.combos import Hardware, Optimizer  # noqa: E402
from services.converter.handlers import ensure_reference  # noqa: E402
from services.request.submission import store_model  # noqa: E402

# the independent loops: each loads the artifact with the engine's own API, nothing of AYCI's
LOOP_HEAD = """
import math, os, sys
for procs in sys.argv[5:]:  # into its own cgroup before anything is imported or timed
    with open(procs, "w") as handle:
        handle.write(str(os.getpid()))
import time, numpy as np
path, reference, threads, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
ref = np.load(reference)
feed = {k.split(":", 1)[1]: ref[k] for k in ref.files if k.startswith("input:")}
"""
LOOP_TAIL = """
warm_until = time.perf_counter() + 2
for _ in range(20):
    call()
while time.perf_counter() < warm_until:
    call()
samples, until = [], time.perf_counter() + seconds
while time.perf_counter() < until or len(samples) < 200:  # 200: the p99 is the 2nd slowest at least
    t = time.perf_counter(); call(); samples.append((time.perf_counter() - t) * 1000)
samples.sort()
print(len(samples), samples[len(samples) // 2], samples[math.ceil(0.99 * len(samples)) - 1])
"""
LOOPS = {
    "onnx": """
import onnxruntime as ort
options = ort.SessionOptions()
options.intra_op_num_threads = threads
options.inter_op_num_threads = 1
options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
call = lambda: session.run(None, feed)
""",
    "base": """
import torch
torch.set_num_threads(threads)
module = torch.export.load(path).module()
tensors = {k: torch.from_numpy(v) for k, v in feed.items()}
def call():
    with torch.inference_mode():
        module(**tensors)
""",
    "tvm": """
import os
os.environ["TVM_NUM_THREADS"] = str(threads)
import tvm, tvm.runtime.vm
device = tvm.cpu()
main = tvm.runtime.vm.VirtualMachine(tvm.runtime.load_module(path), device)["main"]
def call():
    main(*[tvm.runtime.tensor(np.ascontiguousarray(v), device) for v in feed.values()])
""",
}
MODELS = {"resnet18": ("image_classification", [224, 224]), "nlp": ("nlp", [128])}


def artifacts(name: str, optimizers: list[str], trials: int, cache: Path = CACHE) -> dict:
    """The example model `name` converted for each optimizer, and its reference for batch 1, each
    kept under `cache` by a key of the model's bytes, the libraries and AYCI's engine source."""
    workload, size = MODELS[name]
    cache.mkdir(parents=True, exist_ok=True)
    model_path = exported_example(name, workload, size, cache)
    store = LocalFolderStore(cache / "store")
    model = store_model(store, model_path, workload, size)
    reference = cache / f"{name}-reference-b1-{cache_key(model_path, 'reference', 1)}.npz"
    if not reference.exists():
        reference.write_bytes(store.get_bytes(ensure_reference(store, model, model_path, 1, cache)))
    out = {"reference": reference, "workload": workload}
    for optimizer in optimizers:
        folder = cache / f"{name}-{optimizer}-t{trials}-{cache_key(model_path, optimizer, 1, trials)}"
        done = folder / "done.json"
        if not done.exists():
            print(f"converting {name} for {optimizer} ...", file=sys.stderr, flush=True)
            folder.mkdir(exist_ok=True)
            conversion = engines.module(optimizer).convert(
                ConversionJob(
                    model=model,
                    model_path=model_path,
                    hardware=Hardware.intel,
                    batch_size=1,
                    out_dir=folder,
                    target_cpu=target_cpu(Hardware.intel, Optimizer(optimizer)),
                    tuning_trials=trials,
                    tuning_dir=folder / "tuning",
                )
            )
            done.write_text(json.dumps({"artifact": conversion.artifact_file}))
        out[optimizer] = folder / json.loads(done.read_text())["artifact"]
    return out


# --- the plain loop's own confinement and disturbance check (nothing of AYCI's measuring code)
CGROUP = Path("/sys/fs/cgroup")
MB_PER_VCPU, MAX_VCPUS = 1769, 6  # Lambda: a function of M MB gets M/1,769 vCPUs, at most 6
PERIOD_US = 100_000


def lambda_cpus(memory_mb: int) -> float:
    return min(MAX_VCPUS, memory_mb / MB_PER_VCPU)


def own_cgroup(memory_mb: int) -> list[Path]:
    """A cgroup with Lambda's CPU quota and memory cap for `memory_mb`, and the highest CPU weight
    (a Lambda's share is its own, so other work on this machine yields to it), made by hand: the groups
    created (one on cgroup v2, a cpu and a memory group on v1). The loop writes its pid into
    each one's `cgroup.procs`. Nested under this process's own groups on v1, beside the root's
    children on v2. `OSError` where cgroups cannot be written."""
    quota_us = max(1000, round(lambda_cpus(memory_mb) * PERIOD_US))
    name = f"plain-loop-{os.getpid()}-{time.monotonic_ns()}"
    if (CGROUP / "cgroup.controllers").exists():  # v2: one tree, both controllers
        (CGROUP / "cgroup.subtree_control").write_text("+cpu +memory")
        group = CGROUP / name
        group.mkdir()
        (group / "cpu.max").write_text(f"{quota_us} {PERIOD_US}")
        (group / "cpu.weight").write_text("10000")  # the highest: within its quota the loop runs first
        (group / "memory.max").write_text(str(memory_mb << 20))
        (group / "memory.swap.max").write_text("0")
        return [group]
    own = {}  # v1: controller -> this process's group, from "id:controllers:path" lines
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        own.update(dict.fromkeys(controllers.split(","), path.lstrip("/")))
    cpu, memory = CGROUP / "cpu" / own["cpu"] / name, CGROUP / "memory" / own["memory"] / name
    cpu.mkdir()
    memory.mkdir()
    (cpu / "cpu.cfs_period_us").write_text(str(PERIOD_US))
    (cpu / "cpu.cfs_quota_us").write_text(str(quota_us))
    (cpu / "cpu.shares").write_text("262144")  # the highest: within its quota the loop runs first
    (memory / "memory.limit_in_bytes").write_text(str(memory_mb << 20))
    if (memory / "memory.memsw.limit_in_bytes").exists():  # no swap either (when swap is accounted)
        (memory / "memory.memsw.limit_in_bytes").write_text(str(memory_mb << 20))
    return [cpu, memory]


def busy_cpu_s() -> float:
    """CPU seconds the whole machine has spent busy (`/proc/stat`: all but idle and iowait)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(values) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


def plain_loop(optimizer: str, path: Path, reference: Path, memory_mb: int, seconds: float) -> dict:
    """p50, p99 (ms) and calls of the independent loop in its own cgroup, and whether other work
    on the machine reached into the cores it needed while it ran."""
    cores = os.cpu_count() or 1
    threads = max(1, min(cores, math.floor(lambda_cpus(memory_mb))))
    code = LOOP_HEAD + LOOPS[optimizer] + LOOP_TAIL
    with measurement_lock.exclusive():  # the machine's lock, so AYCI's own measurements wait
        try:
            groups, why = own_cgroup(memory_mb), None
        except OSError as exc:
            groups, why = [], f"unconfined: {exc}"
        command = [sys.executable, "-c", code, str(path), str(reference), str(threads), str(seconds)]
        command += [str(g / "cgroup.procs") for g in groups]
        busy, started = busy_cpu_s(), time.monotonic()
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            done = subprocess.run(command, capture_output=True, text=True, check=True)
        finally:
            for group in groups:
                group.rmdir()
        wall = time.monotonic() - started
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        others = busy_cpu_s() - busy - (used.ru_utime + used.ru_stime - usage.ru_utime - usage.ru_stime)
    calls, p50, p99 = done.stdout.split()[-3:]
    other_cores = max(0.0, others / wall)
    needed = min(cores, math.ceil(lambda_cpus(memory_mb)))
    return {
        "p50": float(p50),
        "p99": float(p99),
        "calls": int(calls),
        "threads": threads,
        "confinement": why or f"own cgroup ({len(groups)} group{'s' * (len(groups) > 1)})",
        "other_cores": other_cores,
        "disturbed": other_cores > cores - needed + 0.25,  # a quarter core of slack for the kernel
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memory", default="1769")
    parser.add_argument("--models", default="resnet18,nlp")
    parser.add_argument("--engines", default="base,onnx,tvm")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--time-cap", type=float, default=20.0)
    parser.add_argument("--attempts", type=int, default=3, help="tries per round while other work disturbs it")
    parser.add_argument("--trials", type=int, default=0, help="TVM tuning trials for its artifact")
    parser.add_argument("--repeat", type=int, default=5, help="measurements of one combination for repeatability")
    parser.add_argument("--loop-seconds", type=float, default=10.0, help="the plain loop's timed calls last this long")
    args = parser.parse_args()
    confined = unavailable_reason()
    print(f"confinement: {'cgroups' if confined is None else 'NONE (' + confined + ')'}")
    engines = args.engines.split(",")
    table = []
    for name in args.models.split(","):
        built = artifacts(name, engines, args.trials)
        for optimizer in engines:
            for memory in [int(m) for m in args.memory.split(",")]:
                pairs, disturbed_pairs = [], []  # the disturbed ones are dropped (used only if no other)
                for round_ in range(args.rounds):
                    for attempt in range(args.attempts):
                        spec = MeasureSpec(
                            optimizer=optimizer,
                            workload=built["workload"],
                            artifact_path=built[optimizer],
                            reference_path=built["reference"],
                            memory_mb=memory,
                            time_cap_s=args.time_cap,
                            tune=False,
                        )  # the plain loop runs the default session: so does the measurement
                        reported = measure(spec)
                        stats = reported["latency_ms"]
                        loop = plain_loop(optimizer, built[optimizer], built["reference"], memory, args.loop_seconds)
                        pair = (stats["p50"] / loop["p50"], stats["p99"] / loop["p99"])
                        disturbed = [
                            who
                            for who, flag in (("AYCI", reported["load"]["disturbed"]), ("loop", loop["disturbed"]))
                            if flag
                        ]
                        print(
                            f"{name:8} {optimizer:4} {memory:>5} MB {round_ + 1}.{attempt + 1}: "
                            f"reported p50 {stats['p50']:7.2f} p99 {stats['p99']:7.2f} ({stats['iterations']} samples, "
                            f"{spec.threads} thr) | loop p50 {loop['p50']:7.2f} p99 {loop['p99']:7.2f} "
                            f"({loop['calls']} calls, {loop['threads']} thr, {loop['confinement']}, others "
                            f"{loop['other_cores']:.2f} cores) | ratios {pair[0]:.3f} {pair[1]:.3f}"
                            f"{' DISTURBED (' + ', '.join(disturbed) + ')' if disturbed else ''}",
                            flush=True,
                        )
                        if not disturbed:
                            pairs.append(pair)
                            break
                        disturbed_pairs.append(pair)
                used = pairs or disturbed_pairs
                table.append(
                    {
                        "model": name,
                        "engine": optimizer,
                        "memory_mb": memory,
                        "disturbed": not pairs,
                        "dropped": len(disturbed_pairs),
                        "p50_ratio": statistics.median(p for p, _ in used),
                        "p99_ratio": statistics.median(q for _, q in used),
                    }
                )
    print()
    print(f"{'model':8} {'engine':6} {'MB':>5}  p50 ratio  p99 ratio  disturbed pairs dropped")
    for row in table:
        only = "  (disturbed pairs only)" if row["disturbed"] else ""
        print(
            f"{row['model']:8} {row['engine']:6} {row['memory_mb']:>5}  {row['p50_ratio']:9.3f}  "
            f"{row['p99_ratio']:9.3f}  {row['dropped']:23d}{only}"
        )
    print(f"disturbed pairs dropped: {sum(row['dropped'] for row in table)}")
    ok = all(0.9 <= row[k] <= 1.1 for row in table for k in ("p50_ratio", "p99_ratio"))
    print(f"verdict: every ratio {'within' if ok else 'NOT within'} 0.9-1.1")
    if args.repeat and "onnx" in engines:
        built = artifacts("resnet18", ["onnx"], args.trials)
        p50s = []
        for _ in range(args.repeat):
            spec = MeasureSpec(
                optimizer="onnx",
                workload="image_classification",
                artifact_path=built["onnx"],
                reference_path=built["reference"],
                memory_mb=1769,
                time_cap_s=args.time_cap,
                tune=False,
            )
            p50s.append(measure(spec)["latency_ms"]["p50"])
        cv = statistics.stdev(p50s) / statistics.mean(p50s)
        print(
            f"repeatability: resnet18 onnx 1769 MB p50 over {args.repeat} measurements {[round(p, 2) for p in p50s]}: "
            f"CV {100 * cv:.1f} % ({'within' if cv <= 0.05 else 'above'} the goal of 5 %)"
        )


if __name__ == "__main__":
    main()
