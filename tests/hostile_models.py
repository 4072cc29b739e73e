"""Hostile model files, built on the spot: what an attacker would upload to AYCI.

Each builder writes one file and says how it attacks. Payloads that would run code create a
marker file (`marker`) instead of doing harm: a marker that exists after a run means a payload
ran somewhere. Used by `tests/e2e/test_model_isolation.py` and `bench/bench_hostile.py`.
"""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

IMAGE_SIZE = [32, 32]


@dataclass(frozen=True)
class Hostile:
    name: str
    attack: str  # what it does
    build: Callable[[Path, Path], Path]  # (folder, marker) -> the file
    expect: str  # "refused" at intake, or "contained" (accepted, fails or runs only in the sandbox)


def _payload(marker: Path) -> bytes:
    """A pickle that, unpickled, creates `marker` (a real attacker would run anything)."""
    import pickle

    class Payload:
        def __reduce__(self):
            return (exec, (f"open({str(marker)!r}, 'w').write('a payload ran')",))

    return pickle.dumps(Payload(), protocol=2)


def _onnx(graph, opset: int = 17) -> bytes:
    from onnx import helper

    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9).SerializeToString()


def _pixels(name: str = "pixels"):
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", 3, *IMAGE_SIZE])


def folding_onnx(n: int = 8192) -> bytes:
    """A few hundred bytes that cost n^3 at conversion: `If(max(x) > 1e30)` guards a branch whose
    `ConstantOfShape([n, n])` and four `MatMul`s are all constant. Running the model never takes
    the branch; ONNX Runtime's constant folding (and TVM's) computes it anyway."""
    from onnx import TensorProto, helper

    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [n, n])
    then = helper.make_graph(
        [
            helper.make_node("Constant", [], ["shape_c"], value=shape),
            helper.make_node(
                "ConstantOfShape", ["shape_c"], ["c"], value=helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
            ),
            helper.make_node("MatMul", ["c", "c"], ["m1"]),
            helper.make_node("MatMul", ["m1", "c"], ["m2"]),
            helper.make_node("MatMul", ["m2", "c"], ["m3"]),
            helper.make_node("MatMul", ["m3", "c"], ["m4"]),
            helper.make_node("ReduceSum", ["m4"], ["s"], keepdims=0),
            helper.make_node("Add", ["pixels", "s"], ["then_out"]),
        ],
        "then",
        [],
        [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, None)],
    )
    otherwise = helper.make_graph(
        [helper.make_node("Identity", ["pixels"], ["else_out"])],
        "else",
        [],
        [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, None)],
    )
    graph = helper.make_graph(
        [
            helper.make_node("ReduceMax", ["pixels"], ["top"], keepdims=0),
            helper.make_node("Greater", ["top", "huge"], ["cond"]),
            helper.make_node("If", ["cond"], ["logits"], then_branch=then, else_branch=otherwise),
        ],
        "folds",
        [_pixels()],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3, *IMAGE_SIZE])],
        [helper.make_tensor("huge", TensorProto.FLOAT, [], [1e30])],
    )
    return _onnx(graph)


def hanging_onnx() -> bytes:
    """Valid ONNX that never finishes: a `Loop` of 10^15 iterations before its output."""
    from onnx import TensorProto, helper

    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["acc_in", "one"], ["acc_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, []),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, []),
        ],
        [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Loop", ["trips", "keep_going", "zero"], ["total"], body=body),
            helper.make_node("Add", ["pixels", "total"], ["logits"]),
        ],
        "hangs",
        [_pixels()],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3, *IMAGE_SIZE])],
        [
            helper.make_tensor("trips", TensorProto.INT64, [], [10**15]),
            helper.make_tensor("keep_going", TensorProto.BOOL, [], [True]),
            helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
        ],
    )
    return _onnx(graph)


def calibration_bomb_onnx(side: int = 8000, layers: int = 8) -> bytes:
    """A tiny model whose int8 calibration takes gigabytes: the mean of the input expanded to a
    side x side intermediate, then `layers` elementwise steps. Inference frees each intermediate
    as it goes (~2 of them alive); calibration makes every one an output and holds them all."""
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("ReduceMean", ["pixels"], ["mean"], keepdims=0),
        helper.make_node("Expand", ["mean", "side"], ["h0"]),
    ]
    for i in range(layers):
        nodes.append(helper.make_node("Add" if i % 2 else "Mul", [f"h{i}", "mean"], [f"h{i + 1}"]))
    nodes += [
        helper.make_node("ReduceMean", [f"h{layers}"], ["folded"], keepdims=0),
        helper.make_node("Add", ["pixels", "folded"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        "calibration_bomb",
        [_pixels()],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3, *IMAGE_SIZE])],
        [helper.make_tensor("side", TensorProto.INT64, [2], [side, side])],
    )
    return _onnx(graph)


