"""Models as people export them: the signature read at intake (no model run), inputs bound by
name, role and position, the plan's impossible combinations, and the user's own inputs."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from adapters.memory_store import MemoryStore
from core.planning import impossible_reason, plan_run, request_shapes
from engines.model_files import load_exported_program
from engines.signature import read_signature
from schemas.combos import Combo, Matrix, ModelRef
from schemas.events import RequestSubmitted
from schemas.reasons import decisive, from_traceback, whole
from workloads import custom
from workloads.binding import BindingError, bind, bound_arrays
from workloads.nlp import INPUT_ROLES as NLP_ROLES
from workloads.nlp import input_shapes as nlp_shapes


class Encoder(torch.nn.Module):
    """An encoder whose inputs are named unlike the workload's, with a small vocabulary."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = torch.nn.Embedding(50, 8)
        self.types = torch.nn.Embedding(2, 8)

    def forward(self, ids, mask, token_type_ids):
        x = self.tokens(ids) + self.types(token_type_ids)
        return (x * mask[..., None]).sum(1), ids.sum(1)


def export(tmp_path: Path, name: str, *, positional: bool, dynamic: bool) -> Path:
    ids = torch.randint(0, 50, (2, 6))
    args = (ids, torch.ones(2, 6, dtype=torch.long), torch.zeros(2, 6, dtype=torch.long))
    batch = torch.export.Dim("batch", min=1, max=32)
    shapes = ({0: batch},) * 3 if dynamic else None
    if positional:
        program = torch.export.export(Encoder().eval(), args, dynamic_shapes=shapes)
    else:
        kwargs = dict(zip(("ids", "mask", "token_type_ids"), args, strict=True))
        program = torch.export.export(
            Encoder().eval(), (), kwargs, dynamic_shapes=dict(zip(kwargs, shapes, strict=True)) if shapes else None
        )
    path = tmp_path / name
    torch.export.save(program, str(path))
    return path


def test_a_positional_dynamic_pt2_signature(tmp_path):
    signature = read_signature(export(tmp_path, "pos.pt2", positional=True, dynamic=True))
    assert [(s.name, s.kind, s.dtype) for s in signature.inputs] == [
        ("ids", "positional", "int64"),
        ("mask", "positional", "int64"),
        ("token_type_ids", "positional", "int64"),
    ]
    (symbol,) = {s.dims[0] for s in signature.inputs}
    assert isinstance(symbol, str) and signature.dim_ranges[symbol].min == 1 and signature.dim_ranges[symbol].max == 32
    assert signature.inputs[0].dims[1] == 6
    assert signature.inputs[0].index_bound == 50  # it indexes a 50-row embedding table
    assert len(signature.outputs) == 2 and signature.outputs[1].dtype == "int64"


def test_a_keyword_static_pt2_and_its_fixed_batch(tmp_path):
    signature = read_signature(export(tmp_path, "kw.pt2", positional=False, dynamic=False))
    assert [(s.name, s.kind) for s in signature.inputs] == [
        ("ids", "keyword"),
        ("mask", "keyword"),
        ("token_type_ids", "keyword"),
    ]
    assert signature.inputs[0].dims == [2, 6]
    problems = signature.shape_problems({"ids": (4, 6), "mask": (4, 6), "token_type_ids": (4, 6)}, batch=4)
    assert problems == [
        "ids, mask and token_type_ids have a fixed batch of 2: batch 4 cannot run; "
        "export with a dynamic batch dimension"
    ]
    assert signature.shape_problems({"ids": (2, 6), "mask": (2, 6), "token_type_ids": (2, 6)}, batch=2) == []
    assert "fixed size 6 on axis 1" in signature.shape_problems({"ids": (2, 9)}, batch=2)[0]


def test_an_onnx_signature_names_dims_and_external_data(tmp_path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [weight],
    )
    path = tmp_path / "m.onnx"
    onnx.save_model(
        helper.make_model(graph),
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="m.onnx.data",
        size_threshold=0,
    )
    signature = read_signature(path)
    assert [(s.name, s.dims, s.dtype) for s in signature.inputs] == [("x", ["batch", 4], "float32")]
    assert signature.outputs[0].dims == ["batch", 3] and signature.external_data


def test_inputs_bind_by_name_then_role_then_position(tmp_path):
    signature = read_signature(export(tmp_path, "pos.pt2", positional=True, dynamic=True))
    provided = nlp_shapes(2, [6])
    sources = bind(signature, provided, NLP_ROLES)
    # ids <- input_ids (role: token ids), mask <- attention_mask (role), token_type_ids made up from the ids
    assert sources["ids"].provided == "input_ids" and sources["mask"].provided == "attention_mask"
    assert sources["token_type_ids"].made_up == "token type ids"
    arrays = bound_arrays(
        signature, sources, {"input_ids": np.full((2, 6), 3000, np.int64), "attention_mask": np.ones((2, 6), np.int64)}
    )
    assert list(arrays) == ["ids", "mask", "token_type_ids"]
    assert arrays["ids"].max() < 50  # token ids within the model's vocabulary
    assert not arrays["token_type_ids"].any()
    # by position: a model input no name or role says anything about
    plain = signature.model_copy(
        update={"inputs": [signature.inputs[0].model_copy(update={"name": "q", "dtype": "float32"})]}
    )
    assert bind(plain, provided, NLP_ROLES)["q"].provided == "input_ids"


