"""Checking a torch.export archive (`.pt2`) from its bytes alone, before torch reads any of it.

`torch.export.load` runs code from an archive in several ways (torch 2.13,
`torch/export/pt2_archive/_package.py` and `torch/_export/serde/serialize.py`):
- a weights or constants entry with `use_pickle: true` is read with `torch.load(weights_only=False)`;
- a constant whose `path_name` starts with `opaque_obj_` is read with `pickle.loads`, one starting
  with `custom_obj_` with torch's C++ unpickler (TorchScript objects);
- legacy members (`data/weights/<model>.pt`, `data/constants/<model>.pt`, the pre-2.8 zip layout
  with `version` and `serialized_*.pt` at the top) and the example inputs
  (`data/sample_inputs/<model>.pt`) go through `torch.load`, which falls back to
  `weights_only=False` when the restricted unpickler refuses;
- `data/aotinductor/` holds compiled shared libraries, loaded as they are;
- every symbolic size (`expr_str`) of the program is parsed with `sympy.sympify`, i.e. `eval`;
- names of graph attributes end up in generated Python (`torch.fx` code generation).

So an archive is accepted only when it is the plain layout `torch.export.save` writes: every
weight and constant a raw tensor payload described by its `tensor_meta` (and fitting its
record), example inputs a pickle of tensors only, symbolic sizes plain expressions, names
without quotes. Everything is read with `zipfile` and `json`, each member's declared size
checked before it is read.
"""

from __future__ import annotations

import ast
import io
import json
import pickletools
import re
import zipfile
from math import prod
from pathlib import Path, PurePosixPath

from engines.archives import NotAModelError, zip_entry_count

PT2_MAX_MEMBERS = 100_000  # a large language model has a few thousand tensors
CONFIG_MAX_BYTES = 64 << 20  # a weights or constants config (a few hundred bytes per tensor)
PROGRAM_MAX_BYTES = 256 << 20  # a program, PROGRAMS/<name>.json
PROGRAMS = "models"  # the archive's folder of programs (torch.export's layout, not a store key)
SAMPLE_INPUTS_MAX_BYTES = 64 << 20
PICKLE_MAX_BYTES = 16 << 20  # the example inputs' pickle itself (their tensors' bytes are beside it)
EXPR_MAX_CHARS = 4096
EXPR_MAX_NODES = 512
MAX_EXPONENT = 64  # sympy evaluates powers and shifts of integers at once: 9**9**9 never ends

# torch._export.serde.schema.ScalarType -> bytes per element
_ELEMENT_BYTES = {
    1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 2, 7: 4, 8: 8, 9: 4, 10: 8, 11: 16, 12: 1, 13: 2,
    28: 2, 29: 1, 30: 1, 31: 1, 32: 1, 33: 1, 34: 4, 35: 8,
}  # fmt: skip
_FIXED_MEMBERS = {"archive_format", "archive_version", "byteorder", ".data/version", ".data/serialization_id"}
_PAYLOAD = {"weights": re.compile(r"weight_\d{1,9}"), "constants": re.compile(r"tensor_\d{1,9}")}
_MODEL_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
# What torch.save writes for tensors (and the dicts and tuples that hold them): the example inputs'
# pickle may name nothing else.
_TENSOR_GLOBALS = {
    ("collections", "OrderedDict"),
    ("torch._utils", "_rebuild_tensor_v2"),
    ("torch._utils", "_rebuild_tensor_v3"),
    ("torch._utils", "_rebuild_parameter"),
    ("torch", "device"),
    ("torch", "Size"),
}
_TENSOR_STORAGE = re.compile(r"[A-Z][A-Za-z0-9]*Storage")
_TORCH_DTYPE = re.compile(r"u?int\d{1,2}|float\d{1,2}|bfloat16|complex\d{2,3}|bool|float8_\w+")
_CALLING_OPCODES = {"INST", "OBJ", "NEWOBJ", "NEWOBJ_EX", "STACK_GLOBAL", "EXT1", "EXT2", "EXT4"}
# sympy's own classes and torch's shape functions (torch/_export/serde/serialize.py, sympy_functions)
_EXPR_FUNCTIONS = {
    "Add", "Mul", "Pow", "Integer", "Rational", "Float", "Symbol", "Equality", "Unequality", "GreaterThan",
    "StrictGreaterThan", "LessThan", "StrictLessThan", "And", "Or", "Not", "Max", "Min", "Abs", "Piecewise",
    "ExprCondPair", "floor", "ceiling", "Mod", "FloorDiv", "ModularIndexing", "Where", "PythonMod", "CleanDiv",
    "CeilToInt", "FloorToInt", "CeilDiv", "LShift", "RShift", "PowByNatural", "FloatPow", "FloatTrueDiv",
    "IntTrueDiv", "IsNonOverlappingAndDenseIndicator", "TruncToFloat", "TruncToInt", "RoundToInt",
    "RoundDecimal", "ToFloat", "Identity",
}  # fmt: skip
_POWERS = {"Pow", "PowByNatural", "FloatPow", "LShift"}
_SYMBOL_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
_FLOAT_TEXT = re.compile(r"[-+]?(\d{1,40}(\.\d{0,40})?|\.\d{1,40})([eE][-+]?\d{1,4})?|[-+]?inf|nan")
_RANGE_KEY = re.compile(r"[a-z]{1,8}\d{1,6}")
_NAME_KEYS = {"name", "target", "fqn"}
_UNSAFE_NAME = re.compile(r"[\"'\\\x00-\x1f\x7f]")


