"""int8 recipes, tried per model (`onnx_int8`'s conversion): the one that keeps the answers.

No single recipe suits every model. Static QDQ (int8 weights per channel, uint8 activations
whose ranges are calibrated on example inputs) runs a convolutional network about 2x faster
than float and keeps its answers; on a transformer its activation ranges (a few outlier
channels, softmax, GELU) cost most of the agreement. Dynamic quantization of the MatMul
weights per channel (activations quantized at run time, per tensor) is the usual recipe for
transformers on CPU; on a pretrained encoder a few MatMuls whose inputs carry outliers (the FFN
down-projections after GELU) can still cost the last hundredth, so mixed recipes keep the
noisiest of them in float. So each recipe that applies to the graph is made, judged against the
float model on at least `AGREEMENT_SAMPLES` samples (the user's own inputs, or the workload's
synthetic ones) and timed briefly, one thread, inside `RECIPE_BUDGET_S`; the artifact is the
fastest whose agreement meets the minimum, or, when none does, the one that agrees most (its
measurement then shows it below the minimum: never recommended). What every recipe scored is
kept in the conversion's details (`recipe_details`).
"""

from __future__ import annotations

import gc
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import structlog

from engines import ConversionError, ConversionJob
from schemas.reasons import whole
from workloads.agreement import AGREEMENT_SAMPLES, SYNTHETIC, TOKENIZED, batches_for, over_batches

log = structlog.get_logger()

DEFAULT_MIN_AGREEMENT = 0.99  # a request's default minimum (schemas/events.py RequestSubmitted.min_agreement)
RECIPE_BUDGET_S = 300.0  # every recipe together (made, judged, timed), half a conversion's default time limit
TIMING_S = 1.0  # each recipe's timing (and the float model's), at least TIMING_ROUNDS runs
TIMING_ROUNDS = 5
TIMING_MAX_SAMPLES = 40
TIMING_THREADS = 1  # Lambda's smaller sizes have one vCPU; the ranking seldom changes with more
CALIBRATION_SEED = 1000  # synthetic calibration batches are drawn apart from the judged ones
SENSITIVE_OPS = {"Softmax", "LayerNormalization", "SkipLayerNormalization", "Erf", "Gelu", "FastGelu", "BiasGelu"}
WEIGHT_OPS = {"MatMul", "Gemm", "Conv"}
NOISIEST_FRACTIONS = (1 / 16, 1 / 8, 1 / 4)  # the shares of weight MatMuls the mixed recipes keep in float
NOISIEST_MIN_MATMULS = 8  # below this many weight MatMuls (a CNN's one classifier) the mixed recipes do not apply
NOISE_BATCHES = 16  # calibration batches probed for each MatMul input's range
FLOAT = "float"  # the float model's name among the timed runners


@dataclass(frozen=True)
class Recipe:
    name: str
    label: str  # how the table says it: "dynamic per channel"
    describe: str  # what it does, in a sentence
    applies: Callable[[object], bool]  # the ONNX graph -> whether the recipe means anything for it
    make: Callable[..., None]  # (prepared path, out path, calibration reader factory, graph) -> None


def _has(ops: set[str]) -> Callable[[object], bool]:
    return lambda graph: any(node.op_type in ops for node in graph.node)


def _static(prepared: Path, out: Path, calibration, graph, *, exclude: list[str] | None = None) -> None:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    quantize_static(
        str(prepared),
        str(out),
        calibration(),
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        per_channel=True,
        nodes_to_exclude=exclude or [],
    )


def _static_sensitive_float(prepared: Path, out: Path, calibration, graph) -> None:
    _static(prepared, out, calibration, graph, exclude=sensitive_nodes(graph))


def _dynamic(
    prepared: Path, out: Path, calibration, graph, *, per_channel: bool, exclude: list[str] | None = None
) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        str(prepared),
        str(out),
        op_types_to_quantize=["MatMul", "Gemm"],
        per_channel=per_channel,
        weight_type=QuantType.QInt8,
        nodes_to_exclude=exclude or [],
        extra_options={"MatMulConstBOnly": True},  # only weights: activation x activation stays float
    )


def weight_matmuls(graph) -> list:
    """The MatMul/Gemm nodes with a constant weight (what the dynamic recipes quantize), named."""
    constants = {init.name for init in graph.initializer}
    return [
        node
        for node in graph.node
        if node.op_type in ("MatMul", "Gemm") and node.name and len(node.input) > 1 and node.input[1] in constants
    ]


