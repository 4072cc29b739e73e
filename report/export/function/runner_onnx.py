"""The exported function's model: an ONNX artifact in ONNX Runtime (`onnx`, `onnx_int8`, and
`base` on an ONNX model, which AYCI measured with every graph optimization disabled).

`load_model(here, deployment)` builds the session once, with the settings AYCI measured; its
`run(feed)` answers the outputs in the artifact's order. Imports numpy and onnxruntime alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

LEVELS = {
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
}


class Model:
    """An ONNX Runtime session of the artifact."""

    def __init__(self, path: Path, settings: dict) -> None:
        options = ort.SessionOptions()
        options.graph_optimization_level = LEVELS[settings.get("graph_optimization", "all")]
        threads = int(settings.get("intra_op_threads", 1))
        options.intra_op_num_threads = threads
        parallel = settings.get("execution_mode") == "parallel"
        options.execution_mode = ort.ExecutionMode.ORT_PARALLEL if parallel else ort.ExecutionMode.ORT_SEQUENTIAL
        options.inter_op_num_threads = threads if parallel else 1
        options.enable_cpu_mem_arena = bool(settings.get("memory_arena", True))
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def run(self, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self.session.run(None, feed)


def load_model(here: Path, deployment: dict) -> Model:
    return Model(here / deployment["artifact_file"], deployment["session_settings"])