def check_pt2_archive(path: Path, max_bytes: int) -> int:
    """Refuse (`NotAModelError`, naming the entry) a `.pt2` that would make torch run code or
    allocate past `max_bytes` when loading it; returns the bytes the archive unpacks to (its
    members' declared sizes, plus the zeros torch allocates for empty records)."""
    entries = zip_entry_count(path)
    if entries is None:
        raise NotAModelError("not a zip archive, so not a torch.export archive")
    if entries > PT2_MAX_MEMBERS:
        raise NotAModelError(f"the .pt2 archive holds {entries} members; at most {PT2_MAX_MEMBERS}")
    try:
        with zipfile.ZipFile(path) as archive:
            return _check_members(archive, max_bytes)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as exc:
        raise NotAModelError(f"the .pt2 archive cannot be read ({type(exc).__name__}: {exc})") from exc


def _check_members(archive: zipfile.ZipFile, max_bytes: int) -> int:
    infos = [i for i in archive.infolist() if not i.is_dir()]
    roots = {i.filename.split("/", 1)[0] for i in infos}
    if len(roots) != 1 or any("/" not in i.filename for i in infos):
        raise NotAModelError(
            "the .pt2 archive's members are not all in one folder, as torch.export.save writes them "
            f"(found {', '.join(sorted(roots)[:3])})"
        )
    root = roots.pop() + "/"
    members: dict[str, zipfile.ZipInfo] = {}
    seen: set[str] = set()
    for info in infos:
        if info.filename.lower() in seen:  # torch's reader finds names case-insensitively
            raise NotAModelError(f"the .pt2 archive holds {info.filename} twice")
        seen.add(info.filename.lower())
        members[info.filename[len(root) :]] = info
    expanded = sum(i.file_size for i in infos)
    if expanded > max_bytes:
        raise NotAModelError(f"the .pt2 archive unpacks to {expanded} bytes; a model may have at most {max_bytes}")

    def read(name: str, cap: int) -> bytes:
        info = members[name]
        if info.file_size > cap:
            raise NotAModelError(f"the .pt2 archive's {name} has {info.file_size} bytes; at most {cap}")
        return archive.read(info)

    models = [n[len(PROGRAMS) + 1 : -len(".json")] for n in members if re.fullmatch(rf"{PROGRAMS}/[^/]+\.json", n)]
    if not models:
        raise NotAModelError("the .pt2 archive holds no serialized program (models/*.json)")
    if _text(read("archive_format", 64) if "archive_format" in members else b"") != "pt2":
        raise NotAModelError("the .pt2 archive's archive_format is not 'pt2'")
    described = {n for n in members if n in _FIXED_MEMBERS or n.startswith("extra/")}
    for model in models:
        if not _MODEL_NAME.fullmatch(model):
            raise NotAModelError(f"the .pt2 archive's program models/{model}.json has a name torch does not write")
        described.add(f"{PROGRAMS}/{model}.json")
        program = f"{PROGRAMS}/{model}.json"
        _check_program(_json(read(program, PROGRAM_MAX_BYTES), program), model)
        for kind in ("weights", "constants"):
            config_name = f"data/{kind}/{model}_{kind}_config.json"
            if config_name not in members:
                raise NotAModelError(f"the .pt2 archive lacks {config_name}")
            described.add(config_name)
            config = _json(read(config_name, CONFIG_MAX_BYTES), config_name)
            for payload, zeros in _check_payloads(config, config_name, kind, members):
                described.add(payload)
                expanded += zeros
        inputs = f"data/sample_inputs/{model}.pt"
        if inputs in members:
            described.add(inputs)
            _check_tensor_pickle(read(inputs, SAMPLE_INPUTS_MAX_BYTES), inputs)
    if expanded > max_bytes:
        raise NotAModelError(f"the .pt2 archive unpacks to {expanded} bytes; a model may have at most {max_bytes}")
    for name in members:
        _refuse_by_name(name)
        if name not in described:
            raise NotAModelError(
                f"the .pt2 archive holds {name}, which no config describes: only the program, its configs "
                "and raw tensor payloads are accepted"
            )
    return expanded