def input_noise(prepared: Path, graph, batches: list[dict[str, np.ndarray]]) -> dict[str, float]:
    """Each weight MatMul's relative error from quantizing its input to uint8 per tensor at run
    time, as the dynamic recipes do: the rounding noise of a step of (max - min) / 255, step^2 / 12,
    over the input's mean square, the worst over `batches` (the calibration samples, never the
    judged ones). An input with outliers (a transformer's FFN down-projection after GELU) has a
    wide range for its typical values and scores high: those MatMuls lose most to int8."""
    import onnx

    nodes = weight_matmuls(graph)
    model = onnx.load(str(prepared))
    present = {output.name for output in model.graph.output}
    for name in dict.fromkeys(node.input[0] for node in nodes):
        if name not in present:
            model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    probe = prepared.parent / f"{prepared.stem}.probe.onnx"
    onnx.save(model, str(probe))
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the probed tensors kept as named
    options.intra_op_num_threads = TIMING_THREADS
    session = ort.InferenceSession(str(probe), options, providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    noise: dict[str, float] = {}
    for batch in batches[:NOISE_BATCHES]:
        feeds = {i.name: batch[i.name] for i in session.get_inputs() if i.name in batch}
        values = dict(zip(names, session.run(None, feeds), strict=True))
        for node in nodes:
            x = np.asarray(values[node.input[0]], dtype=np.float64)
            power = float(np.mean(x**2)) if x.size else 0.0
            step = (max(float(x.max()), 0.0) - min(float(x.min()), 0.0)) / 255 if x.size else 0.0
            relative = step**2 / 12 / power if power > 0 else 0.0
            noise[node.name] = max(noise.get(node.name, 0.0), relative)
    del session
    probe.unlink(missing_ok=True)
    return noise


_NOISE: dict[tuple[str, int], dict[str, float]] = {}  # (prepared path, its mtime) -> input_noise, for the fractions


def _dynamic_noisiest_float(prepared: Path, out: Path, calibration, graph, *, fraction: float) -> None:
    """Dynamic per channel with the `fraction` of weight MatMuls whose inputs int8 rounds worst
    (`input_noise` on the calibration samples) kept in float."""
    key = (str(prepared), prepared.stat().st_mtime_ns)
    if key not in _NOISE:
        _NOISE.clear()
        reader, batches = calibration(), []
        while (batch := reader.get_next()) is not None:
            batches.append(batch)
        _NOISE[key] = input_noise(prepared, graph, batches)
    noise = _NOISE[key]
    ranked = sorted(noise, key=noise.get, reverse=True)
    keep = ranked[: max(1, round(fraction * len(ranked)))]
    _dynamic(prepared, out, calibration, graph, per_channel=True, exclude=keep)


def _many_matmuls(graph) -> bool:
    return len(weight_matmuls(graph)) >= NOISIEST_MIN_MATMULS


RECIPES = [
    Recipe(
        "static_qdq",
        "static QDQ",
        "static QDQ: int8 weights per channel, uint8 activations calibrated on the example inputs",
        lambda graph: True,
        _static,
    ),
    Recipe(
        "dynamic_per_channel",
        "dynamic per channel",
        "dynamic int8 on MatMul/Gemm weights per channel, activations quantized at run time",
        _has({"MatMul", "Gemm"}),
        lambda prepared, out, calibration, graph: _dynamic(prepared, out, calibration, graph, per_channel=True),
    ),
    *(
        Recipe(
            f"dynamic_per_channel_float_{round(1 / fraction)}",
            f"dynamic per channel, the noisiest 1/{round(1 / fraction)} of MatMuls in float",
            f"dynamic int8 on MatMul/Gemm weights per channel, the 1/{round(1 / fraction)} of them whose inputs"
            " run-time quantization rounds worst (measured on the calibration samples) kept in float",
            _many_matmuls,
            lambda prepared, out, calibration, graph, fraction=fraction: _dynamic_noisiest_float(
                prepared, out, calibration, graph, fraction=fraction
            ),
        )
        for fraction in NOISIEST_FRACTIONS
    ),
    Recipe(
        "static_qdq_sensitive_float",
        "static QDQ with sensitive ops in float",
        "static QDQ with Softmax, LayerNormalization, GELU/Erf, the residual Adds and the output"
        " projection kept in float",
        _has(SENSITIVE_OPS),
        _static_sensitive_float,
    ),
    Recipe(
        "dynamic_per_tensor",
        "dynamic per tensor",
        "dynamic int8 on MatMul/Gemm weights per tensor, activations quantized at run time",
        _has({"MatMul", "Gemm"}),
        lambda prepared, out, calibration, graph: _dynamic(prepared, out, calibration, graph, per_channel=False),
    ),
]


def sensitive_nodes(graph) -> list[str]:
    """The nodes a transformer's static quantization loses most on: the SENSITIVE_OPS, the
    residual Adds (both inputs computed, neither a weight) and the output projections (the
    last MatMul/Gemm/Conv before each graph output)."""
    constants = {init.name for init in graph.initializer}
    constants |= {out for node in graph.node if node.op_type == "Constant" for out in node.output}
    names = []
    for node in graph.node:
        if node.op_type in SENSITIVE_OPS or (
            node.op_type == "Add" and len(node.input) == 2 and not (set(node.input) & constants)
        ):
            names.append(node.name)
    producer = {out: node for node in graph.node for out in node.output}
    seen, stack = set(), [output.name for output in graph.output]
    while stack:  # back from each output until a weighted op: that op is the output projection
        node = producer.get(stack.pop())
        if node is None or node.name in seen:
            continue
        seen.add(node.name)
        if node.op_type in WEIGHT_OPS:
            names.append(node.name)
        else:
            stack.extend(node.input)
    return sorted(set(names) - {""})


@dataclass
class Samples:
    """Batches to judge recipes on, and batches to calibrate them on, with what they are."""

    judged: list[dict[str, np.ndarray]]
    calibration: list[dict[str, np.ndarray]]
    samples: int  # distinct samples judged
    calibration_samples: int
    inputs: str  # SYNTHETIC, USER or TOKENIZED

    def basis(self) -> dict:
        return {"inputs": self.inputs, "samples": self.samples, "calibration_samples": self.calibration_samples}


def samples_for(job: ConversionJob, count: int = AGREEMENT_SAMPLES) -> Samples:
    """At least `count` samples at the job's batch size (at batch 1, `count` batches) to judge
    on, and as many to calibrate on: the user's own inputs (all of them for both, cycling when
    there are fewer), the tokenized sentences (calibrated on the others when there are enough),
    or the workload's synthetic examples (calibration drawn with other seeds)."""
    from engines.inputs import InputsDoNotFit, model_inputs
    from engines.signature import read_signature
    from workloads.binding import BindingError
    from workloads.custom import inputs_kind

    batches = batches_for(job.batch_size, count)
    signature = read_signature(Path(job.model_path), job.model.format)

    def batch(sample: int) -> dict[str, np.ndarray]:
        try:
            return model_inputs(
                job.model,
                Path(job.model_path),
                job.batch_size,
                user_inputs=job.inputs_path,
                signature=signature,
                sample=sample,
            )
        except (BindingError, InputsDoNotFit) as exc:
            raise ConversionError(str(exc)) from exc

    judged = [batch(i) for i in range(batches)]
    if job.inputs_path is not None:
        with np.load(job.inputs_path, allow_pickle=False) as npz:
            rows = int(npz[npz.files[0]].shape[0]) if npz.files else 0
        distinct = min(rows, batches * job.batch_size)
        kind = inputs_kind(job.inputs_path)
        if kind == TOKENIZED and rows >= 2 * distinct:  # calibrated on other sentences than it is judged on
            calibration = [batch(batches + i) for i in range(batches)]
            return Samples(judged, calibration, distinct, distinct, kind)
        return Samples(judged, judged, distinct, distinct, kind)
    calibration = [batch(CALIBRATION_SEED + i) for i in range(batches)]
    total = batches * job.batch_size
    return Samples(judged, calibration, total, total, SYNTHETIC)


def _session(path: Path):
    from engines.onnx_engine import load_session

    return load_session(path, TIMING_THREADS)


def interleaved_p50_ms(runs: dict[str, Callable], inputs: dict[str, np.ndarray]) -> dict[str, tuple[float, int]]:
    """Each runner's p50 (ms) and sample count, timed in `TIMING_ROUNDS` interleaved rounds (a
    load that comes and goes on the machine falls on all of them alike), about `TIMING_S` each."""
    from engines import timed_ms

    per_run = {}
    for name, run in runs.items():
        run(inputs)
        per_run[name] = max(1e-3, min(timed_ms(run, inputs) for _ in range(2)))
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(TIMING_ROUNDS):
        for name, run in runs.items():
            count = int(
                np.clip(TIMING_S * 1000 / TIMING_ROUNDS / per_run[name], 1, TIMING_MAX_SAMPLES // TIMING_ROUNDS)
            )
            samples[name].extend(timed_ms(run, inputs) for _ in range(count))
    return {name: (float(np.median(values)), len(values)) for name, values in samples.items()}


def summary(tried: list[dict], chosen: str | None) -> str:
    """ "static QDQ 0.18, dynamic per tensor 0.93, dynamic per channel 0.991 chosen": each
    recipe's agreement (or why it has none), the chosen one marked."""
    parts = []
    for entry in tried:
        if "agreement" in entry:
            figure = f"{entry['label']} {entry['agreement']:.3f}"
            if "relative_p50" in entry:
                figure += f" at {entry['relative_p50']:.2f}x float"
        else:
            figure = f"{entry['label']} {'skipped' if 'skipped' in entry else 'failed'}"
        parts.append(figure + (" chosen" if entry["recipe"] == chosen else ""))
    return ", ".join(parts)


def choose_recipe(
    job: ConversionJob,
    prepared: Path,
    out: Path,
    *,
    min_agreement: float = DEFAULT_MIN_AGREEMENT,
    budget_s: float = RECIPE_BUDGET_S,
    recipes: list[Recipe] | None = None,
) -> dict:
    """Make, judge and time each recipe that applies to `prepared` (an ONNX model after ONNX
    Runtime's quantization pre-processing); copy the chosen one to `out`. Returns the
    conversion's details: the recipe, every recipe's figures and what they rest on."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader

    from workloads import workload_module

    started = time.perf_counter()
    graph = onnx.load(str(prepared)).graph
    samples = samples_for(job)
    judge = workload_module(job.model.workload).agreement
    job.progress(f"onnx_int8: the float model on {samples.samples} {samples.inputs} samples")
    try:
        float_run = _session(prepared)
    except Exception as exc:
        raise ConversionError(f"ONNX Runtime cannot load the model: {whole(exc)}") from exc
    reference = [[np.asarray(o) for o in float_run(batch)] for batch in samples.judged]
    runners = {FLOAT: float_run}  # timed together once every recipe is judged

    class Calibration(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter(samples.calibration)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)

    tried: list[dict] = []
    work = out.parent / "recipes"
    work.mkdir(exist_ok=True)
    for recipe in recipes or RECIPES:
        entry = {"recipe": recipe.name, "label": recipe.label}
        if not recipe.applies(graph):
            continue
        if tried and time.perf_counter() - started > budget_s:
            tried.append({**entry, "skipped": f"the recipes' budget of {budget_s:.0f} s was spent"})
            continue
        job.progress(f"onnx_int8: recipe {recipe.label}")
        path = work / f"{recipe.name}.onnx"
        made = time.perf_counter()
        try:
            recipe.make(prepared, path, Calibration, graph)
            run = _session(path)
            outputs = [[np.asarray(o) for o in run(batch)] for batch in samples.judged]
        except Exception as exc:  # a recipe the model does not take is one fewer candidate
            tried.append({**entry, "error": whole(exc)[:500]})
            log.info("int8_recipe_failed", recipe=recipe.name, reason=whole(exc)[:200])
            continue
        agreement = over_batches(
            judge, reference, outputs, samples=samples.samples, inputs=samples.inputs, fed=samples.judged
        )
        runners[recipe.name] = run
        tried.append(
            {
                **entry,
                "agreement": agreement.score,
                "metric": agreement.metric,
                "meets_minimum": agreement.score >= min_agreement,
                "made_s": time.perf_counter() - made,
                "path": path,
            }
        )
        log.info("int8_recipe", recipe=recipe.name, agreement=round(agreement.score, 4))
    job.progress("onnx_int8: timing the recipes")
    timings = interleaved_p50_ms(runners, samples.judged[0])
    float_p50 = timings[FLOAT][0]
    for entry in tried:
        if entry["recipe"] in timings:
            p50, runs = timings[entry["recipe"]]
            entry.update(p50_ms=p50, timing_runs=runs, relative_p50=p50 / float_p50 if float_p50 > 0 else None)
    runners.clear()
    gc.collect()
    judged = [t for t in tried if "agreement" in t]
    if not judged:
        reasons = "; ".join(f"{t['label']}: {t.get('error') or t.get('skipped')}" for t in tried)
        raise ConversionError(f"no int8 recipe could be made: {reasons}")
    meeting = [t for t in judged if t["meets_minimum"]]
    chosen = min(meeting, key=lambda t: t["p50_ms"]) if meeting else max(judged, key=lambda t: t["agreement"])
    shutil.copyfile(chosen["path"], out)
    shutil.rmtree(work, ignore_errors=True)
    for entry in tried:
        entry.pop("path", None)
    description = next(r.describe for r in RECIPES if r.name == chosen["recipe"])
    return {
        "quantization": description,
        "recipe": chosen["recipe"],
        "recipe_label": chosen["label"],
        "recipes": tried,
        "recipe_summary": summary(tried, chosen["recipe"]),
        "min_agreement": min_agreement,
        "meets_minimum": bool(meeting),
        "agreement_basis": samples.basis(),
        "float_p50_ms": float_p50,
        "timing_threads": TIMING_THREADS,
        "recipes_s": time.perf_counter() - started,
    }
