"""`base`: plain PyTorch running the user's exported program as it is.

For a `.pt2` model the artifact is the archive itself (it serves every batch size). For an
ONNX model there is no PyTorch graph, so `base` is ONNX Runtime with every graph
optimization disabled: the unoptimized reference the optimized engines are compared with.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np

from engines import Conversion, ConversionJob, timed_ms


def import_runtime(path: Path) -> None:
    """ONNX Runtime alone for an ONNX artifact; torch for a `.pt2`."""
    if path.suffix == ".onnx":
        import onnxruntime  # noqa: F401
    else:
        import torch  # noqa: F401


def convert(job: ConversionJob) -> Conversion:
    from schemas.combos import ModelFormat

    started = time.perf_counter()
    name = "model.pt2" if job.model.format == ModelFormat.pt2 else "model.onnx"
    if job.model.format == ModelFormat.pt2:
        from engines.model_files import load_exported_program

        load_exported_program(job.model_path)  # refuse now what would fail at measurement
    shutil.copyfile(job.model_path, job.out_dir / name)
    return Conversion(artifact_file=name, conversion_s=time.perf_counter() - started)


AOTI_SUFFIX = ".aoti.pt2"  # an AOTInductor package (a cold-start lever, `measuring/levers.py`)


def compile_aoti(pt2_path: Path, out_path: Path) -> Path:
    """`pt2_path`'s program compiled ahead of time for this CPU (AOTInductor, the system C++
    compiler); its call convention (how many inputs are positional) kept beside it."""
    import json

    import torch

    from engines.model_files import load_exported_program

    program = load_exported_program(pt2_path, checked=True)
    args_spec, _ = program.call_spec.in_spec.children_specs
    torch._inductor.aoti_compile_and_package(program, package_path=str(out_path))
    out_path.with_suffix(".json").write_text(json.dumps({"positional": args_spec.num_children}))
    return out_path


def load(path: Path, threads: int):
    if path.suffix == ".onnx":
        from engines.onnx_engine import load_session

        return load_session(path, threads, optimize=False)
    import torch

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1) if torch.get_num_interop_threads() != 1 else None
    if path.name.endswith(AOTI_SUFFIX):
        import json

        module = torch._inductor.aoti_load_package(str(path))
        positional = json.loads(path.with_suffix(".json").read_text())["positional"]
    else:
        from engines.model_files import load_exported_program

        program = load_exported_program(path, checked=True)
        args_spec, kwargs_spec = program.call_spec.in_spec.children_specs
        positional = args_spec.num_children  # the inputs come in the signature's order: positional first
        module = program.module()

    def run(inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        # called as it was exported: positional inputs by position, keyword inputs by name
        tensors = [(name, torch.from_numpy(value)) for name, value in inputs.items()]
        args = [t for _, t in tensors[:positional]]
        kwargs = dict(tensors[positional:])
        with torch.inference_mode():
            out = module(*args, **kwargs)
        flat = out if isinstance(out, (tuple, list)) else [out]
        return [t.detach().numpy() for t in flat]

    return run


def profile(
    path: Path, threads: int, inputs: dict[str, np.ndarray], runs: int, work: Path, settings: dict | None = None
):
    """`runs` inferences under `torch.profiler` (CPU): its Chrome trace and one `(op, op, ms)` per
    operator call, timed by its self time (nested calls are not counted twice); and each
    profiled inference's wall time (ms). An ONNX model's
    `base` is ONNX Runtime unoptimized: profiled by ONNX Runtime's profiler."""
    if path.suffix == ".onnx":
        from engines.onnx_engine import profile as profile_onnx

        return profile_onnx(path, threads, inputs, runs, work, optimize=False)
    import json

    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    run = load(path, threads)
    run(inputs)
    with torch_profile(activities=[ProfilerActivity.CPU]) as profiler:
        run_ms = [timed_ms(run, inputs) for _ in range(runs)]
    trace_file = work / "torch-trace.json"
    profiler.export_chrome_trace(str(trace_file))
    calls = [
        (event.name, event.name, event.self_cpu_time_total / 1000)
        for event in profiler.events()
        if event.name.startswith("aten::") and event.self_cpu_time_total > 0
    ]
    return json.loads(trace_file.read_text()), calls, run_ms
