"""Reading a model's signature from its file without running it, and without torch.

ONNX: the graph's inputs (minus initializers) and outputs, with their element types and dims
(`dim_value`, or `dim_param` = dynamic), and whether tensors live in external data files.
`.pt2`: the archive's serialized program (`models/*.json`): the user inputs in call order,
positional or keyword (from the call spec), their dtypes and sizes (a symbol = dynamic, its
range from `range_constraints`), and the user outputs.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

from engines.model_files import NotAModelError, sniff_format
from schemas.combos import ModelFormat
from schemas.signature import DimRange, ModelSignature, TensorSpec

# torch._export.serde.schema.ScalarType -> numpy's name
_PT2_DTYPES = {
    1: "uint8",
    2: "int8",
    3: "int16",
    4: "int32",
    5: "int64",
    6: "float16",
    7: "float32",
    8: "float64",
    10: "complex64",
    11: "complex128",
    12: "bool",
    13: "bfloat16",
    28: "uint16",
    34: "uint32",
    35: "uint64",
}
# onnx.TensorProto.DataType -> numpy's name
_ONNX_DTYPES = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    8: "string",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
    14: "complex64",
    15: "complex128",
    16: "bfloat16",
}
_SYMBOL = re.compile(r"Symbol\('([^']+)'")


def read_signature(path: Path, model_format: ModelFormat | None = None) -> ModelSignature:
    """The signature of the model in `path` (`NotAModelError` if it is not a model)."""
    model_format = model_format or sniff_format(path)
    return _pt2_signature(path) if model_format == ModelFormat.pt2 else _onnx_signature(path)


def _onnx_signature(path: Path) -> ModelSignature:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    graph = model.graph
    initializers = {init.name for init in graph.initializer}

    def spec(value) -> TensorSpec:
        tensor = value.type.tensor_type
        dims = None
        if tensor.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tensor.shape.dim]
        return TensorSpec(
            name=value.name, dtype=_ONNX_DTYPES.get(tensor.elem_type, f"onnx:{tensor.elem_type}"), dims=dims
        )

    external = any(init.data_location == onnx.TensorProto.EXTERNAL for init in graph.initializer) or any(
        attr.t.data_location == onnx.TensorProto.EXTERNAL
        for node in graph.node
        for attr in node.attribute
        if attr.HasField("t")
    )
    inputs = [spec(v) for v in graph.input if v.name not in initializers]
    rows = {init.name: init.dims[0] for init in graph.initializer if init.dims}
    for node in graph.node:  # an input used as the indices of a Gather on a table: its row count
        if node.op_type == "Gather" and len(node.input) == 2 and node.input[0] in rows:
            for item in inputs:
                if item.name == node.input[1]:
                    item.index_bound = min(rows[node.input[0]], item.index_bound or rows[node.input[0]])
    return ModelSignature(
        format=ModelFormat.onnx.value,
        inputs=inputs,
        outputs=[spec(v) for v in graph.output],
        external_data=external,
    )


def _pt2_program_json(path: Path) -> dict:
    with zipfile.ZipFile(path) as archive:
        names = [n for n in archive.namelist() if re.search(r"(^|/)models/[^/]+\.json$", n)]
        if not names:
            raise NotAModelError("the .pt2 archive holds no serialized program (models/*.json)")
        main = next((n for n in names if n.endswith("/model.json")), names[0])
        if archive.getinfo(main).file_size > 256 << 20:
            raise NotAModelError("the .pt2 archive's program description is larger than 256 MB")
        return json.loads(archive.read(main))


def _pt2_signature(path: Path) -> ModelSignature:
    try:
        program = _pt2_program_json(path)
        module = program["graph_module"]
        tensors = module["graph"]["tensor_values"]
        ranges = {
            name: DimRange(min=_bound(r.get("min_val")), max=_bound(r.get("max_val")))
            for name, r in (program.get("range_constraints") or {}).items()
        }
        call = next((m for m in module.get("module_call_graph", []) if m.get("fqn") == ""), None)
        positional, keywords, problems = _call_spec(call)
    except (KeyError, TypeError, ValueError, zipfile.BadZipFile) as exc:
        raise NotAModelError(f"the .pt2 archive's program cannot be read: {type(exc).__name__}: {exc}") from exc

    def tensor(name: str) -> TensorSpec:
        meta = tensors.get(name) or {}
        dims: list[int | str] | None = None
        if "sizes" in meta:
            dims = []
            for size in meta["sizes"]:
                if "as_int" in size:
                    dims.append(int(size["as_int"]))
                else:
                    expr = size.get("as_expr", {}).get("expr_str", "?")
                    found = _SYMBOL.findall(expr)
                    dims.append(found[0] if len(found) == 1 and expr.startswith("Symbol(") else expr)
        return TensorSpec(name=name, dtype=_PT2_DTYPES.get(meta.get("dtype"), f"torch:{meta.get('dtype')}"), dims=dims)

    inputs: list[TensorSpec] = []
    user_inputs = [s["user_input"]["arg"] for s in module["signature"]["input_specs"] if "user_input" in s]
    for index, arg in enumerate(user_inputs):
        if "as_tensor" not in arg:
            problems.append(f"input {index} is not a tensor ({next(iter(arg), '?')}): AYCI feeds tensors only")
            continue
        spec = tensor(arg["as_tensor"]["name"])
        if index < positional:
            spec.kind = "positional"
        else:
            spec.kind = "keyword"
            keyword = index - positional
            if keyword < len(keywords):
                spec.name = keywords[keyword]  # called by the keyword's name
        inputs.append(spec)
    bounds = _pt2_index_bounds(module["graph"], tensors)
    for spec, arg in zip(inputs, [a for a in user_inputs if "as_tensor" in a], strict=True):
        spec.index_bound = bounds.get(arg["as_tensor"]["name"])
    outputs = [
        tensor(s["user_output"]["arg"]["as_tensor"]["name"])
        for s in module["signature"]["output_specs"]
        if "user_output" in s and "as_tensor" in s["user_output"]["arg"]
    ]
    return ModelSignature(
        format=ModelFormat.pt2.value, inputs=inputs, outputs=outputs, dim_ranges=ranges, problems=problems
    )


def _pt2_index_bounds(graph: dict, tensors: dict) -> dict[str, int]:
    """Inputs used as indices of an embedding table: input name -> the table's row count."""
    bounds: dict[str, int] = {}
    for node in graph.get("nodes", []):
        if node.get("target") != "torch.ops.aten.embedding.default":
            continue
        args = {a.get("name"): a.get("arg", {}) for a in node.get("inputs", [])}
        weight = args.get("weight", {}).get("as_tensor", {}).get("name")
        indices = args.get("indices", {}).get("as_tensor", {}).get("name")
        rows = (tensors.get(weight) or {}).get("sizes", [{}])[0].get("as_int")
        if indices and rows:
            bounds[indices] = min(rows, bounds.get(indices, rows))
    return bounds


