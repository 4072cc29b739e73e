"""Reading user model files without running code from them.

Accepted: a torch.export archive (`.pt2`, a zip of a JSON graph and raw tensor bytes) and
ONNX (protobuf). Never a pickle: a `.pt2` whose archive asks for pickled weights is refused,
and every tensor load inside `torch.export.load` is forced to `weights_only=True`.
"""

from __future__ import annotations

import contextlib
import json
import tarfile
import zipfile
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from schemas.combos import ModelFormat


class NotAModelError(ValueError):
    """The file is neither a torch.export archive nor an ONNX model."""


BUNDLE_MAX_FILES = 256
BUNDLE_MAX_BYTES = 2 << 30  # unpacked; ONNX's protobuf cannot hold more in one file either


def is_onnx_bundle(path: Path) -> bool:
    """A zip or tar holding an `.onnx` file (and its external data files), not a `.pt2`."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
        return not _is_pt2(names) and any(n.lower().endswith(".onnx") for n in names)
    if tarfile.is_tarfile(path):
        try:
            with tarfile.open(path) as archive:
                return any(m.name.lower().endswith(".onnx") for m in archive.getmembers())
        except tarfile.TarError:
            return False
    return False


def _is_pt2(names: list[str]) -> bool:
    return any(n.endswith("archive_format") for n in names) and any("/models/" in n for n in names)


def sniff_format(path: Path) -> ModelFormat:
    """Which accepted format `path` holds; `NotAModelError` if none. An ONNX bundle (a zip or
    tar of an `.onnx` and its data files) counts as ONNX: `single_file_onnx` unpacks it."""
    from schemas.combos import ModelFormat

    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
        if _is_pt2(names):
            return ModelFormat.pt2
        if any(n.lower().endswith(".onnx") for n in names):
            return ModelFormat.onnx
        raise NotAModelError(
            "a zip archive but neither a torch.export (.pt2) archive nor an ONNX bundle (an .onnx and its data files)"
        )
    if is_onnx_bundle(path):
        return ModelFormat.onnx
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf raises several types for garbage
        raise NotAModelError(f"not a torch.export archive and not an ONNX model ({type(exc).__name__})") from exc
    if not model.graph.node:
        raise NotAModelError("not a torch.export archive and not an ONNX model (no graph nodes)")
    return ModelFormat.onnx


def _bundle_members(path: Path) -> list[tuple[str, int]]:
    """(name, size) of each regular file in the bundle; `NotAModelError` for anything unsafe:
    absolute paths, `..`, links or devices, too many files, too many bytes."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            infos = [i for i in archive.infolist() if not i.is_dir()]
            members = []
            for info in infos:
                if (info.external_attr >> 16) & 0o170000 == 0o120000:
                    raise NotAModelError(f"the bundle holds a link ({info.filename}): only regular files are accepted")
                members.append((info.filename, info.file_size))
    else:
        with tarfile.open(path) as archive:
            members = []
            for member in archive.getmembers():
                if member.isdir():
                    continue
                if not member.isfile():
                    raise NotAModelError(
                        f"the bundle holds a link or device ({member.name}): only regular files are accepted"
                    )
                members.append((member.name, member.size))
    if len(members) > BUNDLE_MAX_FILES:
        raise NotAModelError(f"the bundle holds {len(members)} files; at most {BUNDLE_MAX_FILES}")
    for name, _ in members:
        parts = PurePosixPath(name).parts
        if name.startswith(("/", "\\")) or ".." in parts or ":" in name.split("/")[0]:
            raise NotAModelError(f"the bundle holds a path outside itself ({name})")
    if sum(size for _, size in members) > BUNDLE_MAX_BYTES:
        raise NotAModelError(f"the bundle unpacks to more than {BUNDLE_MAX_BYTES >> 30} GB")
    return members


