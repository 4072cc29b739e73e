"""Intake refuses hostile model files from their bytes alone: `.pt2` archives that would make
torch unpickle or evaluate code, ONNX models whose tensors point outside what was uploaded,
bundles that would unpack past their caps or outside their folder. Each hostile `.pt2` is
first shown to be hostile for real: torch's own loader, in a child process, creates the marker
file; intake refuses it naming the entry, and the marker never appears."""

from __future__ import annotations

import io
import json
import pathlib
import pickle
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from engines.archives import BUNDLE_MAX_ENTRIES, unpack_bundle
from engines.model_files import NotAModelError, accept_model, load_exported_program, single_file_onnx, sniff_format
from engines.pt2_archive import check_sym_expr
from tests.hostile_models import many_empty_members


class TouchMarker:
    """Unpickling this creates `path` (no shell: `pathlib.Path.touch`)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return pathlib.Path.touch, (pathlib.Path(self.path),)


class Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)
        self.register_buffer("scale", torch.full((3,), 2.0))

    def forward(self, x):
        return self.linear(x) * self.scale


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("pt2") / "scaled.pt2"
    torch.manual_seed(0)
    program = torch.export.export(Scaled(), (torch.randn(2, 4),), dynamic_shapes=({0: torch.export.Dim("batch")},))
    torch.export.save(program, str(path))
    return path


def rewritten(source: Path, target: Path, changes: dict[str, bytes | None]) -> Path:
    """A copy of the archive with members (named without the archive's root folder) replaced,
    added, or removed (None), written the way torch writes them (stored)."""
    with zipfile.ZipFile(source) as archive:
        root = archive.namelist()[0].split("/", 1)[0] + "/"
        members = {info.filename[len(root) :]: archive.read(info) for info in archive.infolist()}
    for name, data in changes.items():
        if data is None:
            members.pop(name, None)
        else:
            members[name] = data
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_STORED) as out:
        for name, data in members.items():
            out.writestr(root + name, data)
    return target


def config(path: Path, kind: str) -> dict:
    with zipfile.ZipFile(path) as archive:
        name = next(n for n in archive.namelist() if n.endswith(f"data/{kind}/model_{kind}_config.json"))
        return json.loads(archive.read(name))


def torch_loads_it(path: Path, marker: Path) -> bool:
    """Whether torch's own loader, unguarded, in a child process, creates the marker."""
    code = f"import torch\ntry:\n    torch.export.load({str(path)!r})\nexcept Exception:\n    pass\n"
    subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300, check=False)
    created = marker.exists()
    marker.unlink(missing_ok=True)
    return created


def refused(path: Path, tmp_path: Path, match: str) -> None:
    with pytest.raises(NotAModelError, match=match):
        accept_model(path, tmp_path / "out")
    with pytest.raises(NotAModelError, match=match):
        load_exported_program(path)


def test_the_exported_program_is_accepted_and_loads(exported, tmp_path):
    accepted = accept_model(exported, tmp_path)
    assert accepted.format.value == "pt2" and accepted.path == exported
    assert accepted.size_bytes >= exported.stat().st_size - 4096
    x = torch.randn(3, 4)
    torch.manual_seed(0)
    assert torch.allclose(load_exported_program(exported).module()(x), Scaled()(x))


def test_an_opaque_object_constant_is_refused_naming_it_and_never_unpickled(exported, tmp_path):
    marker = tmp_path / "opaque-ran"
    payload = pickle.dumps(TouchMarker(marker))
    constants = config(exported, "constants")
    constants["config"]["scale_hidden"] = {
        "path_name": "opaque_obj_0",
        "is_param": False,
        "use_pickle": False,
        "tensor_meta": {
            "dtype": 1,
            "sizes": [{"as_int": len(payload)}],
            "requires_grad": False,
            "device": {"type": "cpu", "index": None},
            "strides": [{"as_int": 1}],
            "storage_offset": {"as_int": 0},
            "layout": 7,
        },
    }
    hostile = rewritten(
        exported,
        tmp_path / "opaque.pt2",
        {
            "data/constants/model_constants_config.json": json.dumps(constants).encode(),
            "data/constants/opaque_obj_0": payload,
        },
    )
    assert torch_loads_it(hostile, marker)  # torch's loader unpickles it: the file is hostile for real
    refused(hostile, tmp_path, r"constant 'scale_hidden'.*pickled Python or TorchScript object \(opaque_obj_0\)")
    assert not marker.exists()