def test_an_input_nothing_binds_to_is_named():
    signature = read_signature_of(
        {
            "inputs": [
                {"name": "pixel_values", "dtype": "float32", "dims": ["b", 3, 8, 8]},
                {"name": "boxes", "dtype": "float32", "dims": ["b", 4]},
            ]
        }
    )
    with pytest.raises(BindingError, match=r"boxes \(float32 \[b, 4\]\) matches none of"):
        bind(signature, {"pixels": ((1, 3, 8, 8), "float32")}, {"pixels": "image"})


def read_signature_of(fields: dict):
    from schemas.signature import ModelSignature

    return ModelSignature(format="onnx", **fields)


def request(
    signature_batch_fixed: bool = False, batches=(1, 4), memory=(128, 1769), size_bytes=1 << 20
) -> RequestSubmitted:
    model = ModelRef(sha256="a" * 64, size_bytes=size_bytes, format="onnx", workload="nlp", input_size=[6])
    return RequestSubmitted(
        model=model,
        matrix=Matrix(optimizers={"intel": ["base", "onnx"]}, batch_sizes=list(batches), memory_sizes_mb=list(memory)),
    )


def test_the_plan_calls_impossible_what_cannot_run_and_reuses_what_is_stored():
    signature = read_signature_of(
        {
            "inputs": [
                {"name": "input_ids", "dtype": "int64", "dims": [1, 6]},
                {"name": "attention_mask", "dtype": "int64", "dims": [1, 6]},
            ]
        }
    )
    req = request()
    shapes = request_shapes(None, req)
    assert (
        impossible_reason(
            signature, req, Combo(hardware="intel", optimizer="onnx", batch_size=1, memory_mb=1769), shapes
        )
        is None
    )
    fixed = impossible_reason(
        signature, req, Combo(hardware="intel", optimizer="onnx", batch_size=4, memory_mb=1769), shapes
    )
    assert (
        fixed == "input_ids and attention_mask have a fixed batch of 1: batch 4 cannot run; "
        "export with a dynamic batch dimension"
    )
    big = request(size_bytes=300 << 20)
    assert "certain out of memory" in impossible_reason(
        signature, big, Combo(hardware="intel", optimizer="onnx", batch_size=1, memory_mb=128), shapes
    )
    store = MemoryStore()
    plan = plan_run(req, signature, store, shapes)
    totals = plan.as_dict()["totals"]
    assert (totals["to_measure"], totals["impossible"], totals["reused"]) == (4, 4, 0)
    assert totals["estimated_wall_s"] > 0 and totals["estimated_benchmark_cost_usd"] > 0
    # a stored result is reused
    from core.results import keep_result
    from schemas.documents import MeasuredResult
    from tests.conftest import measured_result

    measured = next(c for c in plan.combos if c.state == "measure")
    stored = measured_result(measured.combo.label, p99=2.0, cost=0.3) | {"combo_key": measured.key, "run_id": "run-1"}
    keep_result(store, MeasuredResult.model_validate(stored))
    assert plan_run(req, signature, store, shapes).as_dict()["totals"]["reused"] == 1


def test_a_program_exported_from_a_library_loads_without_the_library(tmp_path):
    """A transformers model's outputs are its own ModelOutput class: the call spec names it,
    and torch cannot load it without that code. AYCI reads it as a tuple of the same tensors."""
    path = export(tmp_path, "pos.pt2", positional=True, dynamic=True)
    patched = tmp_path / "library.pt2"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(patched, "w") as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename.endswith("models/model.json"):
                program = json.loads(data)
                call = program["graph_module"]["module_call_graph"][0]["signature"]
                version, tree = json.loads(call["out_spec"])
                tree["type"], tree["context"] = "somelib.outputs.EncoderOutput", json.dumps(["pooled", "sums"])
                call["out_spec"] = json.dumps([version, tree])
                data = json.dumps(program).encode()
            dst.writestr(info, data)
    with pytest.raises(Exception, match="deserializ"):
        torch.export.load(str(patched))
    out = load_exported_program(patched).module()(
        torch.ones(3, 6, dtype=torch.long), torch.ones(3, 6, dtype=torch.long), torch.zeros(3, 6, dtype=torch.long)
    )
    assert [tuple(t.shape) for t in out] == [(3, 8), (3,)]


