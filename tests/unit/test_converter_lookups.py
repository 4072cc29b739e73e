"""The converter looks each key up once: a stored reference is checked once per conversion (not again by
`ensure_reference`), and a missing one is computed and stored before the artifact is converted."""

from __future__ import annotations

from collections import Counter

from adapters.memory_store import MemoryStore
from engines import Conversion
from schemas import keys
from schemas.combos import Combo, ModelRef, reference_key
from schemas.events import ComboPending, Envelope, ModelConverted
from services.converter.handlers import ConverterDeps, on_combo_pending

MODEL = ModelRef(sha256="cd" * 32, size_bytes=10, format="onnx", workload="image_classification", input_size=[8, 8])


class CountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.heads: Counter[str] = Counter()

    def exists(self, key: str) -> bool:
        self.heads[key] += 1
        return super().exists(key)


def _pending(artifact_key: str = "art-1") -> Envelope:
    pending = ComboPending(
        model=MODEL,
        combo=Combo(hardware="intel", optimizer="onnx", batch_size=1, memory_mb=1769),
        combo_key="combo-1",
        artifact_key=artifact_key,
        target_cpu="x86-64-v3",
    )
    return Envelope.wrap(pending, run_id="run-1", producer="dedup")


def _convert(optimizer, job) -> Conversion:
    (job.out_dir / "model.onnx").write_bytes(b"artifact")
    return Conversion(artifact_file="model.onnx", conversion_s=0.01)


def test_a_stored_reference_is_looked_up_once_and_never_computed(tmp_path):
    store = CountingStore()
    store.put_bytes(keys.model(MODEL.sha256), b"model bytes")
    store.put_bytes(keys.reference(reference_key(MODEL, 1)), b"npz")

    def no_reference(*args, **kwargs):
        raise AssertionError("the reference is stored")

    deps = ConverterDeps(store=store, work_dir=tmp_path, compute_reference=no_reference, convert=_convert)
    (out,) = on_combo_pending(_pending(), deps)
    assert isinstance(out, ModelConverted)
    assert store.heads[keys.reference(reference_key(MODEL, 1))] == 1
    assert store.exists(keys.manifest("art-1"))


def test_a_missing_reference_is_computed_stored_and_the_artifact_converted(tmp_path):
    store = CountingStore()
    store.put_bytes(keys.model(MODEL.sha256), b"model bytes")
    computed = []

    def compute(model_path, model_json, workload, input_size, batch, out, **kwargs):
        computed.append(batch)
        out.write_bytes(b"npz")

    deps = ConverterDeps(store=store, work_dir=tmp_path, compute_reference=compute, convert=_convert)
    (out,) = on_combo_pending(_pending(), deps)
    assert isinstance(out, ModelConverted)
    assert computed == [1] and store.get_bytes(keys.reference(reference_key(MODEL, 1))) == b"npz"
