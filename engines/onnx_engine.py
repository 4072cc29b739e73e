"""`onnx`: ONNX Runtime, its session tuned per combination.

The converter exports the program to ONNX (torch's dynamo exporter) and applies the
portable optimizations offline (EXTENDED). The hardware-specific ones (ORT_ENABLE_ALL: layout
transforms for this CPU) happen when the measuring worker loads the model, because a model
saved with them only runs on the CPU that saved it. Before measuring, a tuning pass under the
combination's confinement tries the session settings of `tuning_candidates` and the
measurement keeps the default unless one whose agreement holds is faster by a margin, twice
(`measuring/measure.tune`; the result names them: `engine_settings`).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np

from engines import Conversion, ConversionError, ConversionJob, timed_ms
from schemas.reasons import whole

COMPILES_ON_LOAD = True  # the CPU-specific graph optimizations run when a session is made


def import_runtime(path: Path) -> None:
    import onnxruntime  # noqa: F401


def convert(job: ConversionJob) -> Conversion:
    import onnxruntime as ort

    started = time.perf_counter()
    exported = exported_onnx(job)
    optimized = job.out_dir / "model.onnx"
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(optimized)
    try:
        ort.InferenceSession(str(exported), options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise ConversionError(f"ONNX Runtime cannot load the model: {exc}") from exc
    exported.unlink()
    return Conversion(artifact_file="model.onnx", conversion_s=time.perf_counter() - started)


def exported_onnx(job: ConversionJob) -> Path:
    """The job's model as ONNX in its out_dir (`exported.onnx`): a copy, or torch's export."""
    from schemas.combos import ModelFormat

    exported = job.out_dir / "exported.onnx"
    if job.model.format == ModelFormat.onnx:
        shutil.copyfile(job.model_path, exported)
    else:
        export_to_onnx(job.model_path, exported)
    return exported


def export_to_onnx(pt2_path: Path, onnx_path: Path) -> None:
    """Export a `.pt2` program to ONNX with torch's dynamo exporter (dynamic axes kept)."""
    from engines.model_files import load_exported_program

    export_program_to_onnx(load_exported_program(pt2_path), onnx_path)


def export_program_to_onnx(program, onnx_path: Path) -> None:
    """Export a loaded `torch.export` program to ONNX (what `export_to_onnx` does after loading)."""
    import torch

    try:
        torch.onnx.export(program, (), str(onnx_path), dynamo=True, external_data=False, verbose=False)
    except Exception as exc:
        raise ConversionError(f"torch.onnx.export failed: {whole(exc)}") from exc


def default_settings(threads: int) -> dict:
    """The session settings a measurement starts from (and keeps unless tuning finds faster)."""
    return {
        "graph_optimization": "all",
        "intra_op_threads": threads,
        "memory_arena": True,
        "execution_mode": "sequential",
    }


def tuning_candidates(threads: int) -> list[dict]:
    """The session settings tried per combination, under its confinement, the default first
    (`measuring/measure.py tune`): the graph optimization level (`disabled` keeps only
    what conversion applied offline: never slower than doing nothing), the memory arena, fewer
    intra-op threads, the parallel execution mode."""
    default = default_settings(threads)
    candidates = [
        default,
        {**default, "graph_optimization": "disabled"},
        {**default, "graph_optimization": "basic"},
        {**default, "memory_arena": False},
    ]
    if threads > 1:
        candidates.append({**default, "intra_op_threads": 1})
        candidates.append({**default, "execution_mode": "parallel"})
    return candidates


def load_session(
    path: Path, threads: int, optimize: bool = True, settings: dict | None = None, profile_prefix: Path | None = None
):
    """A runner of the model in an ONNX Runtime session (with `profile_prefix`: the runner and
    the session, profiling into files of that prefix)."""
    import onnxruntime as ort

    settings = settings or {**default_settings(threads), "graph_optimization": "all" if optimize else "disabled"}
    levels = {
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    }
    options = ort.SessionOptions()
    options.graph_optimization_level = levels[settings["graph_optimization"]]
    options.intra_op_num_threads = int(settings["intra_op_threads"])
    parallel = settings.get("execution_mode") == "parallel"
    options.execution_mode = ort.ExecutionMode.ORT_PARALLEL if parallel else ort.ExecutionMode.ORT_SEQUENTIAL
    options.inter_op_num_threads = int(settings["intra_op_threads"]) if parallel else 1
    options.enable_cpu_mem_arena = bool(settings.get("memory_arena", True))
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = str(profile_prefix)
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    run = _session_runner(session)
    return (run, session) if profile_prefix is not None else run


