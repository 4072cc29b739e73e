"""Versions that decide whether a stored result or artifact still stands.

AYCI's own version, and the version of each engine's libraries, read from the installed
distributions' metadata (`importlib.metadata`: nothing is imported). The libraries an
optimizer depends on are part of its artifact and combination keys (`schemas/combos.py`):
after an upgrade the keys change, so old results stay readable and listed but are not reused.
"""

from __future__ import annotations

import functools
from importlib import metadata

AYCI_VERSION = "0.5.0"

# the distributions each optimizer's artifact and timing depend on, by the model's format
ENGINE_LIBRARIES: dict[tuple[str, str], tuple[str, ...]] = {
    ("base", "pt2"): ("torch",),
    ("base", "onnx"): ("onnxruntime",),
    ("onnx", "pt2"): ("torch", "onnx", "onnxscript", "onnxruntime"),
    ("onnx", "onnx"): ("onnxruntime",),
    ("onnx_int8", "pt2"): ("torch", "onnx", "onnxscript", "onnxruntime"),
    ("onnx_int8", "onnx"): ("onnx", "onnxruntime"),
    ("tvm", "pt2"): ("torch", "apache-tvm"),
    ("tvm", "onnx"): ("onnx", "apache-tvm"),
}
REPORTED_LIBRARIES = ("torch", "onnxruntime", "onnx", "apache-tvm", "numpy")


@functools.cache
def library_version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def engine_versions(optimizer: str, model_format: str) -> dict[str, str | None]:
    """The versions of what `optimizer` uses for a model of `model_format`."""
    return {name: library_version(name) for name in ENGINE_LIBRARIES[(optimizer, model_format)]}


def library_versions() -> dict[str, str | None]:
    """The versions of every engine library, for a result's environment."""
    return {name: library_version(name) for name in REPORTED_LIBRARIES}
