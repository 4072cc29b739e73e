"""`onnx_int8` chooses its quantization recipe per model (engines/quantization.py), judged on
at least 32 samples whatever the batch: a transformer whose activations static QDQ cannot
keep gets dynamic per-channel weights; ResNet-18 keeps static QDQ; a model no recipe can keep
is converted with every recipe's figure said, and its row is never recommended. Real torch
exports and ONNX Runtime quantization throughout (each conversion takes 10-40 s)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from engines import ConversionJob, onnx_int8_engine
from engines.onnx_engine import exported_onnx
from engines.quantization import RECIPES, choose_recipe
from schemas.combos import ModelFormat, ModelRef, Workload
from workloads.agreement import AGREEMENT_SAMPLES
from workloads.examples import export_example


def _job(pt2: Path, workload: str, size: list[int], out: Path, batch: int = 1) -> ConversionJob:
    model = ModelRef(
        sha256=hashlib.sha256(pt2.read_bytes()).hexdigest(),
        size_bytes=pt2.stat().st_size,
        format=ModelFormat.pt2,
        workload=Workload(workload),
        input_size=size,
    )
    out.mkdir(parents=True, exist_ok=True)
    return ConversionJob(model=model, model_path=pt2, hardware=None, batch_size=batch, target_cpu="", out_dir=out)


def _recipe(details: dict, name: str) -> dict:
    return next(r for r in details["recipes"] if r["recipe"] == name)


def test_a_transformer_gets_dynamic_per_channel_where_static_qdq_loses_agreement(tmp_path):
    """The example encoder made trained-like (peaked attention, outlier channels in its
    residual stream): static QDQ falls below 0.99 on 32 text-like samples at batch 1, dynamic
    per-channel MatMul weights keep >= 0.99 and are chosen."""
    from onnxruntime.quantization.preprocess import quant_pre_process

    pt2 = export_example("nlp", [32], tmp_path / "encoder.pt2", attention_scale=8.0, outlier_channels=2)
    job = _job(pt2, "nlp", [32], tmp_path / "out")
    prepared = tmp_path / "prepared.onnx"
    quant_pre_process(str(exported_onnx(job)), str(prepared))
    recipes = [r for r in RECIPES if r.name in ("static_qdq", "dynamic_per_channel")]
    details = choose_recipe(job, prepared, tmp_path / "out" / "model.int8.onnx", recipes=recipes)
    static, dynamic = _recipe(details, "static_qdq"), _recipe(details, "dynamic_per_channel")
    assert static["agreement"] < 0.99 <= dynamic["agreement"], details["recipe_summary"]
    assert not static["meets_minimum"] and dynamic["meets_minimum"]
    assert details["recipe"] == "dynamic_per_channel" and details["meets_minimum"]
    assert details["agreement_basis"] == {"inputs": "synthetic", "samples": 32, "calibration_samples": 32}
    assert details["recipe_summary"].startswith(f"static QDQ {static['agreement']:.3f}")
    assert details["recipe_summary"].endswith("chosen") and "dynamic per channel" in details["recipe_summary"]
    assert all(r["p50_ms"] > 0 and r["relative_p50"] > 0 for r in details["recipes"])
    # the artifact is the dynamic model: integer MatMuls, no QDQ pairs
    import onnx

    ops = {node.op_type for node in onnx.load(str(tmp_path / "out" / "model.int8.onnx")).graph.node}
    assert ops & {"MatMulInteger", "DynamicQuantizeMatMul", "DynamicQuantizeLinear"} and "QuantizeLinear" not in ops


def test_resnet18_keeps_static_qdq(tmp_path):
    """The example ResNet-18 (64x64 inputs): every recipe agrees, and static QDQ (int8 convolutions)
    is the fastest; the dynamic recipes quantize only its last Gemm."""
    pt2 = export_example("image_classification", [64, 64], tmp_path / "resnet.pt2")
    job = _job(pt2, "image_classification", [64, 64], tmp_path / "out")
    conversion = onnx_int8_engine.convert(job)
    details = conversion.details
    assert details["recipe"] == "static_qdq", details["recipe_summary"]
    static = _recipe(details, "static_qdq")
    assert static["meets_minimum"] and static["relative_p50"] < 1.0
    assert {"dynamic_per_channel", "dynamic_per_tensor"} <= {r["recipe"] for r in details["recipes"]}
    assert "static_qdq_sensitive_float" not in {r["recipe"] for r in details["recipes"]}  # no Softmax, LayerNorm
    assert (tmp_path / "out" / conversion.artifact_file).exists()


class Cancelling:
    """Logits that are the small difference of two nearly equal large projections: any int8
    rounding of either is larger than the difference, so no recipe keeps the top-1."""

    @staticmethod
    def build():
        import torch

        class Model(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                generator = torch.Generator().manual_seed(0)
                weight = torch.randn(10, 3 * 8 * 8, generator=generator)
                self.a = torch.nn.Linear(3 * 8 * 8, 10, bias=False)
                self.b = torch.nn.Linear(3 * 8 * 8, 10, bias=False)
                with torch.no_grad():
                    self.a.weight.copy_(weight)
                    self.b.weight.copy_(weight + 1e-3 * torch.randn(10, 3 * 8 * 8, generator=generator))

            def forward(self, pixels):
                flat = pixels.flatten(1)
                return self.a(flat) - self.b(flat)

        return Model().eval()

    @classmethod
    def export(cls, path: Path) -> Path:
        import torch

        batch = torch.export.Dim("batch", min=1, max=64)
        program = torch.export.export(cls.build(), (torch.randn(2, 3, 8, 8),), dynamic_shapes={"pixels": {0: batch}})
        torch.export.save(program, str(path))
        return path


@pytest.fixture(scope="module")
def cancelling(tmp_path_factory) -> Path:
    return Cancelling.export(tmp_path_factory.mktemp("cancelling") / "cancelling.pt2")


def test_no_recipe_meets_the_minimum_and_the_row_says_so(cancelling, tmp_path):
    from report.recommendation import recommend
    from report.table import summary_rows
    from tests.conftest import archived_summary, measured_result

    job = _job(cancelling, "image_classification", [8, 8], tmp_path / "out")
    details = onnx_int8_engine.convert(job).details
    assert not details["meets_minimum"]
    assert details["recipes"] and all(r["agreement"] < 0.99 for r in details["recipes"]), details["recipe_summary"]
    best = max(details["recipes"], key=lambda r: r["agreement"])
    assert details["recipe"] == best["recipe"]  # the artifact agrees the most of them
    for recipe in details["recipes"]:
        assert f"{recipe['label']} {recipe['agreement']:.3f}" in details["recipe_summary"]

    int8 = measured_result("intel/onnx_int8/b1/1769MB", p99=1.0, cost=0.1)
    int8["agreement"] = {"score": best["agreement"], "metric": "top1", "samples": 32, "inputs": "synthetic"}
    int8["conversion"] = details
    summary = archived_summary(
        "run-1", "complete", [int8, measured_result("intel/onnx/b1/1769MB", p99=5.0, cost=1.0)], []
    )
    (row,) = [r for r in summary_rows(summary) if r.combination == "intel/onnx_int8/b1/1769MB"]
    assert f"no int8 recipe meets {details['min_agreement']}: {details['recipe_summary']}" in row.note
    assert row.recipe == details["recipe_summary"] and row.agreement_basis == "32 synthetic samples"
    assert "agreement on 32 synthetic samples" in row.note
    rec = recommend(summary["results"], slo_p99_ms=None, min_agreement=0.99)
    assert rec.fastest == rec.cheapest == "intel/onnx/b1/1769MB"
    assert details["recipe_summary"] in rec.excluded["intel/onnx_int8/b1/1769MB"]


def test_agreement_rests_on_32_samples_at_batch_1(cancelling, tmp_path):
    """The reference holds 32 batches at batch 1 (the timed one and 31 more), the measurement
    judges all of them, and the agreement says so; an output wrong on one later batch only
    is seen."""
    from engines import module
    from measuring.measure import judged_agreement, read_reference
    from services.converter.reference import reference_outputs
    from workloads import image_classification

    job = _job(cancelling, "image_classification", [8, 8], tmp_path / "base")
    reference = tmp_path / "reference.npz"
    reference_outputs(str(cancelling), job.model.model_dump_json(), 1, str(reference))
    stored = np.load(reference)
    assert sum(k.startswith("check") and ":input:" in k for k in stored.files) == AGREEMENT_SAMPLES - 1
    inputs, ref_outputs = read_reference(str(reference))
    base = module("base")
    run = base.load(tmp_path / "base" / base.convert(job).artifact_file, threads=1)
    agreement = judged_agreement(image_classification.agreement, run, str(reference), ref_outputs, run(inputs))
    assert (agreement.score, agreement.samples, agreement.inputs) == (1.0, 32, "synthetic")
    assert agreement.as_dict()["samples"] == 32

    calls = []

    def wrong_on_the_twentieth(batch):
        calls.append(1)
        outputs = run(batch)
        return [-o for o in outputs] if len(calls) == 20 else outputs

    wrong = judged_agreement(
        image_classification.agreement, wrong_on_the_twentieth, str(reference), ref_outputs, run(inputs)
    )
    assert wrong.score == pytest.approx(31 / 32) and wrong.samples == 32


def test_user_inputs_are_judged_and_calibrated_on_and_said_so(cancelling, tmp_path):
    """With the user's own inputs (`--inputs`), the recipes are judged and calibrated on them,
    and the basis says how many distinct samples that is."""
    from engines.quantization import samples_for

    pixels = np.random.default_rng(5).standard_normal((40, 3, 8, 8)).astype(np.float32)
    npz = tmp_path / "inputs.npz"
    np.savez(npz, pixels=pixels)
    job = _job(cancelling, "image_classification", [8, 8], tmp_path / "out", batch=8)
    job.inputs_path = npz
    samples = samples_for(job)
    assert samples.basis() == {"inputs": "user", "samples": 32, "calibration_samples": 32}
    assert len(samples.judged) == 4 and samples.calibration is samples.judged
    assert np.array_equal(samples.judged[1]["pixels"], pixels[8:16])


def test_a_recommendation_resting_on_synthetic_inputs_says_so():
    """The email's picks say when their agreement rests on synthetic inputs, not the user's."""
    from report.render import email_message
    from tests.conftest import archived_summary, measured_result

    synthetic = measured_result("intel/onnx/b1/1769MB", p99=5.0, cost=1.0)
    synthetic["agreement"] |= {"samples": 32, "inputs": "synthetic"}
    text = email_message(archived_summary("run-1", "complete", [synthetic], []), "https://ayci.example")["text"]
    assert "fastest: intel/onnx/b1/1769MB (agreement on 32 synthetic samples, not your data" in text
    theirs = measured_result("intel/onnx/b1/1769MB", p99=5.0, cost=1.0)
    theirs["agreement"] |= {"samples": 40, "inputs": "user"}
    text = email_message(archived_summary("run-1", "complete", [theirs], []), "https://ayci.example")["text"]
    assert "fastest: intel/onnx/b1/1769MB\n" in text and "agreement on 40 of your samples" in text


def test_the_run_s_minimum_agreement_reaches_the_recipe_choice(cancelling, tmp_path):
    """A run's `min_agreement` travels with its ComboPending to the conversion (through the
    sandbox) and is what the recipes are judged against: at 0.99 no recipe keeps the cancelling
    model's top-1 (`test_no_recipe_meets_the_minimum_and_the_row_says_so`: each keeps 0.1-0.2 of
    it); a run asking 0.05 accepts the fastest recipe that reaches that. The minimum is part of
    onnx_int8's keys only."""
    from ayci.bootstrap import embedded
    from ayci.settings import Settings
    from engines import ConversionError
    from schemas.combos import Combo, Matrix, artifact_key, combo_key
    from schemas.events import ComboPending, Envelope, RequestSubmitted
    from services.converter.sandboxed import convert_in_sandbox
    from services.request.submission import new_run, store_model

    app = embedded(Settings(data_dir=tmp_path / "data", measure_time_cap_s=1.0, measure_min_iterations=5))
    asked: list[float] = []

    def record(optimizer, job):
        asked.append(job.min_agreement)
        raise ConversionError("recorded")

    app.runners["converter"].service.deps.convert = record
    model = store_model(app.store, cancelling, "image_classification", [8, 8])
    matrix = Matrix(optimizers={"intel": ["onnx_int8"]}, batch_sizes=[1], memory_sizes_mb=[1769])
    for minimum in (0.05, 0.99):
        app.publisher.publish([new_run(RequestSubmitted(model=model, matrix=matrix, min_agreement=minimum))])
        app.bus.run_until_idle()
    assert asked == [0.05, 0.99]

    job = _job(cancelling, "image_classification", [8, 8], tmp_path / "out")
    job.min_agreement = 0.05
    details = convert_in_sandbox("onnx_int8", job, timeout_s=600, memory_mb=4096).details
    assert details["min_agreement"] == 0.05 and details["meets_minimum"], details["recipe_summary"]
    judged = [r for r in details["recipes"] if "agreement" in r]
    assert all(r["agreement"] < 0.99 for r in judged)  # what 0.99 refuses ...
    chosen = _recipe(details, details["recipe"])
    assert chosen["meets_minimum"] and chosen["agreement"] >= 0.05  # ... 0.05 accepts: the fastest that reaches it
    assert chosen["p50_ms"] == min(r["p50_ms"] for r in judged if r["agreement"] >= 0.05)

    int8, onnx = (Combo(hardware="intel", optimizer=o, batch_size=1, memory_mb=1769) for o in ("onnx_int8", "onnx"))
    lower = RequestSubmitted(model=model, matrix=matrix, min_agreement=0.05).tuning
    default = RequestSubmitted(model=model, matrix=matrix).tuning
    assert combo_key(model, int8, lower) != combo_key(model, int8, default) == combo_key(model, int8)
    assert artifact_key(model, int8, "x", lower) != artifact_key(model, int8, "x", default)
    assert combo_key(model, onnx, lower) == combo_key(model, onnx, default)
    # a ComboPending stored before it carried the minimum reads with the default
    pending = ComboPending(model=model, combo=int8, combo_key="k", artifact_key="a", target_cpu="x")
    old = json.loads(Envelope.wrap(pending, run_id="r", producer="dedup").to_json())
    del old["payload"]["min_agreement"]
    old["schema_version"] = 1
    assert Envelope.parse(old).payload.min_agreement == 0.99