def test_a_custom_object_constant_is_refused_naming_it(exported, tmp_path):
    constants = config(exported, "constants")
    constants["config"]["torchbind"] = {"path_name": "custom_obj_0", "is_param": False, "use_pickle": True}
    hostile = rewritten(
        exported,
        tmp_path / "custom.pt2",
        {
            "data/constants/model_constants_config.json": json.dumps(constants).encode(),
            "data/constants/custom_obj_0": pickle.dumps(TouchMarker(tmp_path / "custom-ran")),
        },
    )
    refused(hostile, tmp_path, r"constant 'torchbind'.*\(custom_obj_0\)")
    assert not (tmp_path / "custom-ran").exists()


def test_a_pickled_weight_is_refused_naming_it_and_never_loaded(exported, tmp_path):
    marker = tmp_path / "use-pickle-ran"
    weights = config(exported, "weights")
    entry = weights["config"]["linear.bias"]
    entry["use_pickle"] = True
    buffer = io.BytesIO()
    torch.save(TouchMarker(marker), buffer)
    hostile = rewritten(
        exported,
        tmp_path / "pickled.pt2",
        {
            "data/weights/model_weights_config.json": json.dumps(weights).encode(),
            f"data/weights/{entry['path_name']}": buffer.getvalue(),
        },
    )
    assert torch_loads_it(hostile, marker)
    refused(hostile, tmp_path, r"weight 'linear.bias'.*stored pickled \(weight_\d, use_pickle\)")
    assert not marker.exists()


def test_example_inputs_that_are_not_tensors_are_refused(exported, tmp_path):
    marker = tmp_path / "inputs-ran"
    buffer = io.BytesIO()
    torch.save(((TouchMarker(marker),), {}), buffer)
    hostile = rewritten(exported, tmp_path / "inputs.pt2", {"data/sample_inputs/model.pt": buffer.getvalue()})
    assert torch_loads_it(hostile, marker)  # torch falls back to weights_only=False
    refused(hostile, tmp_path, r"data/sample_inputs/model.pt (builds objects|names)")
    assert not marker.exists()


def test_a_symbolic_size_that_sympify_would_evaluate_is_refused(exported, tmp_path):
    marker = tmp_path / "sympy-ran"
    with zipfile.ZipFile(exported) as archive:
        name = next(n for n in archive.namelist() if n.endswith("models/model.json"))
        program = archive.read(name).decode()
    symbol = program[program.index("Symbol(") :].split('"', 1)[0]
    evil = f"Add(__import__('pathlib').Path({str(marker)!r}).touch() or Integer(0), {symbol})"
    hostile = rewritten(exported, tmp_path / "sympy.pt2", {"models/model.json": program.replace(symbol, evil).encode()})
    assert torch_loads_it(hostile, marker)  # sympify is eval
    refused(
        hostile,
        tmp_path,
        r"models/model.json has a symbolic size .* that calls something other than a function by its name",
    )
    assert not marker.exists()


@pytest.mark.parametrize(
    "expr",
    [
        "Pow(Integer(9), Integer(999999999))",
        "Integer(9)**Integer(99999)",
        "Pow(Pow(Integer(9), Integer(64)), Integer(64))",
        "LShift(Integer(1), Integer(10000000000))",
        "9^9^9",
        "Symbol('s0').__class__",
        "Symbol('__s0')",
        "Integer(1)[0]",
        "(lambda: 0)()",
        "Float('1e5', precision=__import__('os'))",
    ],
)
def test_symbolic_sizes_are_plain_and_bounded(expr):
    with pytest.raises(NotAModelError, match="symbolic size"):
        check_sym_expr(expr, "models/model.json")


