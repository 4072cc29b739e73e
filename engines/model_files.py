"""Reading user model files without running code from them: intake's byte-level checks.

Accepted: a torch.export archive (`.pt2`, a zip of a JSON program and raw tensor bytes; checked
member by member by `engines.pt2_archive` before torch reads it) and ONNX (protobuf), alone or
as a bundle (a zip or tar of one `.onnx` and its external data files, unpacked by
`engines.archives` with its counts and sizes bounded). Never a pickle, never compiled code,
never an ONNX tensor whose data lies outside what was uploaded.
"""

from __future__ import annotations

import json
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from engines.archives import BUNDLE_MAX_ENTRIES, NotAModelError, bundle_files, unpack_bundle, zip_entry_count
from engines.pt2_archive import PT2_MAX_MEMBERS, check_pt2_archive

if TYPE_CHECKING:
    from schemas.combos import ModelFormat

__all__ = ["BUNDLE_MAX_ENTRIES", "MODEL_MAX_BYTES", "AcceptedModel", "NotAModelError", "accept_model"]

MODEL_MAX_BYTES = 1 << 30  # what a model may unpack to unless the caller says (the service: Settings.max_model_bytes)
_LOAD_MAX_BYTES = 1 << 40  # loading a stored model: intake bounded its size, only the code checks matter here


@dataclass(frozen=True)
class AcceptedModel:
    """A model file intake accepted: `path` is one self-contained file (the upload itself, or
    an ONNX bundle made one file), `size_bytes` what the model occupies unpacked (what the
    planner's memory check reads), never the compressed size of what was uploaded."""

    path: Path
    format: ModelFormat
    size_bytes: int


def accept_model(path: Path, out_dir: Path, max_bytes: int = MODEL_MAX_BYTES) -> AcceptedModel:
    """Intake's checks of an uploaded model file, from its bytes alone (nothing of it is run or
    unpickled): its format, a `.pt2` archive's members (`check_pt2_archive`), an ONNX model's
    external data (`single_file_onnx`); a model unpacking to more than `max_bytes` is refused.
    `NotAModelError` with the reason otherwise; `out_dir` receives an unpacked bundle."""
    from schemas.combos import ModelFormat

    model_format = sniff_format(path)
    if model_format == ModelFormat.pt2:
        size = check_pt2_archive(path, max_bytes)
        return AcceptedModel(path=path, format=model_format, size_bytes=max(size, path.stat().st_size))
    single = single_file_onnx(path, out_dir, max_bytes)
    size = single.stat().st_size
    if size > max_bytes:
        raise NotAModelError(f"the model has {size} bytes; a model may have at most {max_bytes}")
    return AcceptedModel(path=single, format=model_format, size_bytes=size)


def _zip_names(path: Path) -> list[str]:
    entries = zip_entry_count(path)
    if entries is not None and entries > PT2_MAX_MEMBERS:
        raise NotAModelError(f"the zip archive holds {entries} entries; at most {PT2_MAX_MEMBERS}")
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.namelist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError) as exc:
        raise NotAModelError(f"the zip archive cannot be read ({type(exc).__name__}: {exc})") from exc


def _is_tar(path: Path) -> bool:
    try:
        return tarfile.is_tarfile(path)
    except (tarfile.TarError, OSError, EOFError):
        return False


def is_onnx_bundle(path: Path) -> bool:
    """A zip or tar holding an `.onnx` file (and its external data files), not a `.pt2`. A tar's
    members are read one at a time up to the first `.onnx` (`NotAModelError` past the cap)."""
    if zipfile.is_zipfile(path):
        names = _zip_names(path)
        return not _is_pt2(names) and any(n.lower().endswith(".onnx") for n in names)
    if _is_tar(path):
        return any(name.lower().endswith(".onnx") for name, _ in bundle_files(path))
    return False


def _is_pt2(names: list[str]) -> bool:
    return any(n.endswith("archive_format") for n in names) and any("/models/" in n for n in names)