def test_session_tuning_keeps_the_graph_optimization_level_the_recipe_was_judged_at():
    """ONNX Runtime's graph optimization level changes an int8 model's numbers (all-MiniLM-L6-v2's
    dynamic per-channel recipe: 0.9905 at `all`, 0.98996 at `basic` on the same 32 sentences):
    onnx_int8's session tuning tries only what leaves them alone, at the level of its conversion."""
    import engines
    from engines.onnx_engine import default_settings
    from engines.onnx_engine import tuning_candidates as onnx_candidates

    for threads in (1, 2):
        candidates = engines.module("onnx_int8").tuning_candidates(threads)
        assert candidates[0] == default_settings(threads)
        assert {c["graph_optimization"] for c in candidates} == {default_settings(threads)["graph_optimization"]}
        others = [c for c in onnx_candidates(threads) if c["graph_optimization"] == "all"]
        assert candidates == others and len(candidates) >= 2  # the arena, threads, execution mode: still tried


def test_the_mixed_recipes_keep_in_float_the_matmuls_whose_inputs_int8_rounds_worst(tmp_path):
    """Eight MatMuls, each on its own input; one input carries an outlier (as a transformer's FFN
    down-projection does after GELU): `input_noise` ranks its MatMul first by far, and the
    1/8 mixed recipe keeps exactly that one in float and quantizes the seven others."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from engines.quantization import input_noise

    rng = np.random.default_rng(0)
    count, noisy, width = 8, "mm5", 2048  # an outlier among many values: the range widens, the power hardly moves
    inputs = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [1, width]) for i in range(count)]
    outputs = [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [1, 4]) for i in range(count)]
    weights = [
        numpy_helper.from_array(rng.standard_normal((width, 4)).astype(np.float32), f"w{i}") for i in range(count)
    ]
    nodes = [helper.make_node("MatMul", [f"x{i}", f"w{i}"], [f"y{i}"], name=f"mm{i}") for i in range(count)]
    model = helper.make_model(
        helper.make_graph(nodes, "matmuls", inputs, outputs, weights), opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 8
    path = tmp_path / "matmuls.onnx"
    onnx.save(model, str(path))
    batches = [{f"x{i}": rng.standard_normal((1, width)).astype(np.float32) for i in range(count)} for _ in range(4)]
    for batch in batches:
        batch["x5"][0, 3] = 60.0

    noise = input_noise(path, model.graph, batches)
    assert set(noise) == {f"mm{i}" for i in range(count)}
    assert max(noise, key=noise.get) == noisy
    assert noise[noisy] > 10 * max(value for name, value in noise.items() if name != noisy)

    class Reader:
        def __init__(self) -> None:
            self.batches = iter(batches)

        def get_next(self):
            return next(self.batches, None)

    recipe = next(r for r in RECIPES if r.name == "dynamic_per_channel_float_8")
    assert recipe.applies(model.graph)
    out = tmp_path / "mixed.onnx"
    recipe.make(path, out, Reader, model.graph)
    quantized = onnx.load(str(out)).graph.node
    assert {node.name for node in quantized if node.op_type == "MatMul"} == {noisy}
    assert sum(node.op_type == "MatMulInteger" for node in quantized) == count - 1


def test_the_recipe_chosen_at_one_batch_size_is_tried_alone_at_the_others(cancelling, tmp_path):
    """The recipe chosen at batch 1 is made, judged and timed alone at batch 2 (said so in the
    summary); where it falls short of the minimum there, every recipe is tried again."""
    from dataclasses import replace

    pt2 = export_example("image_classification", [64, 64], tmp_path / "resnet.pt2")  # static QDQ keeps it
    job = replace(_job(pt2, "image_classification", [64, 64], tmp_path / "out", batch=2), int8_recipe="static_qdq")
    details = onnx_int8_engine.convert(replace(job, int8_recipe_batch=1)).details
    assert [r["recipe"] for r in details["recipes"]] == ["static_qdq"] and details["meets_minimum"]
    assert details["recipe"] == "static_qdq" and details["recipe_chosen_at"] == 1
    assert details["recipe_summary"].endswith("chosen (as chosen at batch 1; the other recipes not tried again)")
    short = _job(cancelling, "image_classification", [8, 8], tmp_path / "cancel", batch=2)
    again = onnx_int8_engine.convert(replace(short, int8_recipe="static_qdq", int8_recipe_batch=1)).details
    assert len(again["recipes"]) > 1 and "recipe_chosen_at" not in again  # no recipe keeps it: all were tried


def test_the_converter_finds_the_recipe_chosen_at_another_batch_size_of_the_run():
    from adapters.memory_store import MemoryStore
    from schemas import keys
    from schemas.combos import Combo, artifact_key
    from schemas.documents import ArtifactManifest
    from schemas.events import ComboPending
    from services.converter.handlers import _int8_recipe_chosen

    model = ModelRef(sha256="ab" * 32, size_bytes=10, format="pt2", workload="nlp", input_size=[32])
    combo = Combo(hardware="intel", optimizer="onnx_int8", batch_size=4, memory_mb=1769)
    pending = ComboPending(
        model=model,
        combo=combo,
        combo_key="k",
        artifact_key=artifact_key(model, combo, "x86-64-v3"),
        target_cpu="x86-64-v3",
    )
    store = MemoryStore()
    assert _int8_recipe_chosen(store, pending, [1, 2, 4]) == {}  # nothing converted yet: every recipe
    chosen = {"recipe": "dynamic_per_channel", "meets_minimum": True, "min_agreement": 0.99}
    manifest = ArtifactManifest(
        artifact_file="model.int8.onnx",
        optimizer="onnx_int8",
        hardware="intel",
        target_cpu="x86-64-v3",
        conversion_s=20.0,
        details=chosen,
    )
    other = artifact_key(model, combo.model_copy(update={"batch_size": 2}), "x86-64-v3")
    store.put_bytes(keys.manifest(other), manifest.to_bytes())
    assert _int8_recipe_chosen(store, pending, [1, 2, 4]) == {
        "int8_recipe": "dynamic_per_channel",
        "int8_recipe_batch": 2,
    }
    stricter = pending.model_copy(update={"min_agreement": 0.999})  # chosen against another minimum: not reused
    assert _int8_recipe_chosen(store, stricter, [1, 2, 4]) == {}
    # the key the dedup service gives the other batch's artifact (the run's tuning): the one looked up
    from schemas.combos import Tuning

    strict_key = artifact_key(
        model, combo.model_copy(update={"batch_size": 1}), "x86-64-v3", Tuning(trials=64, min_agreement=0.999)
    )
    strict = manifest.model_copy(update={"details": {**chosen, "min_agreement": 0.999}})
    store.put_bytes(keys.manifest(strict_key), strict.to_bytes())
    assert _int8_recipe_chosen(store, stricter, [1, 2, 4]) == {
        "int8_recipe": "dynamic_per_channel",
        "int8_recipe_batch": 1,
    }
