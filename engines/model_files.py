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


def load_exported_program(path: Path):
    """The `torch.export.ExportedProgram` in a `.pt2` file, loaded without unpickling code."""
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
        return torch.export.load(str(path))
    except NotAModelError:
        raise
    except Exception as exc:
        raise NotAModelError(f"the .pt2 archive does not load: {exc}") from exc
    finally:
        torch.load = real_load