def sniff_format(path: Path) -> ModelFormat:
    """Which accepted format `path` holds; `NotAModelError` if none. An ONNX bundle (a zip or
    tar of an `.onnx` and its data files) counts as ONNX: `single_file_onnx` unpacks it."""
    from schemas.combos import ModelFormat

    if zipfile.is_zipfile(path):
        names = _zip_names(path)
        if _is_pt2(names):
            return ModelFormat.pt2
        if any(n.lower().endswith(".onnx") for n in names):
            return ModelFormat.onnx
        if any(n.endswith("data.pkl") for n in names):
            raise NotAModelError(
                "a torch.save file (a pickle, data.pkl): pickles are not accepted; "
                "export the model with torch.export.save (.pt2) or to ONNX"
            )
        raise NotAModelError(
            "a zip archive but neither a torch.export (.pt2) archive nor an ONNX bundle (an .onnx and its data files)"
        )
    if is_onnx_bundle(path):
        return ModelFormat.onnx
    with open(path, "rb") as handle:
        head = handle.read(2)
    if len(head) == 2 and head[0] == 0x80 and head[1] <= 5:
        raise NotAModelError(
            "a Python pickle (torch.save's legacy format): pickles are not accepted; "
            "export the model with torch.export.save (.pt2) or to ONNX"
        )
    model = _load_onnx(path, "not a torch.export archive and not an ONNX model")
    if not model.graph.node:
        raise NotAModelError("not a torch.export archive and not an ONNX model (no graph nodes)")
    return ModelFormat.onnx


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def _load_onnx(path: Path, what: str):
    """The ONNX model in `path` without its external data; whatever the library raises on
    hostile bytes (protobuf decode errors, checker errors, ...) becomes `NotAModelError`."""
    import onnx

    try:
        return onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf raises several types for garbage
        raise NotAModelError(f"{what} ({_reason(exc)})") from exc


def single_file_onnx(path: Path, out_dir: Path, max_bytes: int = MODEL_MAX_BYTES) -> Path:
    """The ONNX model in `path` as one self-contained file: `path` itself for a plain ONNX file
    whose weights are inside it; for a bundle (zip or tar of one `.onnx` and its external data
    files), the model with its data read in and saved as one file in `out_dir`. Refused with
    the reason (`NotAModelError`): an ONNX file any of whose tensors (in any graph, subgraph,
    function, `tensors` attribute or sparse initializer) keeps its data in a file that was not
    uploaded, an external data location outside the bundle, an unsafe archive, a bundle
    unpacking to more than `max_bytes`, anything the ONNX library refuses."""
    import onnx

    if not is_onnx_bundle(path):
        model = _load_onnx(path, "not an ONNX model")
        external = sorted({location for _, location in _external_tensors(model)})
        if external:
            raise NotAModelError(
                f"the ONNX model keeps its weights in external files ({', '.join(external[:3])}) "
                "that were not uploaded: "
                "upload a .zip or .tar of the .onnx and its data files, or save one file with "
                "onnx.save_model(model, 'model.onnx', save_as_external_data=False)"
            )
        return path
    out_dir.mkdir(parents=True, exist_ok=True)
    unpacked = Path(tempfile.mkdtemp(prefix="bundle-", dir=out_dir))
    names = unpack_bundle(path, unpacked, max_bytes)
    onnx_files = [name for name in names if name.lower().endswith(".onnx")]
    if len(onnx_files) != 1:
        raise NotAModelError(f"an ONNX bundle must hold exactly one .onnx file; this one holds {len(onnx_files)}")
    model_path = unpacked / onnx_files[0]
    model = _load_onnx(model_path, f"the bundle's {onnx_files[0]} is not an ONNX model")
    base = model_path.parent.resolve()
    for where, location in _external_tensors(model):
        target = (base / location).resolve()
        if (
            not location
            or "\\" in location
            or PurePosixPath(location).is_absolute()
            or ".." in PurePosixPath(location).parts
            or not target.is_relative_to(unpacked.resolve())
        ):
            raise NotAModelError(f"an external data location points outside the bundle ({location!r}, {where})")
        if not target.is_file():
            raise NotAModelError(f"the bundle lacks the external data file {location} the model names ({where})")
    try:
        onnx.load_external_data_for_model(model, str(base))
    except Exception as exc:  # onnx.checker.ValidationError for a location it refuses, ValueError, OSError
        raise NotAModelError(f"the bundle's external data cannot be read ({_reason(exc)})") from exc
    left = [where for where, _ in _external_tensors(model)]
    if left:
        raise NotAModelError(f"the bundle's model keeps external data where ONNX does not read it in ({left[0]})")
    single = out_dir / "model.onnx"
    try:
        onnx.save_model(model, str(single))
    except Exception as exc:  # ValueError past protobuf's 2 GB
        raise NotAModelError(f"the bundle's model cannot be saved as one file ({_reason(exc)})") from exc
    return single


