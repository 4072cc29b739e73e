"""Small stand-ins shared by tests: a real one-node ONNX model and a publisher that records."""

from __future__ import annotations


def tiny_onnx_model() -> bytes:
    """A real (one-node) ONNX model: enough for the upload checks, no engine needed."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])],
    )
    return helper.make_model(graph, ir_version=10, opset_imports=[onnx.helper.make_opsetid("", 17)]).SerializeToString()


class RecordingPublisher:
    """An event publisher that only keeps what it was given."""

    def __init__(self) -> None:
        self.published = []

    def publish(self, envelopes) -> None:
        self.published.extend(envelopes)


def embedded_with_fakes(tmp_path, fakes, store, **inference):
    """The embedded app with every service's heavy work replaced by `fakes` (convert,
    compute_reference, measure; the mailer too), artifacts in `tmp_path`; `inference` adds to
    the inference service's parts (a time cap, say)."""
    import sys

    from ayci.bootstrap import embedded
    from ayci.settings import Settings

    parts = {
        "dedup": {"target_cpu": lambda hardware, optimizer: "fake-cpu"},
        "archiver": {"target_cpu": lambda hardware, optimizer: "fake-cpu"},
        "converter": {"convert": fakes.convert, "compute_reference": fakes.compute_reference, "work_dir": tmp_path},
        "inference": {
            "measure": fakes.measure,
            "runtime_for": lambda hardware: ([sys.executable], False),
            "work_dir": tmp_path,
            **inference,
        },
    }
    return embedded(Settings(data_dir=tmp_path / "unused"), fakes, store=store, parts=parts)
