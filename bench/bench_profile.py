"""What profiling costs: per engine, the profiled p50 against the unprofiled p50 of the same
confined pass (`measuring/launcher.profile`: the same child times the model without
its profiler, then with it), on the example ResNet-18 (224x224, batch 1) at 1,769 MB (1 vCPU).

    .venv/bin/python bench/bench_profile.py [--runs 30] [--repeat 3] [--tvm] [--memory 1769]

`--tvm` converts the model with TVM (no tuning trials: the overhead of the VM's instrument hook
does not depend on how well the kernels were tuned) into `.ayci/bench/tvm-b1-KEY/` once
(`bench/cache.py`). Prints one row per engine: the medians over `--repeat` passes of the
unprofiled and profiled p50, their ratio, the operators and trace events one pass records.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.cache import CACHE, cache_key  # noqa: E402
from bench.resnet_artifact import INPUT_SIZE, resnet18_onnx  # noqa: E402
from core.profiles import operator_rows  # noqa: E402
from measuring.launcher import MeasureSpec, profile  # noqa: E402


def tvm_artifact(model_path: Path, cache: Path) -> Path:
    import engines
    from adapters.local_store import LocalFolderStore
    from engines import ConversionJob
    from engines.tvm import host_cpu_name
    from schemas.combos import Hardware
    from services.request.submission import store_model

    out = cache / f"tvm-b1-{cache_key(model_path, 'tvm', 1, host_cpu_name())}"
    if not (out / "done.json").exists():
        print("converting it with TVM (no tuning) ...", file=sys.stderr)
        out.mkdir(parents=True, exist_ok=True)
        model = store_model(LocalFolderStore(cache / "store"), model_path, "image_classification", INPUT_SIZE)
        conversion = engines.module("tvm").convert(
            ConversionJob(
                model=model,
                model_path=model_path,
                hardware=Hardware.intel,
                batch_size=1,
                target_cpu=host_cpu_name(),
                out_dir=out,
                tuning_trials=0,
            )
        )
        (out / "done.json").write_text(json.dumps({"artifact": conversion.artifact_file}))
    return out / json.loads((out / "done.json").read_text())["artifact"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="inferences per pass, profiled and unprofiled")
    parser.add_argument("--repeat", type=int, default=3, help="passes per engine (medians shown)")
    parser.add_argument("--memory", type=int, default=1769)
    parser.add_argument("--tvm", action="store_true", help="also TVM (converted once, untuned)")
    args = parser.parse_args()
    artifact = resnet18_onnx()
    engines = {"base": artifact.model_path, "onnx": artifact.onnx_path}
    if args.tvm:
        engines["tvm"] = tvm_artifact(artifact.model_path, CACHE)
    print(f"ResNet-18 224x224 b1 at {args.memory} MB, {args.runs} inferences per pass, medians of {args.repeat} passes")
    print(
        f"{'engine':8} {'unprofiled p50 ms':>18} {'profiled p50 ms':>16} {'overhead':>9} {'operators':>10} "
        f"{'trace events':>13} {'confined':>9}"
    )
    for optimizer, path in engines.items():
        passes = []
        for _ in range(args.repeat):
            spec = MeasureSpec(
                optimizer=optimizer,
                workload="image_classification",
                artifact_path=path,
                reference_path=artifact.reference_path,
                memory_mb=args.memory,
                time_cap_s=4.0,
                tune=False,
                profile_runs=args.runs,
            )
            passes.append(profile(spec))
        unprofiled = statistics.median(p["unprofiled_p50_ms"] for p in passes)
        profiled = statistics.median(p["profiled_p50_ms"] for p in passes)
        rows = operator_rows([tuple(call) for call in passes[0]["calls"]], args.runs)
        print(
            f"{optimizer:8} {unprofiled:18.2f} {profiled:16.2f} {profiled / unprofiled:8.2f}x {len(rows):10d} "
            f"{len(passes[0]['trace']['traceEvents']):13d} {str(all(p['confined'] for p in passes)):>9}"
        )


if __name__ == "__main__":
    main()