def test_symbolic_sizes_torch_writes_pass():
    for expr in [
        "Symbol('s77', positive=True, integer=True)",
        "Add(Mul(Integer(2), Symbol('s0', integer=True, positive=True)), Integer(1))",
        "FloorDiv(Symbol('s0', integer=True, positive=True), Integer(2))",
        "Pow(Symbol('s0', integer=True, positive=True), Integer(2))",
        "And(StrictGreaterThan(Symbol('s0', integer=True), Integer(2)), Unequality(Symbol('s1'), Integer(1)))",
        "Float('1.5', precision=53)",
        "-int_oo",
    ]:
        check_sym_expr(expr, "models/model.json")


def test_legacy_pickles_are_refused(exported, tmp_path):
    marker = tmp_path / "legacy-ran"
    saved = tmp_path / "model.pt"
    torch.save(TouchMarker(marker), saved)
    with pytest.raises(NotAModelError, match=r"a torch.save file \(a pickle, data.pkl\)"):
        accept_model(saved, tmp_path / "out")
    old = tmp_path / "old.pt"
    torch.save(TouchMarker(marker), old, _use_new_zipfile_serialization=False)
    with pytest.raises(NotAModelError, match="a Python pickle"):
        accept_model(old, tmp_path / "out")
    buffer = io.BytesIO()
    torch.save({"linear.weight": TouchMarker(marker)}, buffer)
    inside = rewritten(exported, tmp_path / "legacy.pt2", {"data/weights/model.pt": buffer.getvalue()})
    refused(inside, tmp_path, r"legacy pickled tensors \(data/weights/model.pt\)")
    pkl = rewritten(exported, tmp_path / "pkl.pt2", {"extra/notes.pkl": pickle.dumps(TouchMarker(marker))})
    refused(pkl, tmp_path, r"holds a pickle \(extra/notes.pkl\)")
    compiled = rewritten(exported, tmp_path / "aoti.pt2", {"data/aotinductor/model/model.so": b"\x7fELF"})
    refused(compiled, tmp_path, r"compiled code \(data/aotinductor/model/model.so\)")
    assert not marker.exists()


def test_a_tensor_reaching_past_its_record_or_a_huge_empty_one_is_refused(exported, tmp_path):
    weights = config(exported, "weights")
    weights["config"]["linear.weight"]["tensor_meta"]["sizes"] = [{"as_int": 3}, {"as_int": 400}]
    weights["config"]["linear.weight"]["tensor_meta"]["strides"] = [{"as_int": 400}, {"as_int": 1}]
    past = rewritten(
        exported, tmp_path / "past.pt2", {"data/weights/model_weights_config.json": json.dumps(weights).encode()}
    )
    refused(past, tmp_path, r"weight 'linear.weight'.*reaches past its 48 bytes")
    weights = config(exported, "weights")
    entry = weights["config"]["linear.weight"]
    entry["tensor_meta"]["sizes"] = [{"as_int": 1 << 20}, {"as_int": 1 << 20}]  # 4 TiB of zeros
    empty = rewritten(
        exported,
        tmp_path / "zeros.pt2",
        {
            "data/weights/model_weights_config.json": json.dumps(weights).encode(),
            f"data/weights/{entry['path_name']}": b"",
        },
    )
    with pytest.raises(NotAModelError, match="unpacks to"):
        accept_model(empty, tmp_path / "out")


def test_a_graph_name_with_quotes_is_refused(exported, tmp_path):
    with zipfile.ZipFile(exported) as archive:
        name = next(n for n in archive.namelist() if n.endswith("models/model.json"))
        program = archive.read(name).decode()
    hostile = rewritten(
        exported,
        tmp_path / "quote.pt2",
        {"models/model.json": program.replace('"scale"', '"scale\\")or(\\""', 1).encode()},
    )
    refused(hostile, tmp_path, "quotes or control characters")


