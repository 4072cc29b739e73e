"""The artifacts the measuring benchmarks share: the example ResNet-18 (224x224) exported,
converted for ONNX Runtime, and the base model's reference outputs for batch 1. Built once
under `.ayci/bench/` and reused while what they were built from is the same (`bench/cache.py`)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import engines  # noqa: E402
from adapters.local_store import LocalFolderStore  # noqa: E402
from bench.cache import CACHE, cache_key, exported_example  # noqa: E402
from engines import ConversionJob  # noqa: E402
from schemas.combos import Hardware, ModelRef  # noqa: E402
from services.converter.handlers import ensure_reference  # noqa: E402
from services.request.submission import store_model  # noqa: E402

INPUT_SIZE = [224, 224]


@dataclass
class Artifact:
    model: ModelRef  # stored in the cache's store, with its reference outputs
    model_path: Path
    onnx_path: Path
    reference_path: Path


def onnx_artifact(model_path: Path, workload: str, input_size: list[int], cache: Path) -> Artifact:
    """`model_path` converted for ONNX Runtime at batch 1 (its batch axis stays dynamic) and the
    base model's reference outputs for batch 1, built under `cache` once per what they are built from
    (the benchmarks' cache; the tests' session fixture `tiny_onnx` in a folder of its own)."""
    cache.mkdir(parents=True, exist_ok=True)
    store = LocalFolderStore(cache / "store")
    model = store_model(store, model_path, workload, input_size)
    reference_path = cache / f"reference-b1-{cache_key(model_path, 'reference', 1)}.npz"
    if not reference_path.exists():
        reference_path.write_bytes(store.get_bytes(ensure_reference(store, model, model_path, 1, cache)))
    onnx_dir = cache / f"onnx-b1-{cache_key(model_path, 'onnx', 1)}"
    if not (onnx_dir / "model.onnx").exists():
        print("converting it for ONNX Runtime ...", file=sys.stderr)
        onnx_dir.mkdir(exist_ok=True)
        engines.module("onnx").convert(
            ConversionJob(
                model=model,
                model_path=model_path,
                hardware=Hardware.intel,
                batch_size=1,
                target_cpu="x86_64",
                out_dir=onnx_dir,
            )
        )
    return Artifact(
        model=model, model_path=model_path, onnx_path=onnx_dir / "model.onnx", reference_path=reference_path
    )


def resnet18_onnx(cache: Path = CACHE) -> Artifact:
    cache.mkdir(parents=True, exist_ok=True)
    model_path = exported_example("resnet18-224", "image_classification", INPUT_SIZE, cache)
    return onnx_artifact(model_path, "image_classification", INPUT_SIZE, cache)