def _onnx_tensors(model):
    """(where, TensorProto) for every tensor of the model: initializers and sparse initializers
    (values and indices) of every graph, node attributes (`t`, `tensors`, sparse ones) and
    subgraphs (`If`, `Loop`, `Scan`: `g`, `graphs`) at any depth, functions, training graphs."""
    graphs = [("the graph", model.graph)]
    graphs += [
        (f"training graph {i}", g)
        for i, info in enumerate(model.training_info)
        for g in (info.initialization, info.algorithm)
    ]
    nodes = [(f"function {f.name!r}", node) for f in model.functions for node in f.node]
    while graphs or nodes:
        if graphs:
            where, graph = graphs.pop()
            for tensor in graph.initializer:
                yield f"initializer {tensor.name!r} of {where}", tensor
            for sparse in graph.sparse_initializer:
                yield f"sparse initializer {sparse.values.name!r} of {where}", sparse.values
                yield f"sparse initializer {sparse.values.name!r} of {where}", sparse.indices
            nodes += [(where, node) for node in graph.node]
            continue
        where, node = nodes.pop()
        for attribute in node.attribute:
            at = f"attribute {attribute.name!r} of node {node.name or node.op_type!r} in {where}"
            if attribute.HasField("t"):
                yield at, attribute.t
            yield from ((at, t) for t in attribute.tensors)
            sparse = list(attribute.sparse_tensors) + (
                [attribute.sparse_tensor] if attribute.HasField("sparse_tensor") else []
            )
            for item in sparse:
                yield at, item.values
                yield at, item.indices
            if attribute.HasField("g"):
                graphs.append((at, attribute.g))
            graphs += [(at, g) for g in attribute.graphs]


def _external_tensors(model) -> list[tuple[str, str]]:
    """(where, location) of every tensor whose data lies in an external file."""
    import onnx

    found = []
    for where, tensor in _onnx_tensors(model):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            locations = [entry.value for entry in tensor.external_data if entry.key == "location"]
            found.append((where, locations[0] if locations else ""))
    return found


def _plain_spec(node: dict, known: set[str]) -> bool:
    """Turn pytree nodes of types torch does not know into tuples of their children, in place;
    True if any was changed."""
    changed = False
    if node.get("type") is not None and node["type"] not in known:
        node["type"], node["context"] = "builtins.tuple", "null"
        changed = True
    for child in node.get("children_spec") or []:
        changed = _plain_spec(child, known) or changed
    return changed


def _portable_archive(path: Path, out_dir: Path) -> Path:
    """The archive as torch can load it without the exporting library: a program exported from
    a library model (e.g. transformers, whose outputs are its own `ModelOutput` classes) names
    those classes in its call specs, and loading them would need that library's code. They are
    read as plain tuples of the same tensors, in the same order. The archive itself when
    nothing needs changing."""
    import torch.utils._pytree as pytree

    known = set(pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE)
    with zipfile.ZipFile(path) as archive:
        programs = [n for n in archive.namelist() if "/models/" in n and n.endswith(".json")]
        patched: dict[str, bytes] = {}
        for name in programs:
            program = json.loads(archive.read(name))
            changed = False
            for entry in program.get("graph_module", {}).get("module_call_graph", []):
                signature = entry.get("signature") or {}
                for field in ("in_spec", "out_spec"):
                    if signature.get(field):
                        version, tree = json.loads(signature[field])
                        if _plain_spec(tree, known):
                            signature[field] = json.dumps([version, tree])
                            changed = True
            if changed:
                patched[name] = json.dumps(program).encode()
        if not patched:
            return path
        portable = out_dir / "portable.pt2"
        with zipfile.ZipFile(portable, "w", compression=zipfile.ZIP_STORED) as out:
            for info in archive.infolist():
                out.writestr(info, patched.get(info.filename) or archive.read(info.filename))
    return portable


def load_exported_program(path: Path, *, checked: bool = False):
    """The `torch.export.ExportedProgram` in a `.pt2` file, loaded without unpickling code and
    without the code of the library it was exported from (`_portable_archive`). The archive's
    members are checked first whatever the caller knows of it (`check_pt2_archive`: nothing torch
    would unpickle or run, example inputs a pickle of tensors only), and every `torch.load` inside
    `torch.export.load` is forced to `weights_only=True`. `checked`: kept for callers that know
    the file is an artifact; the checks run all the same."""
    import torch

    check_pt2_archive(path, _LOAD_MAX_BYTES)
    real_load = torch.load

    def tensors_only(*args, **kwargs):
        kwargs["weights_only"] = True
        return real_load(*args, **kwargs)

    torch.load = tensors_only
    try:
        with tempfile.TemporaryDirectory(prefix="ayci-pt2-") as tmp:
            return torch.export.load(str(_portable_archive(path, Path(tmp))))
    except NotAModelError:
        raise
    except Exception as exc:
        raise NotAModelError(f"the .pt2 archive does not load: {exc}") from exc
    finally:
        torch.load = real_load