def _session_runner(session):
    names = [i.name for i in session.get_inputs()]

    def run(inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        feed = dict(zip(names, inputs.values(), strict=True)) if set(inputs) != set(names) else inputs
        return session.run(None, feed)

    return run


def load(path: Path, threads: int, settings: dict | None = None):
    return load_session(path, threads, optimize=True, settings=settings)


def profile(
    path: Path,
    threads: int,
    inputs: dict[str, np.ndarray],
    runs: int,
    work: Path,
    settings: dict | None = None,
    *,
    optimize: bool = True,
):
    """`runs` inferences under ONNX Runtime's profiler (`enable_profiling`), with the
    combination's session settings: its Chrome trace and one `(node name, op type, ms)` per
    node run; and each profiled inference's wall time (ms)."""
    import json

    run, session = load_session(
        path, threads, optimize=optimize, settings=settings, profile_prefix=work / "ort-profile"
    )
    run_ms = [timed_ms(run, inputs) for _ in range(runs)]
    events = json.loads(Path(session.end_profiling()).read_text())
    calls = [
        (event["name"].removesuffix("_kernel_time"), event["args"].get("op_name", "?"), event["dur"] / 1000)
        for event in events
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time")
    ]
    return (
        {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"profiler": "onnxruntime enable_profiling"}},
        calls,
        run_ms,
    )


DIVERGENCE_ATOL = 1e-4  # a node's output diverges past atol + rtol * its reference's largest magnitude
DIVERGENCE_RTOL = 1e-3


def with_every_output(path: Path, out_path: Path) -> tuple[list[tuple[str, str, str]], list[str]]:
    """`path`'s graph with every node output whose type is known made a graph output, written to
    `out_path`: (node name, op type, output name) in the graph's (topological) order, and the
    names of the written graph's outputs in their order."""
    import onnx

    model = onnx.load(str(path))
    inferred = onnx.shape_inference.infer_shapes(model)
    typed = {info.name: info for info in [*inferred.graph.value_info, *inferred.graph.output]}
    outputs = [output.name for output in model.graph.output]
    order = []
    for index, node in enumerate(model.graph.node):
        for name in node.output:
            if name in typed:
                order.append((node.name or f"#{index}", node.op_type, name))
                if name not in outputs:
                    model.graph.output.append(typed[name])
                    outputs.append(name)
    onnx.save(model, str(out_path))
    return order, outputs


def first_divergent_node(
    candidate: Path,
    reference: Path,
    inputs: dict[str, np.ndarray],
    threads: int,
    work: Path,
    settings: dict | None = None,
) -> dict | None:
    """The first node (in graph order) whose output from `candidate` (run with `settings`)
    differs from `reference`'s (a graph of the same node names, run unoptimized) past the
    tolerance: its name, op type, output and max abs diff; None if every intermediate output
    agrees. Every intermediate is made an output, so both sessions keep each node's result."""
    order, candidate_names = with_every_output(candidate, work / "candidate-all-outputs.onnx")
    _, reference_names = with_every_output(reference, work / "reference-all-outputs.onnx")
    got = dict(
        zip(
            candidate_names,
            load_session(work / "candidate-all-outputs.onnx", threads, settings=settings)(inputs),
            strict=True,
        )
    )
    want = dict(
        zip(
            reference_names,
            load_session(work / "reference-all-outputs.onnx", threads, optimize=False)(inputs),
            strict=True,
        )
    )
    for node, op_type, name in order:
        if name not in want:
            continue
        a, b = np.asarray(got[name]), np.asarray(want[name])
        if a.shape != b.shape:
            return {
                "node": node,
                "op_type": op_type,
                "output": name,
                "max_abs_diff": None,
                "detail": f"shape {a.shape} against {b.shape}",
            }
        if a.size == 0 or not np.issubdtype(b.dtype, np.number):
            continue
        diff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
        tolerance = DIVERGENCE_ATOL + DIVERGENCE_RTOL * float(np.max(np.abs(b.astype(np.float64))))
        if not diff <= tolerance:  # NaN diverges too
            return {"node": node, "op_type": op_type, "output": name, "max_abs_diff": diff, "tolerance": tolerance}
    return None
