"""What tuning at one batch size saves the next: TVM conversions of one model at batch 1, then at
batch B from nothing and seeded from batch 1's records (`engines/tvm/seeding.py`).

    python bench/bench_tuning_seeds.py --workload nlp --size 32 --trials 64 --batch 4

Prints, for each conversion, the trials measured, the tuning seconds, the kernels seeded or
taken whole, and the model's p50 ms on this host (the conversion's artifact, timed in turns so
load shifts hit both alike).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path


def _model_ref(path: Path, workload: str, size: list[int]):
    from schemas.combos import ModelRef

    return ModelRef(
        sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
        size_bytes=path.stat().st_size,
        format="pt2",
        workload=workload,
        input_size=size,
    )


def _convert(model, path, out: Path, batch: int, trials: int, tuning: Path, shared: list[Path]) -> dict:
    from engines import ConversionJob
    from engines import tvm as tvm_engine
    from engines.tvm.target import PORTABLE_INTEL_CPU

    out.mkdir(parents=True)
    job = ConversionJob(
        model=model,
        model_path=path,
        hardware="intel",
        batch_size=batch,
        target_cpu=PORTABLE_INTEL_CPU,
        out_dir=out,
        tuning_trials=trials,
        tuning_dir=tuning,
        shared_tuning_dirs=shared,
    )
    started = time.perf_counter()
    conversion = tvm_engine.convert(job)
    d = conversion.details
    return {
        "batch": batch,
        "seconds": round(time.perf_counter() - started, 1),
        "tuning_s": round(conversion.tuning_s, 1),
        "trials": d["trials"],
        "tasks": d["tasks"],
        "seeded": d.get("kernels_seeded_from_other_batches", 0),
        "borrowed": d["kernels_from_other_models"],
        "artifact": str(out / conversion.artifact_file),
    }


def _time(artifacts: dict[str, str], inputs: dict, rounds: int = 7, per_round: int = 20) -> dict[str, float]:
    from engines.tvm.runtime import load

    runs = {name: load(Path(path), 2) for name, path in artifacts.items()}
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for name, run in runs.items():
        for _ in range(5):
            run(inputs[name])
    for _ in range(rounds):
        for name, run in runs.items():
            started = time.perf_counter()
            for _ in range(per_round):
                run(inputs[name])
            samples[name].append((time.perf_counter() - started) / per_round * 1000)
    return {name: round(statistics.median(values), 3) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", default="nlp")
    parser.add_argument("--size", type=int, nargs="+", default=[32])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--seeded-trials", type=int, default=None, help="the seeded conversion's budget")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument(
        "--work", help="a folder of an earlier run: its b1 and scratch records are applied (not searched again)"
    )
    parser.add_argument("--tag", default="seeded", help="the seeded conversion's folder name in --work")
    args = parser.parse_args()

    from workloads import workload_module
    from workloads.examples import export_example

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="ayci-seeds-"))
    path = work / "model.pt2"
    if not path.exists():
        export_example(args.workload, args.size, path)
    for name in ("b1", "scratch", args.tag):
        shutil.rmtree(work / name, ignore_errors=True)
    model = _model_ref(path, args.workload, args.size)
    first = _convert(model, path, work / "b1", 1, args.trials, work / "tuning-b1", [])
    scratch = _convert(model, path, work / "scratch", args.batch, args.trials, work / "tuning-scratch", [])
    seeded = _convert(
        model,
        path,
        work / args.tag,
        args.batch,
        args.seeded_trials or args.trials,
        work / f"tuning-{args.tag}",
        [work / "tuning-b1"],
    )
    module = workload_module(args.workload)
    inputs = {
        "b1": module.example_inputs(1, args.size),
        "scratch": module.example_inputs(args.batch, args.size),
        "seeded": module.example_inputs(args.batch, args.size),
    }
    p50 = _time({"b1": first["artifact"], "scratch": scratch["artifact"], "seeded": seeded["artifact"]}, inputs)
    for name, row in (("b1", first), ("scratch", scratch), ("seeded", seeded)):
        row["p50_ms"] = p50[name]
        row.pop("artifact")
        print(name, json.dumps(row))


if __name__ == "__main__":
    main()
