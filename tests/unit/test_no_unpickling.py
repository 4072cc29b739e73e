"""Nothing in an uploaded model is ever unpickled: a `.pt2` that carries a pickle is refused at
intake (`accept_model`, what an upload and a submission go through) and by the only loader
(`load_exported_program`), and the pickle's payload never runs.

Each hostile file carries a pickle whose `__reduce__` creates a marker file. A control loads the
same file with torch directly, in a child process, and sees the marker appear: the payload is
live, so the marker's absence after AYCI's intake means it was never unpickled."""

from __future__ import annotations

import io
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from engines.model_files import NotAModelError, accept_model, load_exported_program


class _Payload:
    """Unpickling this creates `marker` (by `exec`, a global no tensor pickle names)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').close()",)


def _pickled(marker: Path) -> bytes:
    buffer = io.BytesIO()
    torch.save(_Payload(marker), buffer)
    return buffer.getvalue()


def _exported(path: Path) -> Path:
    program = torch.export.export(torch.nn.Linear(2, 2).eval(), (torch.ones(1, 2),))
    torch.export.save(program, str(path))
    return path


def _rewritten(source: Path, target: Path, change) -> Path:
    """`source`'s archive with each member passed through `change(name, data)`, which returns the
    new bytes, None to drop the member, or a dict of extra members to add beside it."""
    with zipfile.ZipFile(source) as archive, zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as out:
        for info in archive.infolist():
            result = change(info.filename, archive.read(info.filename))
            if isinstance(result, dict):
                for name, data in result.items():
                    out.writestr(name, data)
            elif result is not None:
                out.writestr(info, result)
    return target


def legacy_torch_save(folder: Path, marker: Path) -> Path:
    """A `torch.save` zip (the legacy format) named `.pt2`."""
    path = folder / "model.pt2"
    path.write_bytes(_pickled(marker))
    return path


def use_pickle_weight(folder: Path, marker: Path) -> Path:
    """A real torch.export archive whose weight is declared `"use_pickle": true` and is the pickle:
    `torch.export.load` reads it with `torch.load(weights_only=False)`."""
    import json

    def change(name: str, data: bytes):
        if name.endswith("data/weights/model_weights_config.json"):
            config = json.loads(data)
            config["config"]["weight"]["use_pickle"] = True
            return json.dumps(config).encode()
        if name.endswith("data/weights/weight_0"):
            return _pickled(marker)
        return data

    return _rewritten(_exported(folder / "plain.pt2"), folder / "model.pt2", change)


def legacy_weights_member(folder: Path, marker: Path) -> Path:
    """A real torch.export archive whose weights are the legacy member `data/weights/model.pt`, a
    pickle: torch reads it with `weights_only=True` and, when that refuses, again without."""

    def change(name: str, data: bytes):
        if name.endswith("data/weights/model_weights_config.json"):
            return {name.replace("model_weights_config.json", "model.pt"): _pickled(marker)}
        return data

    return _rewritten(_exported(folder / "plain.pt2"), folder / "model.pt2", change)


def pickled_sample_inputs(folder: Path, marker: Path) -> Path:
    """A real torch.export archive whose example inputs are the pickle (same fallback)."""

    def change(name: str, data: bytes):
        return _pickled(marker) if name.endswith("data/sample_inputs/model.pt") else data

    return _rewritten(_exported(folder / "plain.pt2"), folder / "model.pt2", change)


HOSTILE = {
    "legacy torch.save": (legacy_torch_save, "torch.load(path, weights_only=False)"),
    "use_pickle weight": (use_pickle_weight, "torch.export.load(path)"),
    "legacy weights member": (legacy_weights_member, "torch.export.load(path)"),
    "pickled sample inputs": (pickled_sample_inputs, "torch.export.load(path)"),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_the_payload_is_live_when_torch_loads_the_file_itself(kind, tmp_path):
    """The control: without AYCI in the way, loading the file runs the payload."""
    build, load = HOSTILE[kind]
    marker = tmp_path / "ran"
    path = build(tmp_path, marker)
    subprocess.run(
        [sys.executable, "-c", f"import torch\npath = {str(path)!r}\ntry:\n    {load}\nexcept Exception:\n    pass"],
        capture_output=True,
        timeout=300,
        check=True,
    )
    assert marker.exists(), f"the {kind} payload did not run under plain torch: the test would prove nothing"


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_pickled_pt2_is_refused_at_intake_and_its_payload_never_runs(kind, tmp_path):
    build, _ = HOSTILE[kind]
    marker = tmp_path / "ran"
    path = build(tmp_path, marker)
    refused = []
    intakes = (
        lambda p: accept_model(p, tmp_path / "out"),
        load_exported_program,
        lambda p: load_exported_program(p, checked=True),
    )
    for intake in intakes:
        try:
            intake(path)
        except NotAModelError as exc:
            refused.append(str(exc))
        except Exception as exc:  # refused, but not as a model error: the user is told nothing useful
            pytest.fail(f"{kind}: {type(exc).__name__} instead of NotAModelError: {exc}")
        assert not marker.exists(), f"the {kind} payload ran"
    assert len(refused) == 3, f"{kind}: accepted by {3 - len(refused)} of intake, load, checked load"
