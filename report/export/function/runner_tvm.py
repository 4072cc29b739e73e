"""The exported function's model: a `model.so` compiled by TVM (`tvm`), run by TVM's Relax VM.

Only TVM's runtime library is loaded (`TVM_USE_RUNTIME_LIB=1`: no compiler; torch kept out, which
TVM's FFI would import when it can), its thread pool sized as AYCI measured it (`TVM_NUM_THREADS`),
and the module is loaded once, at init. Inputs go in the signature's order (the compiled
function's parameters), outputs come back flattened in the model's order. Imports numpy and
TVM's runtime alone."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import numpy as np


def import_runtime():
    """TVM's runtime only (as AYCI's measurement imports it: `engines/tvm/runtime.py`)."""
    os.environ.setdefault("TVM_USE_RUNTIME_LIB", "1")
    blocked = "torch" not in sys.modules
    if blocked:
        sys.modules["torch"] = None  # type: ignore[assignment]  # ImportError for `import torch`
    try:
        import tvm
        import tvm.runtime.vm
    finally:
        if blocked:
            del sys.modules["torch"]
    # the runtime's contrib functions (tvm.contrib.sort.topk, a detector's NMS) live in
    # libtvm_runtime_extra, which `import tvm` loads only with the compiler
    from tvm.base import _LOADED_LIBS

    if "tvm_runtime_extra" not in _LOADED_LIBS:
        from tvm_ffi.libinfo import load_lib_ctypes

        runtime_dir = Path(_LOADED_LIBS["tvm_runtime"]._name).resolve().parent
        with contextlib.suppress(OSError, RuntimeError):
            _LOADED_LIBS["tvm_runtime_extra"] = load_lib_ctypes(
                package="tvm", target_name="tvm_runtime_extra", extra_lib_paths=[runtime_dir], mode="RTLD_LOCAL"
            )
    return tvm


class Model:
    """The Relax VM of the compiled module."""

    def __init__(self, path: Path, settings: dict, input_names: list[str]) -> None:
        os.environ["TVM_NUM_THREADS"] = str(int(settings.get("intra_op_threads", 1)))
        self.tvm = import_runtime()
        self.device = self.tvm.cpu()
        self.vm = self.tvm.runtime.vm.VirtualMachine(self.tvm.runtime.load_module(str(path)), self.device)
        self.main = self.vm["main"]
        self.input_names = list(input_names)
        self.output_names: list[str] = []  # the compiled function's results are not named

    def run(self, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        args = [self.tvm.runtime.tensor(np.ascontiguousarray(feed[name]), self.device) for name in self.input_names]
        return _flatten(self.main(*args))


def _flatten(value) -> list[np.ndarray]:
    if hasattr(value, "numpy"):
        return [value.numpy()]
    out: list[np.ndarray] = []
    for item in value:
        out.extend(_flatten(item))
    return out


def load_model(here: Path, deployment: dict) -> Model:
    names = [spec["name"] for spec in deployment["signature"]["inputs"]]
    return Model(here / deployment["artifact_file"], deployment["session_settings"], names)
