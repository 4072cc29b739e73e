"""`onnx_int8`: ONNX Runtime on the model quantized to 8-bit integers.

The converter quantizes statically (ONNX Runtime's `quantize_static`, QDQ format: int8
weights per channel, uint8 activations) with the activation ranges calibrated on the
combination's example inputs (the workload's, or the user's own with `--inputs`), after ONNX
Runtime's pre-processing (shape inference and graph clean-up). Static quantization, not
dynamic: ONNX Runtime's dynamic `ConvInteger` ran ResNet-18 3x slower than float here, while
the static model ran it 2x faster. Quantization changes the answers: the agreement with `base`
is measured like any engine's, shown beside it, and a combination below the run's minimum is
never recommended. Loading, session settings, their tuning and profiling are `onnx`'s (where
its outputs first diverge is not looked for: by design, at the quantized nodes).
"""

from __future__ import annotations

import time

import numpy as np

from engines import Conversion, ConversionError, ConversionJob
from engines.onnx_engine import (  # noqa: F401 - the runtime side is onnx's
    COMPILES_ON_LOAD,
    default_settings,
    exported_onnx,
    import_runtime,
    load,
    load_session,
    profile,
    tuning_candidates,
)
from schemas.reasons import whole


def convert(job: ConversionJob) -> Conversion:
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.preprocess import quant_pre_process

    from engines.inputs import conversion_inputs

    started = time.perf_counter()
    exported = exported_onnx(job)
    inputs = conversion_inputs(job)
    prepared = job.out_dir / "prepared.onnx"
    try:
        quant_pre_process(str(exported), str(prepared))
    except Exception:
        prepared = exported
    try:
        names = [i.name for i in ort.InferenceSession(str(prepared), providers=["CPUExecutionProvider"]).get_inputs()]
    except Exception as exc:
        raise ConversionError(f"ONNX Runtime cannot load the model: {whole(exc)}") from exc
    feed = dict(zip(names, inputs.values(), strict=True)) if set(inputs) != set(names) else inputs

    class Calibration(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter([feed])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)

    quantized = job.out_dir / "model.int8.onnx"
    job.progress("onnx_int8: calibrating and quantizing")
    try:
        quantize_static(
            str(prepared),
            str(quantized),
            Calibration(),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            per_channel=True,
        )
    except Exception as exc:
        raise ConversionError(f"ONNX Runtime cannot quantize the model: {whole(exc)}") from exc
    for leftover in {exported, prepared}:
        leftover.unlink(missing_ok=True)
    return Conversion(
        artifact_file=quantized.name,
        conversion_s=time.perf_counter() - started,
        details={
            "quantization": "static QDQ, int8 weights per channel, uint8 activations, calibrated on the example inputs"
        },
    )
