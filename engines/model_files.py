"""Reading user model files without running code from them.

Accepted: a torch.export archive (`.pt2`, a zip of a JSON graph and raw tensor bytes) and
ONNX (protobuf). Never a pickle: a `.pt2` whose archive asks for pickled weights is refused,
and every tensor load inside `torch.export.load` is forced to `weights_only=True`.
"""

from __future__ import annotations

import contextlib
import json
import zipfile
from pathlib import Path

from schemas.combos import ModelFormat


class NotAModelError(ValueError):
    """The file is neither a torch.export archive nor an ONNX model."""


def sniff_format(path: Path) -> ModelFormat:
    """Which accepted format `path` holds; `NotAModelError` if none."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
        if any(n.endswith("archive_format") for n in names) and any("/models/" in n for n in names):
            return ModelFormat.pt2
        raise NotAModelError("a zip archive but not a torch.export (.pt2) archive")
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf raises several types for garbage
        raise NotAModelError(f"not a torch.export archive and not an ONNX model ({type(exc).__name__})") from exc
    if not model.graph.node:
        raise NotAModelError("not a torch.export archive and not an ONNX model (no graph nodes)")
    return ModelFormat.onnx


def _refuse_pickled_payloads(path: Path) -> None:
    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            if name.endswith(".json") and ("weights" in name or "constants" in name):
                text = archive.read(name).decode(errors="replace")
                with contextlib.suppress(ValueError):
                    if '"use_pickle": true' in json.dumps(json.loads(text)):
                        raise NotAModelError(f"the archive stores pickled tensors ({name}); only plain tensors are accepted")


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


def load_exported_program(path: Path):
    """The `torch.export.ExportedProgram` in a `.pt2` file, loaded without unpickling code and
    without the code of the library it was exported from (`_portable_archive`)."""
    import tempfile

    import torch

    if sniff_format(path) != ModelFormat.pt2:
        raise NotAModelError("not a torch.export archive")
    _refuse_pickled_payloads(path)
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