def if_model(location: str, length: int = 4) -> onnx.ModelProto:
    """y = x + w when c, else x: `w` an initializer of the `then` branch, its data external."""
    w = numpy_helper.from_array(np.ones(length, np.float32), "w")
    w.data_location = TensorProto.EXTERNAL
    w.ClearField("raw_data")
    for key, value in (("location", location), ("offset", "0"), ("length", str(4 * length))):
        w.external_data.add(key=key, value=value)
    then_branch = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [length])],
        initializer=[w],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [length])],
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)],
        "branchy",
        [
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [length]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [length])],
    )
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)])


def bundle_of(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_external_data_inside_a_subgraph_is_checked(tmp_path):
    plain = tmp_path / "branchy.onnx"
    plain.write_bytes(if_model("../../../../etc/hostname").SerializeToString())
    with pytest.raises(NotAModelError, match=r"external files \(../../../../etc/hostname\) that were not uploaded"):
        accept_model(plain, tmp_path / "out")
    escaping = bundle_of(tmp_path / "escaping.zip", {"m.onnx": plain.read_bytes(), "w.bin": b"\0" * 16})
    with pytest.raises(NotAModelError, match=r"outside the bundle \('../../../../etc/hostname', initializer 'w'"):
        accept_model(escaping, tmp_path / "out")
    good = bundle_of(
        tmp_path / "good.zip",
        {"m.onnx": if_model("w.bin").SerializeToString(), "w.bin": np.full(4, 2.0, np.float32).tobytes()},
    )
    accepted = accept_model(good, tmp_path / "out")
    import onnxruntime as ort

    session = ort.InferenceSession(str(accepted.path), providers=["CPUExecutionProvider"])
    x = np.arange(4, dtype=np.float32)
    assert session.run(None, {"c": np.array(True), "x": x})[0].tolist() == (x + 2).tolist()
    assert accepted.size_bytes == accepted.path.stat().st_size > 0


def test_external_data_in_tensors_attributes_and_sparse_initializers_is_found(tmp_path):
    model = if_model("w.bin")
    then_branch = next(a.g for a in model.graph.node[0].attribute if a.name == "then_branch")
    w = then_branch.initializer.pop()
    then_branch.node.insert(
        0, helper.make_node("Constant", [], ["w"], value=helper.make_tensor("unused", TensorProto.FLOAT, [1], [0.0]))
    )
    then_branch.node[0].attribute.append(helper.make_attribute("weights", [w]))  # a `tensors` attribute
    path = tmp_path / "listed.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(NotAModelError, match=r"external files \(w.bin\)"):
        single_file_onnx(path, tmp_path)
    sparse_values = numpy_helper.from_array(np.ones(2, np.float32), "s")
    sparse_values.data_location = TensorProto.EXTERNAL
    sparse_values.ClearField("raw_data")
    sparse_values.external_data.add(key="location", value="/etc/hostname")
    sparse = helper.make_sparse_tensor(sparse_values, numpy_helper.from_array(np.array([0, 3], np.int64), "i"), [4])
    model = if_model("w.bin")
    model.graph.sparse_initializer.append(sparse)
    path.write_bytes(model.SerializeToString())
    with pytest.raises(NotAModelError, match=r"external files \(/etc/hostname, w.bin\)"):
        single_file_onnx(path, tmp_path)


def test_garbage_is_no_model_and_says_why(tmp_path):
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x0a\xff\xff\xff\xff\x0f" + b"\x01" * 64)
    with pytest.raises(NotAModelError, match=r"not an ONNX model \(DecodeError"):
        sniff_format(garbage)


def test_a_tar_of_300000_members_is_refused_at_the_cap_without_listing_them(tmp_path):
    data = many_empty_members(300_000)
    assert len(data) > 150_000_000
    path = tmp_path / "many.tar"
    path.write_bytes(data[: 512 * 1000] + b"\xff" * 512)  # a full listing would fail on this broken header
    lazy = tmp_path / "many-full.tar"
    lazy.write_bytes(data)
    for tar in (path, lazy):
        started = time.monotonic()
        with pytest.raises(NotAModelError, match=f"more than {BUNDLE_MAX_ENTRIES} entries"):
            unpack_bundle(tar, tmp_path / f"out-{tar.name}", max_bytes=1 << 20)
        assert time.monotonic() - started < 2.0


def test_a_zip_with_too_many_entries_is_refused_from_its_end_record(tmp_path):
    path = tmp_path / "many.zip"
    with zipfile.ZipFile(path, "w") as archive:
        for i in range(BUNDLE_MAX_ENTRIES + 1):
            archive.writestr(f"f{i}", b"")
    with pytest.raises(NotAModelError, match=f"holds {BUNDLE_MAX_ENTRIES + 1} entries"):
        unpack_bundle(path, tmp_path / "out", max_bytes=1 << 20)


def test_bombs_are_refused_before_they_unpack(tmp_path):
    onnx_bytes = if_model("w.bin").SerializeToString()
    zipped = bundle_of(tmp_path / "bomb.zip", {"m.onnx": onnx_bytes, "w.bin": b"\0" * (8 << 20)})
    assert zipped.stat().st_size < 64 << 10
    tarred = tmp_path / "bomb.tar.xz"
    with tarfile.open(tarred, "w:xz") as archive:
        for name, data in (("m.onnx", onnx_bytes), ("w.bin", b"\0" * (8 << 20))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    for bomb in (zipped, tarred):
        out = tmp_path / f"out-{bomb.name}"
        with pytest.raises(NotAModelError, match=f"unpacks to more than {1 << 20} bytes"):
            accept_model(bomb, out, max_bytes=1 << 20)
        assert sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) <= 1 << 20
    # a zip whose directory declares less than its member inflates to: never more is written
    lying = bytearray(zipped.read_bytes())
    record = lying.index(b"PK\x01\x02")
    while lying[record + 46 : record + 51] != b"w.bin":
        record = lying.index(b"PK\x01\x02", record + 4)
    lying[record + 24 : record + 28] = (1024).to_bytes(4, "little")  # declares 1 KiB of the 8 MiB
    liar = tmp_path / "liar.zip"
    liar.write_bytes(bytes(lying))
    with pytest.raises(NotAModelError, match="cannot be unpacked"):
        accept_model(liar, tmp_path / "out-liar", max_bytes=1 << 20)
    assert sum(p.stat().st_size for p in (tmp_path / "out-liar").rglob("*") if p.is_file()) <= 1 << 20


def test_path_traversal_and_links_are_refused(tmp_path):
    onnx_bytes = if_model("w.bin").SerializeToString()
    for name in ("../m.onnx", "/etc/m.onnx", "a/../../m.onnx", "c:/m.onnx", "a\\..\\..\\m.onnx"):
        escaping = bundle_of(tmp_path / "escaping.zip", {name: onnx_bytes})
        with pytest.raises(NotAModelError, match="outside itself"):
            accept_model(escaping, tmp_path / "out")
        tarred = tmp_path / "escaping.tar"
        with tarfile.open(tarred, "w") as archive:
            info = tarfile.TarInfo(name)
            info.size = len(onnx_bytes)
            archive.addfile(info, io.BytesIO(onnx_bytes))
        with pytest.raises(NotAModelError, match="outside itself"):
            unpack_bundle(tarred, tmp_path / "out-tar", max_bytes=1 << 20)
    for kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
        linked = tmp_path / "linked.tar"
        with tarfile.open(linked, "w") as archive:
            info = tarfile.TarInfo("m.onnx")
            info.size = len(onnx_bytes)
            archive.addfile(info, io.BytesIO(onnx_bytes))
            link = tarfile.TarInfo("w.bin")
            link.type, link.linkname = kind, "/etc/hostname"
            archive.addfile(link)
        with pytest.raises(NotAModelError, match=r"link, device or sparse file \(w.bin\)"):
            accept_model(linked, tmp_path / "out")
    zipped_link = tmp_path / "link.zip"
    with zipfile.ZipFile(zipped_link, "w") as archive:
        archive.writestr("m.onnx", onnx_bytes)
        link = zipfile.ZipInfo("w.bin")
        link.external_attr = (0o120777 << 16) | 0x20
        archive.writestr(link, "/etc/hostname")
    with pytest.raises(NotAModelError, match=r"a link \(w.bin\)"):
        accept_model(zipped_link, tmp_path / "out")
    assert not list((tmp_path / "out").rglob("w.bin"))


def test_an_upload_the_libraries_or_intake_refuse_is_a_422_with_the_reason(tmp_path, exported):
    import hashlib

    from fastapi.testclient import TestClient

    from adapters.local_store import LocalFolderStore
    from adapters.uploads import LocalUploader
    from ayci.bootstrap import request_limits
    from ayci.settings import Settings
    from services.request.app import RequestDeps, create_app, parse_api_keys
    from tests.fakes import RecordingPublisher
    from tests.unit.test_request_api import upload

    settings = Settings(data_dir=tmp_path / "data", max_model_bytes=4 << 20)
    store = LocalFolderStore(settings.data_dir)
    deps = RequestDeps(
        store=store,
        publisher=RecordingPublisher(),
        api_keys=parse_api_keys("alice-key-123:alice"),
        uploader=LocalUploader(tmp_path / "uploads"),
        limits=request_limits(settings),
    )
    client = TestClient(create_app(deps), raise_server_exceptions=False)
    garbage = b"\x0a\xff\xff\xff\xff\x0f" + b"\x01" * 64
    answer = upload(client, garbage)
    assert answer.status_code == 422 and "DecodeError" in answer.json()["detail"], answer.text
    plain = if_model("../../../../etc/hostname").SerializeToString()
    escaping = bundle_of(tmp_path / "escaping.zip", {"m.onnx": plain, "w.bin": b"\0" * 16})
    answer = upload(client, escaping.read_bytes())
    assert answer.status_code == 422 and "outside the bundle ('../../../../etc/hostname'" in answer.json()["detail"]
    bomb = bundle_of(
        tmp_path / "bomb.zip", {"m.onnx": if_model("w.bin").SerializeToString(), "w.bin": b"\0" * (5 << 20)}
    )
    answer = upload(client, bomb.read_bytes())
    assert answer.status_code == 422 and f"more than {4 << 20} bytes" in answer.json()["detail"], answer.text
    marker = tmp_path / "api-ran"
    buffer = io.BytesIO()
    torch.save(TouchMarker(marker), buffer)
    weights = config(exported, "weights")
    weights["config"]["scale"]["use_pickle"] = True
    hostile = rewritten(
        exported,
        tmp_path / "api.pt2",
        {
            "data/weights/model_weights_config.json": json.dumps(weights).encode(),
            f"data/weights/{weights['config']['scale']['path_name']}": buffer.getvalue(),
        },
    )
    answer = upload(client, hostile.read_bytes())
    assert answer.status_code == 422 and "the weight 'scale'" in answer.json()["detail"], answer.text
    assert not marker.exists() and not store.list_keys("models/")
    # a bundle is stored as one file and its size is what it unpacks to, not what was uploaded
    good = bundle_of(
        tmp_path / "good.zip",
        {"m.onnx": if_model("w.bin", 1 << 18).SerializeToString(), "w.bin": np.zeros(1 << 18, np.float32).tobytes()},
    )
    stored = upload(client, good.read_bytes())
    assert stored.status_code == 201, stored.text
    sha = hashlib.sha256(good.read_bytes()).hexdigest()
    kept = len(store.get_bytes(f"models/{sha}"))
    assert stored.json()["size_bytes"] == kept > 1 << 20 > good.stat().st_size
