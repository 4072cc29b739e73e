"""Check the arm runtime path end to end, under qemu emulation on this x86 machine.

On the host: export the example image classifier, convert it for arm with `onnx` and `tvm`
(cross-compiled aarch64 `model.so`), and compute the reference outputs with x86 `base`. Then
an emulated aarch64 Python loads the artifacts with `engines.onnx_engine.load` and
`engines.tvm.load` (the same code the workers run) and runs the same inputs; the outputs
must agree with the reference. With `--base`, `base` itself (torch's aarch64 wheel) runs too.

    python scripts/check_arm.py [--input-size 224 224] [--trials 0] [--base] [--workdir DIR]

Prints one JSON summary; exits 1 if an engine disagrees. Needs scripts/arm-sysroot.sh first.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import numpy as np  # noqa: E402

WORKLOAD = "image_classification"
AARCH64_E_MACHINE = 183


def elf_machine(path: Path) -> int:
    """The ELF header's e_machine (62 = x86-64, 183 = aarch64)."""
    header = path.read_bytes()[:20]
    if header[:4] != b"\x7fELF":
        raise ValueError(f"{path} is not an ELF file")
    return int.from_bytes(header[18:20], "little" if header[5] == 1 else "big")


def run_emulated(workdir: Path) -> None:
    """Inside the emulated Python: run every artifact listed in plan.json, save the outputs."""
    import engines

    plan = json.loads((workdir / "plan.json").read_text())
    inputs = dict(np.load(workdir / "inputs.npz"))
    inputs = {name: inputs[name] for name in plan["input_names"]}
    timings = {}
    for name, artifact in plan["artifacts"].items():
        started = time.perf_counter()
        engine = engines.module(name)
        runner = engine.load(workdir / artifact, 1)
        loaded = time.perf_counter()
        outputs = runner(inputs)
        timings[name] = {"load_s": loaded - started, "run_s": time.perf_counter() - loaded}
        np.savez(workdir / f"out-{name}.npz", *outputs)
    (workdir / "emulated.json").write_text(json.dumps({"timings": timings, "torch_imported": "torch" in sys.modules}))


def check_arm(
    workdir: Path, input_size: list[int], trials: int = 0, with_base: bool = False, sysroot: Path | None = None
) -> dict:
    """Convert for arm on the host, run under emulation, compare with x86 `base`. Returns a summary
    with `ok` (every engine agreed: top-1 equal and max abs diff under 1e-3)."""
    from engines import ConversionJob, base_engine, onnx_engine
    from engines import tvm as tvm_engine
    from engines.arm_emulation import arm_available, run_arm_python
    from schemas.combos import ModelRef
    from workloads import workload_module
    from workloads.examples import export_example

    ok, reason = arm_available(sysroot)
    if not ok:
        raise RuntimeError(f"arm emulation unavailable: {reason}")
    workdir.mkdir(parents=True, exist_ok=True)
    module = workload_module(WORKLOAD)
    pt2 = export_example(WORKLOAD, input_size, workdir / "model.pt2")
    model = ModelRef(
        sha256=hashlib.sha256(pt2.read_bytes()).hexdigest(),
        size_bytes=pt2.stat().st_size,
        format="pt2",
        workload=WORKLOAD,
        input_size=input_size,
    )
    summary: dict = {"input_size": input_size, "conversions": {}, "engines": {}}
    artifacts = {}
    for name, engine in (("onnx", onnx_engine), ("tvm", tvm_engine)):
        out = workdir / name
        out.mkdir(exist_ok=True)
        job = ConversionJob(
            model=model,
            model_path=pt2,
            hardware="arm",
            batch_size=1,
            target_cpu="neoverse-n1",
            out_dir=out,
            tuning_trials=trials if name == "tvm" else 0,
        )
        conversion = engine.convert(job)
        artifacts[name] = f"{name}/{conversion.artifact_file}"
        summary["conversions"][name] = {
            "conversion_s": round(conversion.conversion_s, 2),
            "tuning_s": round(conversion.tuning_s, 2),
            **conversion.details,
        }
    summary["tvm_elf_machine"] = elf_machine(workdir / artifacts["tvm"])
    if with_base:
        artifacts["base"] = "model.pt2"

    inputs = module.example_inputs(1, input_size)
    np.savez(workdir / "inputs.npz", **inputs)
    (workdir / "plan.json").write_text(json.dumps({"artifacts": artifacts, "input_names": list(inputs)}))
    reference = base_engine.load(pt2, 1)(inputs)

    started = time.perf_counter()
    result = run_arm_python([str(Path(__file__).resolve()), "--emulated", str(workdir)], sysroot=sysroot)
    summary["emulated_s"] = round(time.perf_counter() - started, 1)
    if result.returncode != 0:
        raise RuntimeError(f"the emulated run failed:\n{result.stderr[-3000:]}")
    summary["emulated"] = json.loads((workdir / "emulated.json").read_text())
    all_ok = summary["tvm_elf_machine"] == AARCH64_E_MACHINE
    for name in artifacts:
        with np.load(workdir / f"out-{name}.npz") as saved:
            outputs = [saved[f"arr_{i}"] for i in range(len(saved.files))]
        agreement = module.agreement(reference, outputs)
        engine_ok = agreement.score == 1.0 and agreement.details.get("max_abs_diff", 1.0) < 1e-3
        summary["engines"][name] = {**agreement.as_dict(), "ok": engine_ok}
        all_ok = all_ok and engine_ok
    summary["ok"] = all_ok
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input-size", type=int, nargs=2, default=[224, 224])
    parser.add_argument("--trials", type=int, default=0, help="TVM tuning trials (proxy-tuned on the host)")
    parser.add_argument("--base", action="store_true", help="also run base (torch's aarch64 wheel) under emulation")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--emulated", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.emulated:
        run_emulated(args.emulated)
        return 0
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="ayci-check-arm-"))
    summary = check_arm(workdir, list(args.input_size), args.trials, args.base)
    print(json.dumps(summary, indent=2, default=str))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
