"""`onnx_int8`: ONNX Runtime on the model quantized to 8-bit integers, by the recipe that suits it.

The converter exports the model to ONNX, runs ONNX Runtime's quantization pre-processing
(shape inference and graph clean-up), then tries the int8 recipes of `engines/quantization.py`
(static QDQ per channel; dynamic per channel on MatMul/Gemm, also with the noisiest 1/16, 1/8
or 1/4 of the MatMuls in float; static QDQ with the sensitive operators in float; dynamic per
tensor), each judged against the float model on at least 32
samples (the user's own inputs, or the workload's synthetic ones) and timed briefly. The
artifact is the fastest recipe whose agreement meets the run's minimum (`job.min_agreement`,
from the request; 0.99 by default), else the one that agrees most; the conversion's details
name it and what every recipe scored, and the result carries them (`conversion`). Quantization changes the answers: the
agreement with `base` is then measured like any engine's, and a combination below the run's
minimum is never recommended. The recipe chosen at one batch size of a model is tried alone at its
other batch sizes (`chosen_before`; every recipe again where it falls short there). Loading,
session settings and profiling are `onnx`'s (where its
outputs first diverge is not looked for: by design, at the quantized nodes); the session tuning
is `onnx`'s at the one graph optimization level the recipe was judged at (`tuning_candidates`).
"""

from __future__ import annotations

import time
from pathlib import Path

from engines import Conversion, ConversionError, ConversionJob
from engines.onnx_engine import (  # noqa: F401 - the runtime side is onnx's
    COMPILES_ON_LOAD,
    default_settings,
    exported_onnx,
    import_runtime,
    load,
    load_session,
    profile,
)
from engines.onnx_engine import tuning_candidates as onnx_tuning_candidates
from engines.quantization import RECIPES, choose_recipe


def convert(job: ConversionJob) -> Conversion:
    from onnxruntime.quantization.preprocess import quant_pre_process

    started = time.perf_counter()
    exported = exported_onnx(job)
    prepared = job.out_dir / "prepared.onnx"
    try:
        quant_pre_process(str(exported), str(prepared))
    except Exception:
        prepared = exported
    quantized = job.out_dir / "model.int8.onnx"
    details = chosen_before(job, prepared, quantized) or choose_recipe(
        job, prepared, quantized, min_agreement=job.min_agreement
    )
    for leftover in {exported, prepared}:
        leftover.unlink(missing_ok=True)
    return Conversion(artifact_file=quantized.name, conversion_s=time.perf_counter() - started, details=details)


def chosen_before(job: ConversionJob, prepared: Path, quantized: Path) -> dict | None:
    """The recipe chosen for this model at another batch size (`job.int8_recipe`), made, judged and
    timed alone: a recipe's agreement is per sample and its speed against float moved by a few
    hundredths between batch sizes (all-MiniLM-L6-v2: 0.59 and 0.60 of float at batch 1 and 2, every
    recipe in the same order), while trying every recipe again took 25-30 s per batch size. None (every
    recipe is tried) when there is none, it does not apply, or it falls short of the minimum here."""
    recipe = next((r for r in RECIPES if r.name == job.int8_recipe), None)
    if recipe is None:
        return None
    try:
        details = choose_recipe(job, prepared, quantized, min_agreement=job.min_agreement, recipes=[recipe])
    except ConversionError:
        return None
    if not details["meets_minimum"]:
        return None
    where = f"batch {job.int8_recipe_batch}" if job.int8_recipe_batch else "another batch size"
    details["recipe_chosen_at"] = job.int8_recipe_batch
    details["recipe_summary"] += f" (as chosen at {where}; the other recipes not tried again)"
    return details


def tuning_candidates(threads: int) -> list[dict]:
    """`onnx`'s session settings at the default graph optimization level only (ONNX Runtime's
    full optimizations, at which every recipe was judged): the level changes an int8 model's
    numbers (its fusions of the quantized MatMuls, LayerNormalization and GELU), not only its
    speed. all-MiniLM-L6-v2's dynamic per-channel recipe on the same 32 sentences agreed 0.9905
    at `all` and 0.98996 at `basic`; session tuning judges a candidate on one batch within a
    slack of 0.001 (measuring/measure.py `tune`), so it took `basic` (12 % faster at one thread)
    and the row fell below the run's minimum of 0.99, never recommended. The memory arena,
    threads and execution mode leave the numbers alone and are still tried."""
    level = default_settings(threads)["graph_optimization"]
    return [settings for settings in onnx_tuning_candidates(threads) if settings["graph_optimization"] == level]
