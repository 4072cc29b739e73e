"""A model into Relax: a `.pt2` program re-exported at static shapes and imported with
`from_exported_program`, an ONNX model imported with `from_onnx` (folded at the static shapes
first when its shapes are computed at run time). Weights become constants of the module. An
operator the importer lacks is a `ConversionError` naming it (e.g. `aten.amax`).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from engines import ConversionError, ConversionJob
from schemas.reasons import whole


def import_model(job: ConversionJob, examples: dict[str, np.ndarray]):
    """The model as a Relax IRModule at the shapes of `examples`, its weights as constants."""
    if str(getattr(job.model.format, "value", job.model.format)) == "onnx":
        return import_onnx(Path(job.model_path), examples)
    return import_pt2(Path(job.model_path), examples)


def unsupported_ops(exc: BaseException) -> str:
    """The line of a TVM error that names the operators it lacks (else the error whole)."""
    text = str(exc)
    for marker in ("Unsupported function types", "Unsupported ops", "not supported", "Unsupported"):
        if marker in text:
            line = next(line for line in text.splitlines() if marker in line)
            return line.strip()
    return whole(exc)


def import_pt2(path: Path, examples: dict[str, np.ndarray]):
    """A `.pt2` program as a Relax IRModule at the shapes of `examples`."""
    import torch
    from tvm.relax.frontend.torch import from_exported_program

    from engines.model_files import NotAModelError, load_exported_program

    try:
        program = load_exported_program(path)
    except NotAModelError as exc:
        raise ConversionError(str(exc)) from exc
    inputs = {name: torch.from_numpy(value) for name, value in examples.items()}
    try:
        # Static shapes: a TVM artifact serves one batch size, and static shapes let every
        # kernel be tuned for its exact sizes.
        static = _export_static(program, inputs, path)
    except Exception as exc:
        raise ConversionError(f"re-exporting the program with a static batch failed: {whole(exc)}") from exc
    try:
        return from_exported_program(static, unwrap_unit_return_tuple=False)
    except Exception as exc:
        raise ConversionError(f"TVM cannot import the program: {unsupported_ops(exc)}") from exc


def _export_static(program, inputs: dict, path: Path):
    """Re-export `program` at the shapes of `inputs`, called as it was exported (positional
    inputs by position, keyword inputs by name: its signature says which)."""
    import torch

    from engines.signature import call_arguments, read_signature

    args, kwargs = call_arguments(read_signature(path), inputs)
    return torch.export.export(program.module(), args, kwargs=kwargs)


def import_onnx(path: Path, examples: dict[str, np.ndarray]):
    """An ONNX model as a Relax IRModule at the shapes of `examples` (fed by name, or in order)."""
    import onnx
    from tvm.relax.frontend.onnx import from_onnx

    model = onnx.load(str(path))
    initializers = {init.name for init in model.graph.initializer}
    graph_inputs = [i.name for i in model.graph.input if i.name not in initializers]
    if len(graph_inputs) != len(examples):
        raise ConversionError(f"the ONNX model has inputs {graph_inputs}, the workload feeds {list(examples)}")
    by_name = (
        examples if set(graph_inputs) == set(examples) else dict(zip(graph_inputs, examples.values(), strict=True))
    )
    shapes = {name: list(by_name[name].shape) for name in graph_inputs}
    dtypes = {name: str(by_name[name].dtype) for name in graph_inputs}
    try:
        return from_onnx(model, shape_dict=shapes, dtype_dict=dtypes, keep_params_in_input=False)
    except Exception as exc:
        first = exc
    # A graph exported with dynamic dims computes some shapes at run time (Shape -> Gather ->
    # Concat -> Reshape), which TVM's importer cannot follow. At the static shapes this
    # conversion is for, ONNX Runtime's basic optimizations fold them into constants.
    try:
        return from_onnx(_folded_at(model, shapes), shape_dict=shapes, dtype_dict=dtypes, keep_params_in_input=False)
    except Exception:
        raise ConversionError(f"TVM cannot import the ONNX model: {unsupported_ops(first)}") from first


def _folded_at(model, shapes: dict[str, list[int]]):
    """`model` with its inputs fixed to `shapes` and what they decide folded into constants
    (ONNX Runtime's basic, standard-operator graph optimizations)."""
    import onnx
    import onnxruntime as ort

    static = onnx.ModelProto()
    static.CopyFrom(model)
    for graph_input in static.graph.input:
        if graph_input.name in shapes:
            for dim, size in zip(graph_input.type.tensor_type.shape.dim, shapes[graph_input.name], strict=True):
                dim.Clear()
                dim.dim_value = int(size)
    del static.graph.value_info[:]  # inferred for the dynamic dims: stale now
    with tempfile.TemporaryDirectory(prefix="ayci-onnx-fold-") as tmp:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(Path(tmp) / "folded.onnx")
        ort.InferenceSession(static.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return onnx.load(options.optimized_model_filepath)