def _extract(path: Path, name: str, out: Path, budget: list[int]) -> None:
    """Copy one member, counting the bytes actually written (a zip may lie about its sizes)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    if zipfile.is_zipfile(path):
        archive = zipfile.ZipFile(path)
        source = archive.open(name)
    else:
        archive = tarfile.open(path)
        source = archive.extractfile(name)
    with archive, source, open(out, "wb") as target:
        while block := source.read(1 << 20):
            budget[0] -= len(block)
            if budget[0] < 0:
                raise NotAModelError(f"the bundle unpacks to more than {BUNDLE_MAX_BYTES >> 30} GB")
            target.write(block)


def single_file_onnx(path: Path, out_dir: Path) -> Path:
    """The ONNX model in `path` as one self-contained file: `path` itself for a plain ONNX file
    whose weights are inside it; for a bundle (zip or tar of one `.onnx` and its external data
    files), the model with its data read in and saved as one file in `out_dir`. Refused with
    the reason (`NotAModelError`): an ONNX file whose data files were not uploaded, an external
    data location outside the bundle, an unsafe archive."""
    import onnx

    if not is_onnx_bundle(path):
        model = onnx.load(str(path), load_external_data=False)
        missing = _external_locations(model)
        if missing:
            raise NotAModelError(
                f"the ONNX model keeps its weights in external files ({', '.join(sorted(missing)[:3])}) that were not uploaded: "
                "upload a .zip or .tar of the .onnx and its data files, or save one file with "
                "onnx.save_model(model, 'model.onnx', save_as_external_data=False)"
            )
        return path
    members = _bundle_members(path)
    onnx_files = [name for name, _ in members if name.lower().endswith(".onnx")]
    if len(onnx_files) != 1:
        raise NotAModelError(f"an ONNX bundle must hold exactly one .onnx file; this one holds {len(onnx_files)}")
    unpacked = out_dir / "bundle"
    budget = [BUNDLE_MAX_BYTES]
    for name, _ in members:
        _extract(path, name, unpacked / name, budget)
    model_path = unpacked / onnx_files[0]
    try:
        model = onnx.load(str(model_path), load_external_data=False)
    except Exception as exc:
        raise NotAModelError(f"the bundle's {onnx_files[0]} is not an ONNX model ({type(exc).__name__})") from exc
    base = model_path.parent.resolve()
    for location in _external_locations(model):
        target = (base / location).resolve()
        if (
            PurePosixPath(location).is_absolute()
            or ".." in PurePosixPath(location).parts
            or not target.is_relative_to(unpacked.resolve())
        ):
            raise NotAModelError(f"an external data location points outside the bundle ({location})")
        if not target.is_file():
            raise NotAModelError(f"the bundle lacks the external data file {location} the model names")
    try:
        onnx.load_external_data_for_model(model, str(base))
        single = out_dir / "model.onnx"
        onnx.save_model(model, str(single))
    except (ValueError, OSError) as exc:
        raise NotAModelError(f"the bundle's model cannot be saved as one file: {exc}") from exc
    return single


def _external_locations(model) -> set[str]:
    import onnx

    tensors = list(model.graph.initializer) + [a.t for n in model.graph.node for a in n.attribute if a.HasField("t")]
    return {
        entry.value
        for t in tensors
        if t.data_location == onnx.TensorProto.EXTERNAL
        for entry in t.external_data
        if entry.key == "location"
    }


def _refuse_pickled_payloads(path: Path) -> None:
    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            if name.endswith(".json") and ("weights" in name or "constants" in name):
                text = archive.read(name).decode(errors="replace")
                with contextlib.suppress(ValueError):
                    if '"use_pickle": true' in json.dumps(json.loads(text)):
                        raise NotAModelError(
                            f"the archive stores pickled tensors ({name}); only plain tensors are accepted"
                        )


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
    without the code of the library it was exported from (`_portable_archive`). `checked`: the
    file is an artifact known to be a `.pt2` (a measuring process skips the format sniffing)."""
    import tempfile

    import torch

    if not checked and not (zipfile.is_zipfile(path) and _is_pt2(zipfile.ZipFile(path).namelist())):
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