def _refuse_by_name(name: str) -> None:
    """Members refused whatever the configs say: code or pickles a loader would run."""
    base = PurePosixPath(name).name
    if name.lower().endswith(".pkl"):
        raise NotAModelError(f"the .pt2 archive holds a pickle ({name}): only plain tensors are accepted")
    if base.startswith(("opaque_obj_", "custom_obj_")):
        raise NotAModelError(
            f"the .pt2 archive holds a pickled Python or TorchScript object ({name}): only plain tensors are accepted"
        )
    if name.startswith("data/aotinductor/"):
        raise NotAModelError(f"the .pt2 archive holds compiled code ({name}): only an exported program is accepted")
    if re.fullmatch(r"data/(weights|constants)/[^/]+\.pt", name):
        raise NotAModelError(
            f"the .pt2 archive holds legacy pickled tensors ({name}): save the program again with torch.export.save"
        )


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace").strip()


def _json(data: bytes, name: str):
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise NotAModelError(f"the .pt2 archive's {name} is not JSON ({type(exc).__name__})") from exc


def _check_payloads(config, config_name: str, kind: str, members: dict[str, zipfile.ZipInfo]):
    """Yield (member, bytes of zeros torch allocates for it) for each entry of a weights or
    constants config; refuse any entry that is not a raw tensor fitting its record."""
    entries = config.get("config") if isinstance(config, dict) else None
    if not isinstance(entries, dict):
        raise NotAModelError(f"the .pt2 archive's {config_name} has no 'config' mapping")
    singular = kind[:-1]
    for fqn, entry in entries.items():
        where = f"the {singular} {fqn!r} in {config_name}"
        if not isinstance(entry, dict):
            raise NotAModelError(f"{where} is not described")
        path_name = entry.get("path_name")
        if not isinstance(path_name, str):
            raise NotAModelError(f"{where} names no payload")
        if path_name.startswith(("opaque_obj_", "custom_obj_")):
            raise NotAModelError(
                f"{where} is a pickled Python or TorchScript object ({path_name}), which loading would unpickle: "
                "only plain tensors are accepted"
            )
        if entry.get("use_pickle") is not False:
            raise NotAModelError(
                f"{where} is stored pickled ({path_name}, use_pickle), which loading would unpickle: "
                "only plain tensors are accepted"
            )
        if not _PAYLOAD[kind].fullmatch(path_name):
            raise NotAModelError(f"{where} points at {path_name}, not a raw tensor payload")
        member = f"data/{kind}/{path_name}"
        if member not in members:
            raise NotAModelError(f"{where} points at {member}, which the archive lacks")
        yield member, _check_tensor_meta(entry.get("tensor_meta"), members[member].file_size, where)