def small_onnx(external: str | None = None, in_subgraph: bool = False) -> bytes:
    """A plain image model (pixels * w); `w` stored as external data at `external` if given,
    inside an `If` branch when `in_subgraph`."""
    from onnx import TensorProto, helper

    weight = helper.make_tensor("w", TensorProto.FLOAT, [1], [2.0])
    if external is not None:
        weight.ClearField("float_data")
        weight.data_location = TensorProto.EXTERNAL
        for key, value in (("location", external), ("offset", "0"), ("length", "4")):
            entry = weight.external_data.add()
            entry.key, entry.value = key, value
    if not in_subgraph:
        graph = helper.make_graph(
            [helper.make_node("Mul", ["pixels", "w"], ["logits"])],
            "small",
            [_pixels()],
            [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3, *IMAGE_SIZE])],
            [weight],
        )
        return _onnx(graph)
    branch = helper.make_graph(
        [helper.make_node("Mul", ["pixels", "w"], ["branch_out"])],
        "branch",
        [],
        [helper.make_tensor_value_info("branch_out", TensorProto.FLOAT, None)],
        [weight],
    )
    graph = helper.make_graph(
        [
            helper.make_node("ReduceMax", ["pixels"], ["top"], keepdims=0),
            helper.make_node("Greater", ["top", "huge"], ["cond"]),
            helper.make_node("If", ["cond"], ["logits"], then_branch=branch, else_branch=branch),
        ],
        "subgraph_external",
        [_pixels()],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3, *IMAGE_SIZE])],
        [helper.make_tensor("huge", TensorProto.FLOAT, [], [1e30])],
    )
    return _onnx(graph)


def _linear_pt2(folder: Path) -> Path:
    import torch

    class Linear(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)
            self.register_buffer("offset", torch.ones(4))

        def forward(self, pixels):
            return self.linear(pixels) + self.offset

    path = folder / "linear.pt2"
    torch.export.save(torch.export.export(Linear(), (torch.ones(1, 4),)), str(path))
    return path


def _pt2_with_constant(folder: Path, marker: Path, prefix: str) -> Path:
    """A real `.pt2` whose constants config points a constant at `{prefix}0`, an entry holding a
    pickle (the loader unpickles `opaque_obj_*` entries; `custom_obj_*` go to its C++ unpickler)."""
    source = _linear_pt2(folder)
    target = folder / f"{prefix}model.pt2"
    meta = {
        "dtype": 7,
        "sizes": [{"as_int": 4}],
        "requires_grad": False,
        "device": {"type": "cpu", "index": None},
        "strides": [{"as_int": 1}],
        "storage_offset": {"as_int": 0},
        "layout": 7,
    }
    with zipfile.ZipFile(source) as original, zipfile.ZipFile(target, "w") as out:
        root = original.namelist()[0].split("/")[0]
        for item in original.infolist():
            data = original.read(item)
            if item.filename.endswith("data/constants/model_constants_config.json"):
                data = json.dumps(
                    {
                        "config": {
                            "evil": {
                                "path_name": f"{prefix}0",
                                "is_param": False,
                                "use_pickle": False,
                                "tensor_meta": meta,
                            }
                        }
                    }
                ).encode()
            out.writestr(item, data)
        out.writestr(f"{root}/data/constants/{prefix}0", _payload(marker))
    source.unlink()
    return target


def opaque_obj_pt2(folder: Path, marker: Path) -> Path:
    return _pt2_with_constant(folder, marker, "opaque_obj_")


def custom_obj_pt2(folder: Path, marker: Path) -> Path:
    return _pt2_with_constant(folder, marker, "custom_obj_")


def legacy_pt(folder: Path, marker: Path) -> Path:
    """A pickled legacy `torch.save` file (a zip holding `data.pkl`) whose unpickling runs code."""
    path = folder / "legacy.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", _payload(marker))
        archive.writestr("archive/version", "3\n")
    return path


def traversal_zip(folder: Path, marker: Path) -> Path:
    """An ONNX bundle with an entry whose path climbs out of wherever it is unpacked: unpacked
    naively, it writes `marker`."""
    path = folder / "traversal.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("model.onnx", small_onnx("weights.bin"))
        archive.writestr("weights.bin", b"\x00\x00\x00\x40")
        archive.writestr("../" * 12 + str(marker).lstrip("/"), b"a payload ran")
    return path


