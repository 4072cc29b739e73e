"""The exported function's model: the user's `torch.export` program (`base` on a `.pt2`), run by
PyTorch (CPU) as AYCI measured it.

The program is loaded once, at init, with every `torch.load` inside `torch.export.load` forced to
`weights_only=True` (tensors, never pickled code), its thread count as measured, and called as
it was exported: positional inputs by position, keyword inputs by name, under
`torch.inference_mode()`. Imports numpy and torch alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch


def load_program(path: Path):
    real_load = torch.load

    def tensors_only(*args, **kwargs):
        kwargs["weights_only"] = True
        return real_load(*args, **kwargs)

    torch.load = tensors_only
    try:
        return torch.export.load(str(path))
    finally:
        torch.load = real_load


class Model:
    """The exported program's module."""

    def __init__(self, path: Path, settings: dict, input_names: list[str]) -> None:
        threads = int(settings.get("intra_op_threads", 1))
        torch.set_num_threads(threads)
        if torch.get_num_interop_threads() != 1:
            torch.set_num_interop_threads(1)
        program = load_program(path)
        args_spec, _ = program.call_spec.in_spec.children_specs
        self.positional = args_spec.num_children  # the inputs come in the signature's order: positional first
        self.module = program.module()
        self.input_names = list(input_names)
        self.output_names: list[str] = []  # a program's outputs are not named

    def run(self, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        tensors = [(name, torch.from_numpy(np.ascontiguousarray(feed[name]))) for name in self.input_names]
        args = [tensor for _, tensor in tensors[: self.positional]]
        kwargs = dict(tensors[self.positional :])
        with torch.inference_mode():
            out = self.module(*args, **kwargs)
        flat = out if isinstance(out, (tuple, list)) else [out]
        return [tensor.detach().numpy() for tensor in flat]


def load_model(here: Path, deployment: dict) -> Model:
    names = [spec["name"] for spec in deployment["signature"]["inputs"]]
    return Model(here / deployment["artifact_file"], deployment["session_settings"], names)