def test_custom_inputs_are_checked_and_judged_per_output(tmp_path):
    good = tmp_path / "good.npz"
    np.savez(good, ids=np.arange(12, dtype=np.int64).reshape(3, 4), scale=np.ones((3, 2), np.float32))
    assert custom.check_npz(good) == {"ids": ((3, 4), "int64"), "scale": ((3, 2), "float32")}
    five = custom.inputs_from_npz(good, 5)
    assert five["ids"].shape == (5, 4) and (five["ids"][3] == five["ids"][0]).all()  # repeated in order
    objects = tmp_path / "objects.npz"
    np.savez(objects, x=np.array([{"a": 1}, None], dtype=object))
    with pytest.raises(custom.BadInputs, match="object arrays"):
        custom.check_npz(objects)
    uneven = tmp_path / "uneven.npz"
    np.savez(uneven, a=np.ones((2, 3)), b=np.ones((3, 3)))
    with pytest.raises(custom.BadInputs, match="batch axes differ"):
        custom.check_npz(uneven)
    notnpz = tmp_path / "x.npz"
    notnpz.write_bytes(b"not a zip")
    with pytest.raises(custom.BadInputs):
        custom.check_npz(notnpz)
    plain_zip = tmp_path / "plain.npz"
    with zipfile.ZipFile(plain_zip, "w") as archive:
        archive.writestr("notes.txt", "a zip, but not of arrays")
    with pytest.raises(custom.BadInputs, match="'notes.txt' is not a .npy array"):
        custom.check_npz(plain_zip)
    ref = [np.ones((2, 3), np.float32), np.array([1, 2])]
    assert custom.agreement(ref, [r.copy() for r in ref]).score == 1.0
    worse = custom.agreement(ref, [ref[0], np.array([1, 3])])
    assert worse.score == 0.5 and worse.details["output1_exact"] == 0.5


def test_reasons_are_kept_whole_and_shown_by_their_decisive_part():
    stderr = (
        'Traceback (most recent call last):\n  File "measure.py", line 3, in <module>\n    run()\n'
        "onnxruntime.capi.onnxruntime_pybind11_state.InvalidArgument: [ONNXRuntimeError] : 2 : INVALID_ARGUMENT : "
        "Got invalid dimensions for input: input_ids for the following indices\n index: 0 Got: 4 Expected: 1\n"
        " Please fix either the inputs/outputs or the model.\n"
    )
    reason = from_traceback(stderr)
    assert "index: 0 Got: 4 Expected: 1" in reason and "File " not in reason
    assert "Got: 4 Expected: 1" in decisive(reason)
    assert len(whole("x" * 10000)) <= 4000
    assert decisive("First sentence is long enough. " * 30).endswith("…")


def external_data_model(tmp_path: Path, location: str = "m.onnx.data") -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [weight],
    )
    folder = tmp_path / "export"
    folder.mkdir(exist_ok=True)
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save_model(
        model,
        str(folder / "m.onnx"),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=location,
        size_threshold=0,
    )
    return folder / "m.onnx"


def test_an_onnx_bundle_is_taken_as_one_file_and_unsafe_ones_are_refused(tmp_path):
    import tarfile

    import onnxruntime as ort

    from engines.model_files import NotAModelError, single_file_onnx, sniff_format

    model = external_data_model(tmp_path)
    with pytest.raises(NotAModelError, match=r"external files \(m.onnx.data\) that were not uploaded"):
        single_file_onnx(model, tmp_path)
    bundle = tmp_path / "bundle.zip"
    with zipfile.ZipFile(bundle, "w") as archive:
        archive.write(model, "m.onnx")
        archive.write(model.parent / "m.onnx.data", "m.onnx.data")
    assert sniff_format(bundle).value == "onnx"
    out = tmp_path / "out"
    out.mkdir()
    single = single_file_onnx(bundle, out)
    assert not read_signature(single).external_data
    session = ort.InferenceSession(str(single), providers=["CPUExecutionProvider"])
    assert session.run(None, {"x": np.ones((1, 4), np.float32)})[0].tolist() == [[18.0, 22.0, 26.0]]

    escaping = tmp_path / "escaping.zip"  # the model names a data file outside the bundle
    import onnx

    lying = onnx.load(str(model), load_external_data=False)
    for entry in lying.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = "../../etc/passwd"
    with zipfile.ZipFile(escaping, "w") as archive:
        archive.writestr("m.onnx", lying.SerializeToString())
        archive.write(model.parent / "m.onnx.data", "m.onnx.data")
    with pytest.raises(NotAModelError, match="outside the bundle"):
        single_file_onnx(escaping, out)
    dotdot = tmp_path / "dotdot.zip"
    with zipfile.ZipFile(dotdot, "w") as archive:
        archive.writestr("../m.onnx", model.read_bytes())
    with pytest.raises(NotAModelError, match="outside itself"):
        single_file_onnx(dotdot, out)
    linked = tmp_path / "linked.tar"
    with tarfile.open(linked, "w") as archive:
        archive.add(model, "m.onnx")
        link = tarfile.TarInfo("m.onnx.data")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        archive.addfile(link)
    with pytest.raises(NotAModelError, match="link"):
        single_file_onnx(linked, out)
    bomb = tmp_path / "bomb.zip"  # declares little, unpacks to more than the cap
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.write(model, "m.onnx")
        archive.writestr("m.onnx.data", b"\0" * (3 << 20))
    with pytest.raises(NotAModelError, match="unpacks to more than"):
        single_file_onnx(bomb, out, max_bytes=1 << 20)