def symlink_tar(folder: Path, marker: Path) -> Path:
    """An ONNX bundle whose external data is a link to a host file, and with a link to the
    marker's folder that a file is then written through."""
    path = folder / "symlink.tar"
    with tarfile.open(path, "w") as archive:
        model = small_onnx("weights.bin")
        info = tarfile.TarInfo("model.onnx")
        info.size = len(model)
        archive.addfile(info, io.BytesIO(model))
        link = tarfile.TarInfo("weights.bin")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/hostname"
        archive.addfile(link)
        escape = tarfile.TarInfo("escape")
        escape.type, escape.linkname = tarfile.SYMTYPE, str(marker.parent)
        archive.addfile(escape)
        through = tarfile.TarInfo(f"escape/{marker.name}")
        through.size = 13
        archive.addfile(through, io.BytesIO(b"a payload ran"))
    return path


_ZEROS = bytes(16 << 20)


def zip_bomb(folder: Path, marker: Path, gigabytes: int = 2) -> Path:
    """An ONNX bundle of a few MB whose external data file unpacks to `gigabytes` GB of zeros."""
    path = folder / "bomb.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        archive.writestr("model.onnx", small_onnx("weights.bin"))
        with archive.open("weights.bin", "w", force_zip64=True) as entry:
            for _ in range((gigabytes << 30) // len(_ZEROS)):
                entry.write(_ZEROS)
    return path


def many_empty_members(count: int) -> bytes:
    """A tar of `count` empty files, its headers written directly (tarfile would take seconds)."""
    template = bytearray(tarfile.TarInfo("f0000000").tobuf(format=tarfile.USTAR_FORMAT))
    blocks = []
    for i in range(count):
        header = bytearray(template)
        header[0:8] = b"f%07d" % i
        header[148:156] = b" " * 8
        header[148:156] = b"%06o\0 " % sum(header)
        blocks.append(bytes(header))
    return b"".join(blocks) + b"\0" * 1024


def tar_bomb(folder: Path, marker: Path, gigabytes: int = 2) -> Path:
    """The same as a gzipped tar: a few MB that unpack to `gigabytes` GB."""
    path = folder / "bomb.tar.gz"

    class Zeros(io.RawIOBase):
        def __init__(self, size: int) -> None:
            self.left = size

        def readable(self) -> bool:
            return True

        def readinto(self, buffer) -> int:
            n = min(len(buffer), self.left)
            buffer[:n] = bytes(n)
            self.left -= n
            return n

    with tarfile.open(path, "w:gz", compresslevel=1) as archive:
        model = small_onnx("weights.bin")
        info = tarfile.TarInfo("model.onnx")
        info.size = len(model)
        archive.addfile(info, io.BytesIO(model))
        weights = tarfile.TarInfo("weights.bin")
        weights.size = gigabytes << 30
        archive.addfile(weights, io.BufferedReader(Zeros(weights.size), 16 << 20))
    return path


def _writer(name: str, data: Callable[[], bytes]) -> Callable[[Path, Path], Path]:
    def build(folder: Path, marker: Path) -> Path:
        path = folder / name
        path.write_bytes(data())
        return path

    return build


CORPUS = [
    Hostile("opaque_obj_ .pt2", "a constant entry the .pt2 loader unpickles", opaque_obj_pt2, "refused"),
    Hostile("custom_obj_ .pt2", "a constant entry for the C++ unpickler", custom_obj_pt2, "refused"),
    Hostile("legacy pickled .pt", "a torch.save pickle", legacy_pt, "refused"),
    Hostile("path-traversal zip", "an entry climbing out of the unpack folder", traversal_zip, "refused"),
    Hostile("symlink tar", "external data linked to a host file; a write through a link", symlink_tar, "refused"),
    Hostile("zip bomb", "2 GB of zeros in a few MB", zip_bomb, "refused"),
    Hostile("tar bomb", "2 GB of zeros in a few MB, gzipped tar", tar_bomb, "refused"),
    Hostile(
        "external data in a subgraph",
        "an If branch's tensor read from ../../../../etc/hostname",
        _writer("subgraph_external.onnx", lambda: small_onnx("../../../../etc/hostname", in_subgraph=True)),
        "refused",
    ),
    Hostile(
        "n^3 constant folding",
        "If(x > 1e30) guarding ConstantOfShape([8192, 8192]) and 4 MatMuls",
        _writer("folding.onnx", folding_onnx),
        "contained",
    ),
    Hostile(
        "int8 calibration blow-up",
        "every 8000x8000 intermediate held by calibration",
        _writer("calibration_bomb.onnx", calibration_bomb_onnx),
        "contained",
    ),
    Hostile("endless Loop", "a Loop of 10^15 iterations", _writer("hanging.onnx", hanging_onnx), "contained"),
]