def _bound(value) -> int | None:
    if value is None or isinstance(value, str) or abs(value) >= 2**62:
        return None  # unbounded ("int_oo")
    return int(value)


def _call_spec(call: dict | None) -> tuple[int, list[str], list[str]]:
    """How many positional inputs, the keyword names in order, and nested inputs (problems)."""
    if call is None:
        return 1 << 30, [], []
    version, spec = json.loads(call["signature"]["in_spec"])
    args, kwargs = spec["children_spec"]
    problems = [
        f"positional input {i} is a nested {child['type']}: export with one tensor per argument"
        for i, child in enumerate(args["children_spec"])
        if child.get("children_spec")
    ]
    names = json.loads(kwargs["context"]) if kwargs.get("context") not in (None, "null") else []
    problems += [
        f"keyword input {names[i]} is a nested {child['type']}: export with one tensor per argument"
        for i, child in enumerate(kwargs["children_spec"])
        if child.get("children_spec") and i < len(names)
    ]
    return len(args["children_spec"]), names, problems


def call_arguments(signature: ModelSignature, inputs: dict) -> tuple[tuple, dict]:
    """The positional and keyword arguments to call a `.pt2` program with, from inputs named as
    its signature names them (in its order)."""
    args = tuple(inputs[s.name] for s in signature.inputs if s.kind == "positional")
    kwargs = {s.name: inputs[s.name] for s in signature.inputs if s.kind != "positional"}
    return args, kwargs


def signature_document(path: str, model_format: str | None = None) -> dict:
    """`read_signature` as JSON: what a sandboxed child returns to the process that asked
    (`measuring/sandbox.py call`), which never parses a user's model itself."""
    return read_signature(Path(path), ModelFormat(model_format) if model_format else None).model_dump(mode="json")
