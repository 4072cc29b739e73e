"""torch vs ONNX Runtime (untuned, tuned, int8) vs TVM (tuned), side by side in one run on this machine.

Models: the example ResNet-18 at batch 1 (224x224), the example BERT-style encoder at batch 1
(sequence 128) and the example detector (320x320). ONNX Runtime runs twice: with the default
session and with the settings AYCI's tuning pass picks (`measuring/measure.tune`). For each:
convert with `onnx` and `tvm` (MetaSchedule, `--trials` per model, records stored under the
work dir), convert `tvm` a second time from the stored records, then
measure p50 latency of base (torch), onnx and tvm at the same thread count, each engine in its
own child process (so one engine's idle spinning thread pool never slows another), in
interleaved rounds (so a burst of other work on the machine hits every engine alike).

    .venv/bin/python bench/bench_optimizers.py [--trials 200] [--threads 1 2] [--models resnet18 bert]
        [--curve 100 200 400]

Prints a table per thread count (1 = the one vCPU of 1,769 MB, 2 = the two of 3,538 MB) with the
ratios tuned ORT / ORT, TVM / tuned ORT, TVM / the faster ORT session of the two ("best"),
torch / tuned ORT, int8 / tuned ORT, the tuning time,
the time of the second conversion, the layout TVM chose and what it timed; with `--curve`, TVM
compiled from the first K records of the same search, measured in the same rounds (the
trials-vs-latency curve); writes results.json into the work dir. Before a fresh
run, delete the work dir's `tuning/` (or pass another --workdir): stored records are reused.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from schemas.events import TUNING_TIME_LIMIT_S  # noqa: E402

MODELS = {
    "resnet18": ("image_classification", [224, 224]),
    "bert": ("nlp", [128]),
    "detector": ("object_detection", [320, 320]),
}

CHILD = r"""
import json, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
engine, artifact, inputs_path = sys.argv[2:5]
threads, iterations = int(sys.argv[5]), int(sys.argv[6])
settings = json.loads(sys.argv[7]) if len(sys.argv) > 7 else None
import engines
module = engines.module(engine)
path = __import__("pathlib").Path(artifact)
runner = module.load(path, threads, settings=settings) if settings else module.load(path, threads)
saved = np.load(inputs_path)
inputs = {name: saved[name] for name in json.loads(saved["__names__"].tobytes().decode())}
for _ in range(10):
    runner(inputs)
samples = []
for _ in range(iterations):
    started = time.perf_counter()
    runner(inputs)
    samples.append((time.perf_counter() - started) * 1000)
