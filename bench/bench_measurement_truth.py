"""Measurement truth: does the reported p50 match a plain timing loop of the same artifact
under the same confinement?

For ResNet-18 (224x224, ONNX Runtime, batch 1) at each memory size, alternately: the pipeline's
measurement (`services.inference.launcher.measure`: its own process, confined, warm-up, CI
stopping) and an independent loop (a separate process in a cgroup of the same limits, which
loads the same file with onnxruntime directly and times `session.run` N times with
`time.perf_counter`). Both hold the machine's measurement lock, one after the other, so they
see the same machine; a pair during which other work reached into the cores the measurement
needed is repeated (up to --attempts). Prints each pair's p50 ratio and the median ratio over the
undisturbed pairs; goal 0.9-1.1.

    .venv/bin/python bench/bench_measurement_truth.py [--memory 1769,3538] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from resnet_artifact import resnet18_onnx  # noqa: E402

from core import measurement_lock  # noqa: E402
from services.inference.confinement import Limits, MeasurementGroup, unavailable_reason  # noqa: E402
from services.inference.launcher import MeasureSpec, measure  # noqa: E402
from services.inference.machine_load import LoadSample, load_report  # noqa: E402

PLAIN_LOOP = """
import sys, time, numpy as np, onnxruntime as ort
path, reference, threads, iterations = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
options = ort.SessionOptions()
options.intra_op_num_threads = threads
options.inter_op_num_threads = 1
session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
ref = np.load(reference)
feed = {session.get_inputs()[0].name: ref["input:pixels"]}
for _ in range(20):
    session.run(None, feed)
samples = []
for _ in range(iterations):
    t = time.perf_counter(); session.run(None, feed); samples.append((time.perf_counter() - t) * 1000)
samples.sort()
print(samples[len(samples) // 2], samples[int(0.99 * (len(samples) - 1))])
"""


def plain_loop(onnx_path: Path, reference: Path, memory_mb: int, threads: int, iterations: int) -> tuple[float, float, dict]:
    """p50, p99 (ms) of the independent loop, and the machine's load while it ran."""
    command = [sys.executable, "-c", PLAIN_LOOP, str(onnx_path), str(reference), str(threads), str(iterations)]
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
    p50, p99 = map(float, done.stdout.split())
    return p50, p99, load_report(before, after, own_cpu_s, needed_cores=Limits.for_memory(memory_mb).vcpus if group else threads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memory", default="1769,3538")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--time-cap", type=float, default=10.0)
    parser.add_argument("--attempts", type=int, default=3, help="tries per round while other work disturbs it")
    args = parser.parse_args()
    artifact = resnet18_onnx()
    confined = unavailable_reason()
    print(f"confinement: {'cgroups' if confined is None else 'NONE (' + confined + ')'}")
    verdicts = []
    for memory in [int(m) for m in args.memory.split(",")]:
        ratios, disturbed_ratios = [], []
        for round_ in range(args.rounds):
            for attempt in range(args.attempts):  # a pair disturbed by other work is repeated
                spec = MeasureSpec(
                    optimizer="onnx", workload="image_classification", artifact_path=artifact.onnx_path,
                    reference_path=artifact.reference_path, memory_mb=memory, time_cap_s=args.time_cap,
                )
                report = measure(spec)
                reported = report["latency_ms"]
                # as many iterations as the pipeline ran, so both take about as long
                p50, p99, loop_load = plain_loop(artifact.onnx_path, artifact.reference_path, memory, spec.threads, reported["iterations"])
                ratio = reported["p50"] / p50
                others = (report["load"]["other_busy_cores"], loop_load["other_busy_cores"])
                disturbed = report["load"]["disturbed"] or loop_load["disturbed"]
                print(
                    f"{memory:>5} MB round {round_ + 1}.{attempt + 1}: reported p50 {reported['p50']:7.2f} ms (p99 {reported['p99']:7.2f}, "
                    f"{reported['iterations']} it., cv {reported['cv']:.2f}) | plain loop p50 {p50:7.2f} ms (p99 {p99:7.2f}) "
                    f"| ratio {ratio:.3f} | other work {others[0]:.2f} / {others[1]:.2f} cores{' DISTURBED' if disturbed else ''}"
                )
                if not disturbed:
                    ratios.append(ratio)
                    break
                disturbed_ratios.append(ratio)
        if not ratios:
            print(f"{memory} MB: every pair was disturbed by other work on the machine; their ratios are used")
            ratios = disturbed_ratios
        median = statistics.median(ratios)
        verdicts.append((memory, median))
        print(json.dumps({"memory_mb": memory, "threads": spec.threads, "p50_ratios": [round(r, 3) for r in ratios], "median_ratio": round(median, 3)}))
    ok = all(0.9 <= r <= 1.1 for _, r in verdicts)
    summary = ", ".join(f"{m} MB {r:.3f}" for m, r in verdicts)
    print(f"verdict: reported p50 / plain-loop p50 = {summary}: {'within' if ok else 'OUTSIDE'} the goal 0.9-1.1")


if __name__ == "__main__":
    main()