def _int_of(value, where: str, field: str) -> int:
    if not (isinstance(value, dict) and set(value) == {"as_int"} and type(value["as_int"]) is int):
        raise NotAModelError(f"{where} has a {field} that is not a plain integer")
    return value["as_int"]


def _check_tensor_meta(meta, record_bytes: int, where: str) -> int:
    """The zeros torch allocates for the tensor (an empty record is read as zeros of the
    declared size), after checking that its sizes, strides and offset stay inside the record."""
    if not isinstance(meta, dict):
        raise NotAModelError(f"{where} has no tensor_meta")
    element = _ELEMENT_BYTES.get(meta.get("dtype")) if type(meta.get("dtype")) is int else None
    if element is None:
        raise NotAModelError(f"{where} has an unknown dtype ({meta.get('dtype')!r})")
    sizes, strides = meta.get("sizes"), meta.get("strides")
    if not (isinstance(sizes, list) and isinstance(strides, list) and len(sizes) == len(strides) <= 64):
        raise NotAModelError(f"{where} has sizes and strides that do not match")
    sizes = [_int_of(s, where, "size") for s in sizes]
    strides = [_int_of(s, where, "stride") for s in strides]
    offset = _int_of(meta.get("storage_offset"), where, "storage offset")
    if min(sizes + strides + [offset], default=0) < 0 or max(sizes + strides + [offset], default=0) > 1 << 62:
        raise NotAModelError(f"{where} has a negative or huge size, stride or offset")
    numel = prod(sizes)
    if record_bytes == 0:
        return numel * element
    if record_bytes % element:
        raise NotAModelError(f"{where} has {record_bytes} bytes, not a whole number of elements")
    if numel and offset + sum((n - 1) * s for n, s in zip(sizes, strides, strict=True)) >= record_bytes // element:
        raise NotAModelError(f"{where} reaches past its {record_bytes} bytes")
    return 0


