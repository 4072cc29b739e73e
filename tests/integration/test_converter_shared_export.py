"""The converter's real path (sandboxed children, torch, ONNX Runtime) makes one ONNX export per model for
every `onnx` and `onnx_int8` artifact, and takes `base`'s artifact as the reference's run checked it (issue 38)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from adapters.memory_store import MemoryStore
from schemas.combos import ModelRef
from services.converter.handlers import ConverterDeps
from services.converter.reference import compute_reference


def test_onnx_and_int8_convert_from_one_onnx_export_and_base_from_the_reference(tmp_path, tiny_image_model):
    """The real converter (sandboxed children, torch, ONNX Runtime) on ResNet-18 at 32x32: one export stored
    and taken by onnx at two batch sizes and by onnx_int8; base's artifact is the model file."""
    import hashlib

    from schemas import keys
    from schemas.combos import Combo, Matrix, Tuning, artifact_key, reference_key
    from schemas.documents import ArtifactManifest
    from schemas.events import ComboPending, Envelope, ModelConverted, RequestSubmitted, RunPlanned
    from services.converter.handlers import _exporter, on_combo_pending

    store = MemoryStore()
    data = tiny_image_model.read_bytes()
    model = ModelRef(
        sha256=hashlib.sha256(data).hexdigest(),
        size_bytes=len(data),
        format="pt2",
        workload="image_classification",
        input_size=[32, 32],
    )
    store.put_bytes(keys.model(model.sha256), data)
    # the run's plan: its batch sizes' references come from the first combination's child
    request = RequestSubmitted(
        model=model, matrix=Matrix(optimizers={"intel": ["onnx"]}, batch_sizes=[1, 2], memory_sizes_mb=[1769])
    )
    plan = RunPlanned(
        model=model,
        combos={f"k{c.batch_size}": c for c in request.matrix.combos()},
        deadline=datetime.now(UTC) + timedelta(hours=1),
        request=request,
    )
    store.put_bytes(keys.plan("r"), plan.model_dump_json().encode())
    deps = ConverterDeps(store=store, work_dir=tmp_path)
    outcomes = {}
    # onnx_int8 at a minimum its recipes meet on this random-weight model, under the keys dedup gives them
    int8 = Tuning(trials=0, min_agreement=0.9)
    for optimizer, batch in (("base", 1), ("onnx", 1), ("onnx", 2), ("onnx_int8", 1), ("onnx_int8", 2)):
        combo = Combo(hardware="intel", optimizer=optimizer, batch_size=batch, memory_mb=1769)
        pending = ComboPending(
            model=model,
            combo=combo,
            combo_key=f"k-{optimizer}-{batch}",
            artifact_key=artifact_key(model, combo, "x86-64-v3", int8)
            if optimizer == "onnx_int8"
            else f"a-{optimizer}-{batch}",
            target_cpu="x86-64-v3",
            min_agreement=0.9 if optimizer == "onnx_int8" else 0.99,
        )
        (out,) = on_combo_pending(Envelope.wrap(pending, run_id="r", producer="dedup"), deps)
        assert isinstance(out, ModelConverted), out
        outcomes[(optimizer, batch)] = ArtifactManifest.read(store.get_bytes(keys.manifest(out.artifact_key)))
        assert store.exists(keys.reference(reference_key(model, 2)))  # from the first child already
    assert store.list_keys("exports/") == [keys.onnx_export(model.sha256, _exporter())]
    assert store.get_bytes(keys.artifact_file("a-base-1", "model.pt2")) == data
    assert store.exists(keys.reference(reference_key(model, 2)))
    chose = outcomes[("onnx_int8", 1)].details
    assert chose.get("recipe") and len(chose["recipes"]) > 1  # int8 chose its recipe from the shared export
    # batch 2 made and judged the recipe batch 1 chose, alone
    took = outcomes[("onnx_int8", 2)].details
    assert took["recipe"] == chose["recipe"] and took["recipe_chosen_at"] == 1 and len(took["recipes"]) == 1
    # batch 2's reference computed beside batch 1's is the one a child of its own computes
    alone = tmp_path / "alone-b2.npz"
    compute_reference(
        tiny_image_model,
        model.model_dump_json(),
        "image_classification",
        [32, 32],
        2,
        alone,
        timeout_s=300,
        memory_mb=10240,
    )
    together = tmp_path / "together-b2.npz"
    together.write_bytes(store.get_bytes(keys.reference(reference_key(model, 2))))
    with np.load(alone) as a, np.load(together) as b:
        assert sorted(a.files) == sorted(b.files)
        for name in a.files:
            np.testing.assert_array_equal(a[name], b[name])