print(json.dumps(samples))
"""


def _load_average() -> float:
    return os.getloadavg()[0]


def _model_ref(path: Path, workload: str, input_size: list[int]):
    from schemas.combos import ModelRef

    return ModelRef(
        sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
        size_bytes=path.stat().st_size,
        format="pt2",
        workload=workload,
        input_size=input_size,
    )


def convert_all(name: str, workdir: Path, trials: int, time_limit_s: float | None) -> dict:
    """Export the example model, convert it for onnx and tvm (twice), return paths and times."""
    from bench.cache import cache_key, exported_example
    from engines import ConversionJob, onnx_engine, onnx_int8_engine
    from engines import tvm as tvm_engine
    from engines.targets import target_cpu
    from schemas.combos import Hardware, Optimizer

    workload, size = MODELS[name]
    model_dir = workdir / name
    model_dir.mkdir(parents=True, exist_ok=True)
    pt2 = exported_example("model", workload, size, model_dir)  # kept while the example model is the same
    model = _model_ref(pt2, workload, size)
    # what a run compiles for: the portable x86-64-v3 unless AYCI_INTEL_CPU names a CPU (or `host`)
    cpu = target_cpu(Hardware.intel, Optimizer.tvm, intel_cpu=os.environ.get("AYCI_INTEL_CPU") or None)
    # the records of earlier searches, kept by the model's bytes, the libraries and AYCI's engine source
    tuning_dir = workdir / "tuning" / f"{name}-{cpu}-b1-{cache_key(pt2, 'tvm-tuning', cpu, 1)}"

    def job(out: Path, trials_: int, tuning: Path | None):
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        return ConversionJob(
            model=model,
            model_path=pt2,
            hardware="intel",
            batch_size=1,
            target_cpu=cpu,
            out_dir=out,
            tuning_trials=trials_,
            tuning_dir=tuning,
            tuning_time_limit_s=time_limit_s,
            progress=lambda m: print(f"  [{name}] {m}", file=sys.stderr, flush=True),
        )

    result: dict = {
        "workload": workload,
        "input_size": size,
        "pt2": str(pt2),
        "target_cpu": cpu,
        "tuning_dir": str(tuning_dir),
    }
    started = time.perf_counter()
    onnx = onnx_engine.convert(job(model_dir / "onnx", 0, None))
    result["onnx"] = {
        "artifact": str(model_dir / "onnx" / onnx.artifact_file),
        "conversion_s": time.perf_counter() - started,
    }
    int8 = onnx_int8_engine.convert(job(model_dir / "onnx_int8", 0, None))
    result["onnx_int8"] = {
        "artifact": str(model_dir / "onnx_int8" / int8.artifact_file),
        "conversion_s": int8.conversion_s,
    }

    load_before = _load_average()
    first = tvm_engine.convert(job(model_dir / "tvm", trials, tuning_dir))
    result["tvm"] = {
        "artifact": str(model_dir / "tvm" / first.artifact_file),
        "conversion_s": first.conversion_s,
        "tuning_s": first.tuning_s,
        "details": first.details,
        "load_average_during": (load_before + _load_average()) / 2,
    }
    started = time.perf_counter()
    second = tvm_engine.convert(job(model_dir / "tvm-again", trials, tuning_dir))
    result["tvm_second"] = {
        "wall_s": time.perf_counter() - started,
        "conversion_s": second.conversion_s,
        "tuning_s": second.tuning_s,
        "records_reused": second.details.get("records_reused"),
    }
    return result


def curve_artifacts(name: str, converted: dict, workdir: Path, checkpoints: list[int]) -> dict[int, str]:
    """TVM artifacts compiled from the first k tuning records of the run (k in `checkpoints`):
    the schedules the search had found after k measured candidates. (A search given only k
    trials would split them over the tasks differently: this is the curve of this one search.)"""
    from engines import ConversionJob
    from engines import tvm as tvm_engine

    source = Path(converted["tuning_dir"])
    model = _model_ref(Path(converted["pt2"]), converted["workload"], converted["input_size"])
    lines = (source / "database_tuning_record.json").read_text().splitlines()
    artifacts = {}
    for k in checkpoints:
        if k >= len(lines):
            continue
        records = workdir / name / f"curve-{k}" / "tuning"
        shutil.rmtree(records.parent, ignore_errors=True)
        records.mkdir(parents=True)
        shutil.copy(source / "database_workload.json", records / "database_workload.json")
        (records / "database_tuning_record.json").write_text("\n".join(lines[:k]) + "\n")
        meta = json.loads((source / "ayci_tuning.json").read_text())
        (records / "ayci_tuning.json").write_text(json.dumps({**meta, "trials": k, "trials_asked": k}))
        out = records.parent / "tvm"
        out.mkdir()
        print(f"  [{name}] compiling from the first {k} records", file=sys.stderr, flush=True)
        conversion = tvm_engine.convert(
            ConversionJob(
                model=model,
                model_path=Path(converted["pt2"]),
                hardware="intel",
                batch_size=1,
                target_cpu=converted["target_cpu"],
                out_dir=out,
                tuning_trials=k,
                tuning_dir=records,
            )
        )
        artifacts[k] = {
            "artifact": str(out / conversion.artifact_file),
            "variant": conversion.details.get("variant"),
            "variants_p50_ms": conversion.details.get("variants_p50_ms"),
        }
    return artifacts


def measure(name: str, converted: dict, workdir: Path, threads_list: list[int], iterations: int, rounds: int) -> dict:
    """p50 latency (ms) per engine and thread count, each round running every engine at every
    thread count once, each in its own process."""
    import numpy as np

    from engines import base_engine, onnx_engine, onnx_int8_engine
    from engines import tvm as tvm_engine
    from workloads import workload_module

    module = workload_module(converted["workload"])
    inputs = module.example_inputs(1, converted["input_size"])
    inputs_path = workdir / name / "inputs.npz"
    np.savez(inputs_path, __names__=np.frombuffer(json.dumps(list(inputs)).encode(), dtype=np.uint8), **inputs)

    artifacts = {
        "base": converted["pt2"],
        "onnx": converted["onnx"]["artifact"],
        "tvm": converted["tvm"]["artifact"],
        "onnx_int8": converted["onnx_int8"]["artifact"],
    }
    most = max(threads_list)
    reference = base_engine.load(Path(artifacts["base"]), most)(inputs)
    agreement = {
        "onnx": module.agreement(reference, onnx_engine.load(Path(artifacts["onnx"]), most)(inputs)).as_dict(),
        "tvm": module.agreement(reference, tvm_engine.load(Path(artifacts["tvm"]), most)(inputs)).as_dict(),
        "onnx_int8": module.agreement(
            reference, onnx_int8_engine.load(Path(artifacts["onnx_int8"]), most)(inputs)
        ).as_dict(),
    }
    tuned = {
        threads: tuned_settings(converted, inputs, reference, threads, workdir / name)["settings"]
        for threads in threads_list
    }
    runs = {
        label: (engine, artifact, [])
        for label, (engine, artifact) in {
            **{engine: (engine, artifact) for engine, artifact in artifacts.items()},
            **{f"tvm@{k}": ("tvm", curve["artifact"]) for k, curve in converted.get("curve", {}).items()},
        }.items()
    }
    samples: dict[tuple[str, int], list[float]] = {
        (label, threads): [] for label in [*runs, "onnx_tuned"] for threads in threads_list
    }
    loads = []
    runs_of_a_round = [
        (threads, label, *spec)
        for threads in threads_list
        for label, spec in {**runs, "onnx_tuned": ("onnx", artifacts["onnx"], [json.dumps(tuned[threads])])}.items()
    ]
    for round_index in range(rounds):
        # Each round in its own (seeded) order, so no engine always runs right after the same
        # one. In a fixed order the tuned ORT session, always last, timed 1.47x the default one at
        # 2 threads on the encoder, with the very same settings.
        for threads, label, engine, artifact, extra in random.Random(round_index).sample(
            runs_of_a_round, len(runs_of_a_round)
        ):
            loads.append(_load_average())
            out = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    CHILD,
                    str(ROOT),
                    engine,
                    artifact,
                    str(inputs_path),
                    str(threads),
                    str(iterations),
                    *extra,
                ],
                capture_output=True,
                text=True,
                check=True,
                env={**os.environ, "OMP_NUM_THREADS": str(threads)},
            )
            samples[(label, threads)].extend(json.loads(out.stdout.strip().splitlines()[-1]))
    p50 = {
        threads: {label: float(np.percentile(samples[(label, t)], 50)) for (label, t) in samples if t == threads}
        for threads in threads_list
    }
    return {
        "p50_ms": p50,
        "agreement": agreement,
        "onnx_tuned_settings": tuned,
        "load_average": {"min": min(loads), "max": max(loads)},
    }


def tuned_settings(converted: dict, inputs: dict, reference: list, threads: int, folder: Path) -> dict:
    """The session settings AYCI's tuning pass picks for this model (`measuring/measure.tune`),
    run in a process of its own as a measurement would."""
    import numpy as np

    reference_path = folder / "reference.npz"
    np.savez(
        reference_path,
        **{f"input:{k}": v for k, v in inputs.items()},
        **{f"output:{i}": np.asarray(o) for i, o in enumerate(reference)},
    )
    spec_path = folder / "tune.json"
    spec_path.write_text(
        json.dumps(
            {
                "optimizer": "onnx",
                "workload": converted["workload"],
                "artifact_path": converted["onnx"]["artifact"],
                "reference_path": str(reference_path),
                "threads": threads,
                "time_cap_s": 16,
                "mode": "tune",
            }
        )
    )
    out = subprocess.run(
        [sys.executable, "-m", "measuring.measure", str(spec_path), repr(time.time())],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "OMP_NUM_THREADS": str(threads)},
    )
    return json.loads(out.stdout.rsplit("@@RESULT@@", 1)[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=200, help="TVM MetaSchedule trials per model")
    parser.add_argument(
        "--threads",
        type=int,
        nargs="+",
        default=[1, 2],
        help="thread counts measured (1 = Lambda at 1,769 MB, 2 = at 3,538 MB)",
    )
    parser.add_argument(
        "--curve",
        type=int,
        nargs="*",
        default=[],
        help="also measure TVM compiled from the first K tuning records (the trials-vs-latency curve)",
    )
    parser.add_argument(
        "--time-limit",
        type=float,
        default=TUNING_TIME_LIMIT_S,
        help="TVM tuning stops at its trials or after this many seconds (AYCI's limit by default; 0 = none)",
    )
    parser.add_argument("--iterations", type=int, default=50, help="timed runs per engine per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--workdir", type=Path, default=ROOT / ".ayci" / "bench-optimizers")
    args = parser.parse_args()

    results = {"trials": args.trials, "threads": args.threads, "cpu_count": os.cpu_count(), "models": {}}
    for name in args.models:
        print(f"{name}: converting (tvm trials {args.trials}) ...", file=sys.stderr, flush=True)
        converted = convert_all(name, args.workdir, args.trials, args.time_limit or None)
        converted["curve"] = curve_artifacts(name, converted, args.workdir, sorted(args.curve))
        print(f"{name}: measuring ...", file=sys.stderr, flush=True)
        measured = measure(name, converted, args.workdir, args.threads, args.iterations, args.rounds)
        results["models"][name] = {**converted, **measured}
        (args.workdir / "results.json").write_text(json.dumps(results, indent=2, default=str))

    print(
        f"\ntrials per model {args.trials}, {os.cpu_count()} CPUs; p50 ms, engines measured side by side in "
        "interleaved rounds"
    )
    header = (
        f"{'model':10} {'thr':>3} {'torch':>7} {'ort':>7} {'tuned':>7} {'tvm':>7} {'int8':>7} {'tuned/ort':>9} "
        f"{'tvm/tuned':>9} {'tvm/best':>8} "
        f"{'torch/tuned':>11} {'int8/tuned':>10} {'tvm tune s':>10} {'2nd conv s':>10} {'load':>9}"
    )
    print(header)
    for name, r in results["models"].items():
        for threads in args.threads:
            p = r["p50_ms"][threads]
            print(
                f"{name:10} {threads:3d} {p['base']:7.2f} {p['onnx']:7.2f} {p['onnx_tuned']:7.2f} {p['tvm']:7.2f} "
                f"{p['onnx_int8']:7.2f} "
                f"{p['onnx_tuned'] / p['onnx']:9.2f} {p['tvm'] / p['onnx_tuned']:9.2f} "
                f"{p['tvm'] / min(p['onnx'], p['onnx_tuned']):8.2f} "
                f"{p['base'] / p['onnx_tuned']:11.2f} "
                f"{p['onnx_int8'] / p['onnx_tuned']:10.2f} {r['tvm']['tuning_s']:10.1f} "
                f"{r['tvm_second']['wall_s']:10.1f} "
                f"{r['load_average']['min']:4.1f}-{r['load_average']['max']:.1f}"
            )
        details = r["tvm"]["details"]
        limited = (
            f" (the {details.get('tuning_time_limit_s'):.0f} s limit ended the search)"
            if details.get("time_limit_reached")
            else ""
        )
        print(
            f"{'':10} tvm: {details.get('trials')} trials{limited}, {details.get('tasks')} tasks, build "
            f"{details.get('variant')} "
            f"(timed at conversion: {details.get('variants_p50_ms')}), "
            f"{details.get('kernels_tuned')}/{details.get('kernels')} kernels tuned"
        )
        print(f"{'':10} tuned ORT settings {r['onnx_tuned_settings']}")
        print(
            f"{'':10} agreement onnx {r['agreement']['onnx']}, tvm {r['agreement']['tvm']}, onnx_int8 "
            f"{r['agreement']['onnx_int8']}"
        )
        if r["curve"]:
            print(f"{'':10} trials-vs-latency (first K records of this search; tuning s pro rata):")
            for k in [*sorted(r["curve"]), details["trials"]]:
                label = f"tvm@{k}" if k in r["curve"] else "tvm"
                cells = "  ".join(
                    f"{threads} thr {r['p50_ms'][threads][label]:7.2f} ms = "
                    f"{r['p50_ms'][threads][label] / r['p50_ms'][threads]['onnx_tuned']:5.2f}x tuned ORT"
                    for threads in args.threads
                )
                layout = r["curve"][k]["variant"] if k in r["curve"] else details.get("variant")
                print(
                    f"{'':12} K={k:5d} (~{r['tvm']['tuning_s'] * k / max(1, details['trials']):6.0f} s, {layout}): "
                    f"{cells}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
