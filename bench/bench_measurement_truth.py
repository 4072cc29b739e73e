"""Measurement truth: do the reported p50 and p99 match a plain timing loop of the same artifact
under the same confinement, for every engine? And does one combination measured again give
the same p50?

For the example ResNet-18 (224x224) and the NLP example (sequence 128), batch 1, each engine
(torch `base`, ONNX Runtime `onnx`, TVM `tvm`, untuned unless --trials) at each memory size,
alternately: the pipeline's measurement (`measuring.launcher.measure`: its own
process, confined, warm-up, convergence rule) and an independent loop written without AYCI's
code (a separate process in a cgroup of the same limits that loads the same file with the
engine's own API and times N calls with `time.perf_counter`). Both hold the machine's
measurement lock, one after the other; a pair during which other work reached into the cores
the measurement needed is repeated (up to --attempts). Prints each pair's p50 and p99 ratio and
the median ratios over the undisturbed pairs; goal 0.9-1.1 each.

Repeatability: one combination (ONNX Runtime, ResNet-18, 1769 MB) measured --repeat times;
the coefficient of variation of its p50; goal at most 5 %.

    .venv/bin/python bench/bench_measurement_truth.py [--memory 1769] [--rounds 2] [--engines base,onnx,tvm]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import engines
from adapters.local_store import LocalFolderStore  # noqa: E402
from core import measurement_lock  # noqa: E402
from engines import ConversionJob  # noqa: E402
from engines.targets import target_cpu  # noqa: E402
from measuring.confinement import Limits, MeasurementGroup, unavailable_reason  # noqa: E402
from measuring.launcher import MeasureSpec, measure  # noqa: E402
from measuring.machine_load import LoadSample, load_report  # noqa: E402
from schemas.combos import Hardware, Optimizer  # noqa: E402
from services.converter.handlers import ensure_reference  # noqa: E402
from services.request.submission import store_model  # noqa: E402

# the independent loops: each loads the artifact with the engine's own API, nothing of AYCI's
LOOP_HEAD = """
import sys, time, numpy as np
path, reference, threads, iterations = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ref = np.load(reference)
feed = {k.split(":", 1)[1]: ref[k] for k in ref.files if k.startswith("input:")}
"""
LOOP_TAIL = """
for _ in range(20):
    call()
samples = []
for _ in range(iterations):
    t = time.perf_counter(); call(); samples.append((time.perf_counter() - t) * 1000)
samples.sort()
print(samples[len(samples) // 2], samples[int(0.99 * (len(samples) - 1))])
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


def artifacts(name: str, optimizers: list[str], trials: int, cache: Path = ROOT / ".ayci" / "bench") -> dict:
    """The example model `name` converted for each optimizer, and its reference for batch 1."""
    from workloads.examples import export_example

    workload, size = MODELS[name]
    cache.mkdir(parents=True, exist_ok=True)
    model_path = cache / f"{name}.pt2"
    if not model_path.exists():
        export_example(workload, size, model_path)
    store = LocalFolderStore(cache / "store")
    model = store_model(store, model_path, workload, size)
    reference = cache / f"{name}-reference-b1.npz"
    if not reference.exists():
        reference.write_bytes(store.get_bytes(ensure_reference(store, model, model_path, 1, cache)))
    out = {"reference": reference, "workload": workload}
    for optimizer in optimizers:
        folder = cache / f"{name}-{optimizer}-t{trials}"
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


def plain_loop(
    optimizer: str, path: Path, reference: Path, memory_mb: int, threads: int, iterations: int
) -> tuple[float, float, dict]:
    """p50, p99 (ms) of the independent loop, and the machine's load while it ran."""
    code = LOOP_HEAD + LOOPS[optimizer] + LOOP_TAIL
    command = [sys.executable, "-c", code, str(path), str(reference), str(threads), str(iterations)]
    with measurement_lock.exclusive():
        group = MeasurementGroup.create(Limits.for_memory(memory_mb)) if unavailable_reason() is None else None
        before, usage = LoadSample.now(), resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            done = subprocess.run(group.wrap(command) if group else command, capture_output=True, text=True, check=True)
        finally:
            if group:
                group.remove()
        after, used = LoadSample.now(), resource.getrusage(resource.RUSAGE_CHILDREN)
    own_cpu_s = used.ru_utime + used.ru_stime - usage.ru_utime - usage.ru_stime
    p50, p99 = map(float, done.stdout.split()[-2:])
    return (
        p50,
        p99,
        load_report(before, after, own_cpu_s, needed_cores=Limits.for_memory(memory_mb).vcpus if group else threads),
    )


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
    args = parser.parse_args()
    confined = unavailable_reason()
    print(f"confinement: {'cgroups' if confined is None else 'NONE (' + confined + ')'}")
    engines = args.engines.split(",")
    table = []
    for name in args.models.split(","):
        built = artifacts(name, engines, args.trials)
        for optimizer in engines:
            for memory in [int(m) for m in args.memory.split(",")]:
                pairs, disturbed_pairs = [], []
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
                        p50, p99, loop_load = plain_loop(
                            optimizer, built[optimizer], built["reference"], memory, spec.threads, stats["iterations"]
                        )
                        pair = (stats["p50"] / p50, stats["p99"] / p99)
                        disturbed = reported["load"]["disturbed"] or loop_load["disturbed"]
                        print(
                            f"{name:8} {optimizer:4} {memory:>5} MB {round_ + 1}.{attempt + 1}: reported p50 {stats['p50']:7.2f} p99 {stats['p99']:7.2f} "
                            f"({stats['iterations']} samples) | loop p50 {p50:7.2f} p99 {p99:7.2f} | ratios {pair[0]:.3f} {pair[1]:.3f}"
                            f"{' DISTURBED' if disturbed else ''}",
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
                        "p50_ratio": statistics.median(p for p, _ in used),
                        "p99_ratio": statistics.median(q for _, q in used),
                    }
                )
    print()
    print(f"{'model':8} {'engine':6} {'MB':>5}  p50 ratio  p99 ratio")
    for row in table:
        print(
            f"{row['model']:8} {row['engine']:6} {row['memory_mb']:>5}  {row['p50_ratio']:9.3f}  {row['p99_ratio']:9.3f}{'  (disturbed pairs only)' if row['disturbed'] else ''}"
        )
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
