"""What the benchmarks build once and keep under `.ayci/bench/`, keyed by what it was built from.

An entry's name ends in `cache_key(...)`: 16 hex digits of its inputs (a model file's bytes, or
plain values such as a workload, an input size, a trial count), the versions of the engine
libraries (`schemas.versions.library_versions`: torch, onnxruntime, onnx, apache-tvm, numpy) and
the source of AYCI's engines and workloads (`SOURCES`). After a library upgrade, a change to an
engine or to an example model, the key changes and the benchmark exports or converts again
instead of measuring a stale artifact. Old entries stay until `.ayci/bench/` is removed.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".ayci" / "bench"
# The code an artifact or a reference output depends on: the engines that convert and run it,
# the workloads that build the example models and their inputs, the reference computation.
SOURCES = ("engines", "workloads", "services/converter/reference.py")


@functools.cache
def source_hash(root: Path = ROOT) -> str:
    """SHA-256 of the Python source under `SOURCES` (paths and bytes, in path order)."""
    digest = hashlib.sha256()
    for entry in SOURCES:
        path = root / entry
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.exists() else []
        for file in files:
            digest.update(str(file.relative_to(root)).encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.cache
def _file_hash(path: Path, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_hash(path: Path) -> str:
    """SHA-256 of a file's bytes (computed once per file version in this process)."""
    stat = path.stat()
    return _file_hash(path.resolve(), stat.st_size, stat.st_mtime_ns)


def cache_key(*inputs: Path | str | int | float) -> str:
    """The key of an entry built from `inputs` (a `Path` counts by its bytes) with this
    machine's engine libraries and AYCI's engine and workload source."""
    from schemas.versions import library_versions

    described = [f"file:{file_hash(i)}" if isinstance(i, Path) else repr(i) for i in inputs]
    facts = {"inputs": described, "libraries": library_versions(), "source": source_hash()}
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


def exported_example(name: str, workload: str, input_size: list[int], cache: Path = CACHE) -> Path:
    """The workload's example model exported as `.pt2` under `cache` (once for a given key)."""
    import sys

    from workloads.examples import export_example

    path = cache / f"{name}-{cache_key('export', workload, *input_size)}.pt2"
    if not path.exists():
        print(f"exporting the example {workload} model {input_size} as {path.name} ...", file=sys.stderr, flush=True)
        partial = path.with_name(f"{path.stem}.partial.pt2")
        export_example(workload, input_size, partial)
        partial.rename(path)  # a run killed while exporting leaves no entry that looks complete
    return path