def _check_tensor_pickle(data: bytes, name: str) -> None:
    """The example inputs: a torch.save zip whose pickle names only tensor rebuilding (the
    restricted unpickler's ground), never a callable torch's fallback would run."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as inner:
            pickles = [i for i in inner.infolist() if i.filename.endswith("data.pkl")]
            if len(pickles) != 1 or pickles[0].file_size > PICKLE_MAX_BYTES:
                raise NotAModelError(f"the .pt2 archive's {name} is not one torch.save pickle of tensors")
            pickled = inner.read(pickles[0])
    except (zipfile.BadZipFile, ValueError, EOFError) as exc:
        raise NotAModelError(f"the .pt2 archive's {name} is not a torch.save file of tensors ({exc})") from exc
    try:
        for op, arg, _ in pickletools.genops(pickled):
            _check_opcode(op.name, arg, name)
    except (ValueError, EOFError) as exc:  # not a pickle pickletools can read
        raise NotAModelError(f"the .pt2 archive's {name} is not a torch.save file of tensors ({exc})") from exc


def _check_opcode(opcode: str, arg, name: str) -> None:
    if opcode in _CALLING_OPCODES:
        raise NotAModelError(f"the .pt2 archive's {name} builds objects ({opcode}): only tensors are accepted")
    if opcode == "GLOBAL":
        module, _, attr = str(arg).partition(" ")
        if not (
            (module, attr) in _TENSOR_GLOBALS
            or (module == "torch" and (_TENSOR_STORAGE.fullmatch(attr) or _TORCH_DTYPE.fullmatch(attr)))
        ):
            raise NotAModelError(f"the .pt2 archive's {name} names {module}.{attr}: only tensors are accepted")


def _check_program(program, name: str) -> None:
    """Symbolic sizes plain expressions, symbol names short, graph names free of quotes."""
    if not isinstance(program, dict):
        raise NotAModelError(f"the .pt2 archive's models/{name}.json is not a program")
    ranges = program.get("range_constraints") or {}
    for key in ranges if isinstance(ranges, dict) else ():
        if not _RANGE_KEY.fullmatch(key):
            raise NotAModelError(f"the .pt2 archive's models/{name}.json constrains {key[:60]!r}, not a symbol")
    stack = [program]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            if isinstance(value, (dict, list)):
                stack.append(value)
            elif isinstance(value, str) and isinstance(key, str):
                if key == "expr_str":
                    check_sym_expr(value, f"{PROGRAMS}/{name}.json")
                elif (key in _NAME_KEYS or key.endswith("_name")) and _UNSAFE_NAME.search(value):
                    raise NotAModelError(
                        f"the .pt2 archive's models/{name}.json has a {key} with quotes or control characters "
                        f"({value[:60]!r})"
                    )


def check_sym_expr(text: str, where: str) -> None:
    """`text` is a symbolic expression as torch writes it (`sympy.srepr`: calls of sympy's and
    torch's shape functions on integers and `Symbol('s0', ...)`), and nothing `sympify` would
    evaluate beyond that; powers and shifts are bounded."""

    def refuse(why: str):
        return NotAModelError(f"the .pt2 archive's {where} has a symbolic size {text[:80]!r} that {why}")

    if len(text) > EXPR_MAX_CHARS or "^" in text:  # sympify reads ^ as a power
        raise refuse("is too long or holds ^")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise refuse("is not an expression") from exc
    if sum(1 for _ in ast.walk(tree)) > EXPR_MAX_NODES:
        raise refuse("is too large")

    def small_int(node) -> bool:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Integer":
            node = node.args[0] if len(node.args) == 1 else None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            node = node.operand
        return isinstance(node, ast.Constant) and type(node.value) is int and node.value <= MAX_EXPONENT

    def has_power(node) -> bool:
        return any(
            (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in _POWERS)
            or (isinstance(n, ast.BinOp) and isinstance(n.op, ast.Pow))
            for n in ast.walk(node)
        )

    def check(node, string_ok: re.Pattern | None = None) -> None:
        if isinstance(node, ast.Constant):
            value = node.value
            if type(value) is str and string_ok is not None and string_ok.fullmatch(value) and "__" not in value:
                return
            if type(value) in (bool, float) or value is None or (type(value) is int and abs(value) <= 1 << 64):
                return
            raise refuse(f"holds the constant {str(value)[:40]!r}")
        if isinstance(node, ast.Name):
            if node.id.startswith("_") or not _SYMBOL_NAME.fullmatch(node.id):
                raise refuse(f"names {node.id!r}")
            return
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Not, ast.Invert)):
            return check(node.operand)
        if isinstance(node, ast.BinOp) and isinstance(
            node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.BitAnd, ast.BitOr)
        ):
            if isinstance(node.op, ast.Pow) and not (small_int(node.right) and not has_power(node.left)):
                raise refuse("raises to an unbounded power")
            check(node.left)
            return check(node.right)
        if isinstance(node, ast.Compare) and all(
            isinstance(op, (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)) for op in node.ops
        ):
            for part in [node.left, *node.comparators]:
                check(part)
            return None
        if isinstance(node, ast.BoolOp):
            for part in node.values:
                check(part)
            return None
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in _EXPR_FUNCTIONS):
            called = node.func.id if isinstance(node.func, ast.Name) else "something other than a function by its name"
            raise refuse(f"calls {called}")
        if isinstance(node, ast.Call):
            function = node.func.id
            if function in _POWERS and not (
                len(node.args) == 2 and small_int(node.args[1]) and not has_power(node.args[0])
            ):
                raise refuse(f"calls {function} with an unbounded exponent")
            strings = _SYMBOL_NAME if function == "Symbol" else _FLOAT_TEXT if function == "Float" else None
            for index, arg in enumerate(node.args):
                check(arg, strings if index == 0 else None)
            for keyword in node.keywords:
                if keyword.arg is None or not (
                    isinstance(keyword.value, ast.Constant) and type(keyword.value.value) in (bool, int)
                ):
                    raise refuse(f"passes {function} a keyword torch does not write")
                check(keyword.value)
            return None
        raise refuse(f"holds {ast.dump(node)[:60]}")

    check(tree.body)
