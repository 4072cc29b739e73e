"""`tvm`: Apache TVM (Relax) compiled ahead of time for one CPU, one batch size, tuned with MetaSchedule.

Conversion: the `.pt2` program is re-exported with a static batch (`job.batch_size`) and the
workload's input size, and imported with `from_exported_program`; an ONNX model is imported with
`from_onnx` at the same static shapes. Weights become constants of the module, so the artifact is
one file, `model.so` (`export_library`), that holds the compiled kernels, the VM bytecode and the
weights. Operators, after legalization, are fused into TIR kernels; MetaSchedule tunes them.
An operator the importer lacks is a `ConversionError` naming it (e.g. `aten.amax`).

Tuning (`job.tuning_trials` measured candidates in total; 0 = none), ended early by
`job.tuning_time_limit_s` (the converter's is `schemas.events.TUNING_TIME_LIMIT_S`, 15 minutes):
- The search strategy yields no further batch once one would end past the limit at the pace
  so far (`_TimeLimit`, `_time_limited`); batches being measured are joined and recorded. A
  task whose batch comes back empty (its search space measured) ends there. With
  a limit, the rounds are sized for the trials it fits at TRIAL_PACE_S when the budget asks
  more, so a large budget does not leave the last kernels untuned. `details` says the trials
  measured, the trials asked and whether the limit ended the search (`time_limit_reached`).
- Kernels that share their anchor block (one matmul with different fused epilogues) share one
  task (`module_equality="anchor-block"`). Convolutions are kept apart from the operators after
  them (`_convolutions_unfused`), so each convolution shape is one task in every layout.
- The heaviest tasks (FLOPs x uses) are tuned first, as many as get 8 trials each, and a round
  is budget / tasks / 2 trials (4-32), so the gradient scheduler's first pass covers every chosen
  task with half the budget and gives the other half to the tasks that still cost the most.
  A kernel without a schedule runs as naive loops (single-threaded, scalar: untuned TVM is
  ~100x slower than ONNX Runtime on the BERT example), so a budget spread over all the big kernels
  beats one spent deeply on a few. `details` says how many kernels got a tuned schedule.
- Builds, chosen per model by measurement (`_prepare`, `_choose_variant`): convolutions are
  converted to NHWC (measured: better kernels for fewer trials than NCHW), and a model with 3x3
  stride-1 convolutions is built twice, once with them computed directly (`nhwc`) and once with
  Winograd F(4x4, 3x3) (`nhwc-winograd`, `engines/tvm_winograd.py`). The builds race for
  the budget then (`_search`): a first round over the kernels of both (the kernels they share
  once); then, chunk by chunk, each build's time is estimated from the records (the last
  estimates are `details["variants_estimated_ms"]`; a kernel every build runs alike and whose
  candidates all failed is left out of each), a build more than 15% behind stops being
  tuned, and the rest goes to the kernels of the builds still in. Both are then compiled and
  timed on this host in turns, and the faster is shipped. `details["variant"]` names the build
  shipped and `details["variants_p50_ms"]` gives each one's time.
- Schedules shared across models: `job.shared_tuning_dirs` holds other models' records for the
  same CPU. A kernel they hold (same computation, shapes and fused operators, e.g. a fine-tuned
  copy, or ResNet-18 and ResNet-34's common layers), searched at least as deeply as this budget
  would per task, takes their best schedules and is not searched again
  (`details["kernels_from_other_models"]`).
- Weights are layout-free: tuned kernels may ask for a packed weight layout, and the packing is
  folded into the constants at compile time (nothing is repacked per call).
- Records: `job.tuning_dir` holds MetaSchedule's JSON database (`database_workload.json`,
  `database_tuning_record.json`) and `ayci_tuning.json` (tuning target, trials measured, trials
  asked, tasks). If it already answers at least `tuning_trials` trials asked for the same tuning
  target (a search the time limit ended answered what it was asked), the search is skipped and
  the records applied; otherwise the difference from the trials measured is searched and added.
  Measured (ResNet-18 b1, 2 shared cores): 1500 trials took 1031 s of tuning + 23 s; the second
  conversion from the records 38 s (mostly compiling); BERT 500 trials 452 s + 9 s, again 9 s.
- Speed of the search (measured on 2 shared cores): the stock settings spent 80-90% of the time
  in evolutionary search (512 schedules x 4 generations before every round), so it evolves 128 x 2;
  MetaSchedule's TuneContext imports all of TVM's tensor intrinsics (~500 TVMScript kernels, mostly
  GPU: 20 s idle, 70-180 s under load), so only the x86 and arm ones are imported (1 s); and
  candidates are built with `tvm.tirx.build` (the stock builder function timed out the same way).
  About 1-1.4 s per trial on 2 cores.

arm (aarch64, cross-compiled with `aarch64-linux-gnu-gcc`): there is no aarch64 CPU to measure
candidates on, and qemu user-mode emulation (the only aarch64 here) does not time like the real
core: it runs TVM kernels 7-10x slower with costs per instruction unrelated to a Neoverse
pipeline (an untuned ResNet-18 224 took 18 s emulated), so ranking schedules by emulated time
would rank noise at 10x the cost. Leaving kernels untuned is worse still (naive loops). So arm
kernels are tuned on the host as a proxy: candidates are measured under an x86 target limited to
128-bit vectors (`x86-64-v2`, 4 floats a vector like NEON), and the schedules found (tile sizes,
parallel, vectorized and unrolled loops: nothing x86-specific) are applied to the aarch64 target
(checked: they apply, and the emulated outputs match x86 base). Reported as
`details["tuned"] = False` with a `tuning_note`: a schedule search, not one measured on arm.

Runtime: `load` imports only TVM's runtime (`TVM_USE_RUNTIME_LIB=1`, torch kept out: ~1.4 s,
~95 MB) and runs the Relax VM; inputs are passed in the order of the dict (the workload's
`INPUT_NAMES` order), outputs come back flattened in the model's output order.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engines import Conversion, ConversionError, ConversionJob, timed_ms

ARTIFACT = "model.so"
DEFAULT_ARM_CPU = "neoverse-n1"
ARM_TRIPLE = "aarch64-linux-gnu"
ARM_CC = "aarch64-linux-gnu-gcc"
# The x86 target arm kernels are tuned on (see the module docstring): 128-bit vectors like NEON.
ARM_PROXY_CPU = "x86-64-v2"
TUNING_META = "ayci_tuning.json"
MODULE_EQUALITY = "anchor-block"
NO_CONVOLUTIONS = "no convolutions"  # the build of a model without any (no layout to choose)
MIN_TRIALS_PER_TASK = 8
# A build whose estimate is this much above the best's stops being tuned (`_search`).
RACE_MARGIN = 0.15
# Seconds a trial takes (evolving, building, measuring), to size a search's rounds for the trials
# its time limit fits: measured on 2 shared cores, 1.3-1.5 for ResNet-18, 0.7 for the encoder.
TRIAL_PACE_S = 1.5


# ---------------------------------------------------------------- targets


def host_cpu_name() -> str:
    """LLVM's name for this machine's CPU (e.g. `znver4`, `skylake-avx512`, `icelake-server`).

    The measuring worker of a hardware passes it as `ConversionJob.target_cpu`: an intel
    artifact is compiled for exactly that CPU (and its artifact key names it). Imports TVM's
    compiler (a few seconds, once per process)."""
    import tvm

    return str(tvm.target.codegen.llvm_get_system_cpu())


def host_num_cores() -> int:
    """The cores the tuning measures on and the compiled kernels parallelize over."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def target_spec(hardware: str, target_cpu: str | None, num_cores: int | None = None) -> dict:
    """The TVM target (as the JSON dict TVM 0.27 takes) that `hardware` compiles for."""
    cores = num_cores or host_num_cores()
    if str(hardware) == "arm":
        return {
            "kind": "llvm",
            "mtriple": ARM_TRIPLE,
            "mattr": ["+neon"],
            "mcpu": target_cpu or DEFAULT_ARM_CPU,
            "num-cores": cores,
        }
    if not target_cpu:
        raise ConversionError("an intel TVM conversion needs job.target_cpu (engines.tvm_engine.host_cpu_name())")
    return {"kind": "llvm", "mcpu": target_cpu, "num-cores": cores}


def tuning_target_spec(hardware: str, target_cpu: str | None, num_cores: int | None = None) -> dict:
    """The target candidates are measured under: the real one for intel, the 128-bit proxy for arm."""
    if str(hardware) == "arm":
        return {"kind": "llvm", "mcpu": ARM_PROXY_CPU, "num-cores": num_cores or host_num_cores()}
    return target_spec(hardware, target_cpu, num_cores)


def _check_arm_toolchain() -> None:
    if shutil.which(ARM_CC) is None:
        raise ConversionError(
            f"{ARM_CC} is not installed: arm TVM artifacts are cross-compiled "
            "(apt-get install -y gcc-aarch64-linux-gnu libc6-dev-arm64-cross, or scripts/arm-sysroot.sh)"
        )


# ---------------------------------------------------------------- conversion


def convert(job: ConversionJob) -> Conversion:
    """Import, tune (or apply stored records) and compile `job.model_path` into `out_dir/model.so`."""
    started = time.perf_counter()
    hardware = str(getattr(job.hardware, "value", job.hardware))
    if hardware == "arm":
        _check_arm_toolchain()
    target_cpu = job.target_cpu or (DEFAULT_ARM_CPU if hardware == "arm" else "")
    spec = target_spec(hardware, target_cpu)
    tune_spec = tuning_target_spec(hardware, target_cpu)

    job.progress("tvm: importing the model")
    import tvm  # noqa: F401  (the compiler: imported only on the conversion side)

    from engines.inputs import conversion_inputs

    examples = conversion_inputs(job)  # their shapes are compiled in
    variants = _prepare(_import_model(job, examples), spec, measured=job.tuning_trials > 0)

    tuning = _tune(variants, job, tune_spec) if job.tuning_trials > 0 else _no_tuning()
    job.progress("tvm: compiling")
    try:
        chosen, executable, scheduled = _choose_variant(variants, spec, tune_spec, tuning.database, examples, job)
        out = Path(job.out_dir) / ARTIFACT
        if hardware == "arm":
            from tvm.support.cc import cross_compiler

            executable.export_library(str(out), fcompile=cross_compiler(ARM_CC))
        else:
            executable.export_library(str(out))
    except ConversionError:
        raise
    except Exception as exc:
        raise ConversionError(f"TVM failed to compile the model: {_first_line(exc)}") from exc
    finally:
        tuning.close()

    total = time.perf_counter() - started
    details = {
        "target": spec,
        "tuning_target": tune_spec,
        "trials": tuning.trials,  # measured (by this search and the stored records it extends)
        "trials_asked": job.tuning_trials,
        "tuning_time_limit_s": job.tuning_time_limit_s,
        "time_limit_reached": tuning.time_limited,  # the limit, not the trials, ended the search
        "tasks": tuning.tasks,
        "records_reused": tuning.reused,
        "kernels_from_other_models": tuning.borrowed,
        **chosen,
        **(
            {"variants_estimated_ms": {k: round(v, 3) for k, v in tuning.estimates.items()}} if tuning.estimates else {}
        ),
        **scheduled,
        "tuned": (tuning.trials > 0 or tuning.borrowed > 0) and hardware != "arm",
    }
    if hardware == "arm":
        details["tuning_note"] = (
            "no aarch64 CPU to measure on (qemu does not time like hardware): kernels were tuned on the "
            f"x86 host under a 128-bit-vector proxy target ({ARM_PROXY_CPU}) and the schedules applied to aarch64"
            if tuning.trials > 0 or tuning.borrowed
            else "not tuned (tuning_trials = 0): kernels run as naive loops"
        )
    return Conversion(
        artifact_file=ARTIFACT, conversion_s=total - tuning.seconds, tuning_s=tuning.seconds, details=details
    )


def _first_line(exc: BaseException) -> str:
    """The error whole, without its Python or C++ backtrace (TVM puts the useful part last)."""
    from schemas.reasons import whole

    return whole(exc)


def _import_model(job: ConversionJob, examples: dict[str, np.ndarray]):
    """The model as a Relax IRModule at the shapes of `examples`, its weights as constants."""
    if str(getattr(job.model.format, "value", job.model.format)) == "onnx":
        return _import_onnx(Path(job.model_path), examples)
    return _import_pt2(Path(job.model_path), examples)


def _unsupported_ops(exc: BaseException) -> str:
    text = str(exc)
    for marker in ("Unsupported function types", "Unsupported ops", "not supported", "Unsupported"):
        if marker in text:
            line = next(line for line in text.splitlines() if marker in line)
            return line.strip()
    return _first_line(exc)


def _import_pt2(path: Path, examples: dict[str, np.ndarray]):
    import torch
    from tvm.relax.frontend.torch import from_exported_program

    from engines.model_files import NotAModelError, load_exported_program

    try:
        program = load_exported_program(path)
    except NotAModelError as exc:
        raise ConversionError(str(exc)) from exc
    inputs = {name: torch.from_numpy(value) for name, value in examples.items()}
    try:
        # Static shapes: a TVM artifact serves one batch size, and static shapes let every
        # kernel be tuned for its exact sizes.
        static = _export_static(program, inputs, path)
    except Exception as exc:
        raise ConversionError(f"re-exporting the program with a static batch failed: {_first_line(exc)}") from exc
    try:
        return from_exported_program(static, unwrap_unit_return_tuple=False)
    except Exception as exc:
        raise ConversionError(f"TVM cannot import the program: {_unsupported_ops(exc)}") from exc


def _export_static(program, inputs: dict, path: Path):
    """Re-export `program` at the shapes of `inputs`, called as it was exported (positional
    inputs by position, keyword inputs by name: its signature says which)."""
    import torch

    from engines.signature import call_arguments, read_signature

    args, kwargs = call_arguments(read_signature(path), inputs)
    return torch.export.export(program.module(), args, kwargs=kwargs)


def _import_onnx(path: Path, examples: dict[str, np.ndarray]):
    import onnx
    from tvm.relax.frontend.onnx import from_onnx

    model = onnx.load(str(path))
    initializers = {init.name for init in model.graph.initializer}
    graph_inputs = [i.name for i in model.graph.input if i.name not in initializers]
    if len(graph_inputs) != len(examples):
        raise ConversionError(f"the ONNX model has inputs {graph_inputs}, the workload feeds {list(examples)}")
    by_name = (
        examples if set(graph_inputs) == set(examples) else dict(zip(graph_inputs, examples.values(), strict=True))
    )
    shapes = {name: list(by_name[name].shape) for name in graph_inputs}
    dtypes = {name: str(by_name[name].dtype) for name in graph_inputs}
    try:
        return from_onnx(model, shape_dict=shapes, dtype_dict=dtypes, keep_params_in_input=False)
    except Exception as exc:
        first = exc
    # A graph exported with dynamic dims computes some shapes at run time (Shape -> Gather ->
    # Concat -> Reshape), which TVM's importer cannot follow. At the static shapes this
    # conversion is for, ONNX Runtime's basic optimizations fold them into constants.
    try:
        return from_onnx(_folded_at(model, shapes), shape_dict=shapes, dtype_dict=dtypes, keep_params_in_input=False)
    except Exception:
        raise ConversionError(f"TVM cannot import the ONNX model: {_unsupported_ops(first)}") from first


def _folded_at(model, shapes: dict[str, list[int]]):
    """`model` with its inputs fixed to `shapes` and what they decide folded into constants
    (ONNX Runtime's basic, standard-operator graph optimizations)."""
    import onnx
    import onnxruntime as ort

    static = onnx.ModelProto()
    static.CopyFrom(model)
    for graph_input in static.graph.input:
        if graph_input.name in shapes:
            for dim, size in zip(graph_input.type.tensor_type.shape.dim, shapes[graph_input.name], strict=True):
                dim.Clear()
                dim.dim_value = int(size)
    del static.graph.value_info[:]  # inferred for the dynamic dims: stale now
    with tempfile.TemporaryDirectory(prefix="ayci-onnx-fold-") as tmp:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(Path(tmp) / "folded.onnx")
        ort.InferenceSession(static.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return onnx.load(options.optimized_model_filepath)


def _prepare(mod, spec: dict, measured: bool) -> dict:
    """The model lowered in each layout worth measuring: `{layout: module tuning sees}`.

    Convolutions go NHWC (channels innermost, so they vectorize over channels; measured on
    ResNet-18 b1, 2 cores: NHWC 12.8 ms after 500 trials and 12.3 ms after 1500, where NCHW gave
    15.7 ms after 2000), computed directly (`nhwc`) or, for 3x3 stride-1 convolutions, with
    Winograd F(4x4, 3x3) (`nhwc-winograd`, `engines.tvm_winograd`); both are tuned and the faster
    compiled model is kept (`_choose_variant`); untuned (`measured` False), kernels are naive loops
    whatever the layout, so only `nhwc` is built. A model TVM's layout conversion cannot handle
    stays `nchw` (the example detector's post-processing did, until `_squeeze_axes_nonnegative`
    worked around the conversion's failure on it). Channel-blocked layouts
    (NCHWc) are not candidates: Relax's convolution legalization rejects them."""
    if not _has_convolutions(mod):
        try:
            return {NO_CONVOLUTIONS: _lower(mod, spec, nhwc=False, winograd=False)}
        except Exception as exc:
            raise ConversionError(f"TVM cannot lower the model: {_unsupported_ops(exc)}") from exc
    try:
        variants = {"nhwc": _lower(mod, spec, nhwc=True, winograd=False)}
    except Exception:
        try:
            return {"nchw": _lower(mod, spec, nhwc=False, winograd=False)}
        except Exception as exc:
            raise ConversionError(f"TVM cannot lower the model: {_unsupported_ops(exc)}") from exc
    if not measured:
        return variants
    winograd = _lower(mod, spec, nhwc=True, winograd=True)
    if _winograd_kernels(winograd):
        variants["nhwc-winograd"] = winograd
    return variants


def _has_convolutions(mod) -> bool:
    """Whether the model's Relax functions call a 2-D convolution."""
    from tvm import relax

    found = []

    def visit(expr) -> None:
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.nn.conv2d":
            found.append(expr)

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return bool(found)


def _winograd_kernels(mod) -> int:
    from tvm import tirx

    return sum(
        1 for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc) and "conv2d_winograd" in gv.name_hint
    )


def _convolutions_unfused():
    """A pass marking convolution kernels opaque to operator fusion: the operators after a
    convolution (bias, batch norm, residual add, ReLU) become a kernel of their own instead of
    its epilogue. Every convolution of one shape is then one kernel and one tuning task, in
    both layouts alike. Fused, a convolution had a different epilogue at each call site and in
    each layout, and a schedule tuned on one failed to replay on another (MetaSchedule:
    "old_outputs.size() == new_outputs.size()", "cache-read ... buffer_index ... out of range").
    The price is one pass over each output, small beside the convolution."""
    import tvm
    from tvm import tirx

    opaque = 8  # relax's OpPatternKind.kOpaque

    @tvm.transform.module_pass(opt_level=0, name="ConvolutionsUnfused")
    def mark(mod, _context):
        for gv, func in list(mod.functions_items()):
            if isinstance(func, tirx.PrimFunc) and gv.name_hint.startswith("conv2d"):
                mod.update_func(gv, func.with_attr("op_pattern", opaque))
        return mod

    return mark


def _squeeze_axes_nonnegative():
    """A pass writing `squeeze`'s negative axes as the non-negative axes they name. TVM's
    layout conversion fails with `std::bad_alloc` on `squeeze(axis=[-1])` of a tensor whose
    layout it does not know (here `topk`'s output, in the example detector's post-processing,
    which `torch.export` writes as `squeeze(-1)`); with the axis counted from the front it
    converts. Shapes are static, so every tensor's rank is known."""
    import tvm
    from tvm import relax

    @relax.expr_functor.mutator
    class NonNegative(relax.PyExprMutator):
        def visit_call_(self, call):
            call = self.visit_expr_post_order(call)
            if getattr(call.op, "name", "") != "relax.squeeze" or call.attrs.axis is None:
                return call
            rank = call.args[0].ty.ndim
            axes = [int(axis) for axis in call.attrs.axis]
            if rank < 0 or all(axis >= 0 for axis in axes):
                return call
            return relax.op.squeeze(call.args[0], [axis % rank for axis in axes])

    @tvm.transform.module_pass(opt_level=0, name="SqueezeAxesNonNegative")
    def rewrite(mod, _context):
        mutator = NonNegative(mod)
        for gv, func in list(mod.functions_items()):
            if isinstance(func, relax.Function):
                mutator.builder_.update_func(gv, mutator.visit_expr(func))
        return mutator.builder_.get()

    return rewrite


def _lower(mod, spec: dict, *, nhwc: bool, winograd: bool):
    import tvm
    from tvm import relax

    from engines import tvm_vector_math, tvm_winograd

    target = tvm.target.Target(spec)
    layout = (
        [
            _squeeze_axes_nonnegative(),
            relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "OHWI"]}),
            relax.transform.FoldConstant(),
        ]
        if nhwc
        else []
    )
    legalize = {
        **tvm_vector_math.legalize_map(),
        **({"relax.nn.conv2d": tvm_winograd.legalize_conv2d} if winograd else {}),
    }
    with target:
        return tvm.transform.Sequential(
            [
                relax.transform.DecomposeOpsForInference(),
                relax.transform.CanonicalizeBindings(),
                *layout,  # OHWI weights folded into constants (Winograd needs constant weights)
                *relax.pipeline.library_dispatch_passes(target),
                relax.transform.LegalizeOps(customize_legalize_map=legalize),
                relax.transform.AnnotateTIROpPattern(),
                _convolutions_unfused(),
                relax.transform.FoldConstant(),  # also the Winograd weight transforms, once
                relax.transform.FuseOps(),
                relax.transform.FuseTIR(),
                relax.transform.AttachAttrLayoutFreeBuffers(),
            ]
        )(mod)


def _choose_variant(variants: dict, spec: dict, tune_spec: dict, database, examples: dict, job: ConversionJob):
    """The build (layout) to ship, its executable for `spec`, and its kernel counts.

    With one candidate, that one. With several, each is compiled with its tuned kernels for the
    tuning target and timed on this host (interleaved rounds, the same inputs), and the fastest
    is kept: its measured time, and the others', go into the details."""
    if len(variants) == 1:
        ((variant, mod),) = variants.items()
        executable, scheduled = _compile(mod, spec, database)
        return {"variant": variant}, executable, scheduled
    compiled, failures = {}, {}
    for variant, mod in variants.items():
        try:
            compiled[variant] = _compile(mod, tune_spec, database)
        except Exception as exc:
            failures[variant] = _first_line(exc)
    if not compiled:
        raise ConversionError(f"TVM failed to compile the model: {'; '.join(f'{k}: {v}' for k, v in failures.items())}")
    job.progress(f"tvm: timing the variants {', '.join(compiled)}")
    p50 = _time_executables({variant: executable for variant, (executable, _) in compiled.items()}, examples)
    variant = min(p50, key=p50.get)
    job.progress(f"tvm: {variant} is the fastest ({', '.join(f'{k} {v:.2f} ms' for k, v in p50.items())})")
    executable, scheduled = compiled[variant] if tune_spec == spec else _compile(variants[variant], spec, database)
    chosen = {"variant": variant, "variants_p50_ms": {k: round(v, 3) for k, v in p50.items()}}
    if failures:
        chosen["variants_failed"] = failures
    return chosen, executable, scheduled


def _time_executables(
    executables: dict, examples: dict[str, np.ndarray], budget_s: float = 6.0, most: int = 15
) -> dict[str, float]:
    """Median ms of each executable on `examples`, run in turns (so a burst of other work on the
    machine hits each alike): at least 3 runs each, at most `most`, stopping after `budget_s`."""
    import tvm
    from tvm import relax

    device = tvm.cpu()
    calls = {}
    for variant, executable in executables.items():
        main = relax.VirtualMachine(executable, device)["main"]
        args = [tvm.runtime.tensor(np.ascontiguousarray(value), device) for value in examples.values()]
        main(*args)  # the first call sets things up
        calls[variant] = (main, args)
    samples: dict[str, list[float]] = {variant: [] for variant in calls}
    deadline = time.perf_counter() + budget_s
    while True:
        for variant, (main, args) in calls.items():
            started = time.perf_counter()
            main(*args)
            samples[variant].append((time.perf_counter() - started) * 1000)
        count = len(samples[variant])
        if count >= most or (count >= 3 and time.perf_counter() > deadline):
            return {variant: float(np.median(values)) for variant, values in samples.items()}


def _compile(mod, spec: dict, database):
    """Apply the tuned schedules (if any), fold the weight packing, build the VM executable."""
    import tvm
    from tvm import relax

    target = tvm.target.Target(spec)
    if database is not None:
        with target, database:
            mod = relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(mod)
            scheduled = _count_scheduled(mod)
            mod = _split_weight_packing(mod)
            mod = relax.transform.FoldConstant()(mod)  # packs the constant weights now, once
    else:
        scheduled = _count_scheduled(mod)
    return tvm.compile(mod, target=target), scheduled


def _count_scheduled(mod) -> dict:
    """How many of the module's kernels carry a tuned schedule (the rest run as naive loops)."""
    from tvm import tirx

    kernels = [f for _, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)]
    tuned = sum(1 for f in kernels if f.attrs and f.attrs.get("tirx.is_scheduled", False))
    return {"kernels": len(kernels), "kernels_tuned": tuned}


def _split_weight_packing(mod):
    """`SplitLayoutRewritePreproc`, sparing the kernels it cannot parse.

    The pass moves the weight-packing part of tuned kernels into functions of their own (which
    FoldConstant then evaluates), but it rejects every kernel whose body is not made of TIR
    blocks, such as `topk` (a packed call into the runtime's sort). Those kernels never pack
    weights, so they are set aside while it runs and put back after."""
    import tvm
    from tvm import relax, tirx

    split = relax.transform.SplitLayoutRewritePreproc()
    aside = {}
    for gv, func in mod.functions_items():
        if isinstance(func, tirx.PrimFunc):
            try:
                split(tvm.IRModule({gv: func}))
            except Exception:
                aside[gv] = func
    if aside:
        kept = {gv: func for gv, func in mod.functions_items() if gv not in aside}
        mod = tvm.IRModule(kept, attrs=mod.attrs)
    mod = split(mod)
    for gv, func in aside.items():
        mod[gv] = func
    return mod


# ---------------------------------------------------------------- tuning


class _Tuning:
    def __init__(
        self,
        database=None,
        trials: int = 0,
        tasks: int = 0,
        seconds: float = 0.0,
        reused: bool = False,
        scratch: str | None = None,
        borrowed: int = 0,
        estimates: dict | None = None,
        time_limited: bool = False,
    ):
        self.database, self.trials, self.tasks, self.seconds, self.reused = database, trials, tasks, seconds, reused
        self.time_limited = time_limited  # the time limit, not the trials, ended the search
        self.estimates = estimates or {}  # each build's ms as the race last estimated it (`_search`)
        self.borrowed = borrowed  # kernels whose schedules came from other models' records
        self._scratch = scratch

    def close(self) -> None:
        if self._scratch and not os.environ.get("AYCI_TVM_KEEP_LOGS"):  # debugging: keep MetaSchedule's logs
            shutil.rmtree(self._scratch, ignore_errors=True)


def _no_tuning() -> _Tuning:
    return _Tuning()


def _make_f_build():
    # Defined in a closure so cloudpickle ships it by value to TVM's builder processes (they
    # cannot import this project). Builds one candidate kernel; measuring needs no weight
    # packing, so the layout-rewrite blocks are dropped as the stock builder does.
    def f_build(mod, target, _params):
        import tvm
        from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

        mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
        return tvm.tirx.build(mod, target=target)

    return f_build


def _read_meta(directory: Path) -> dict:
    try:
        return json.loads((directory / TUNING_META).read_text())
    except (OSError, ValueError):
        return {}


def _extract_tasks(variants: dict, target) -> tuple[list, dict]:
    """The kernels to tune across every layout candidate, each once (the kernels the layouts
    share, such as a strided convolution or the classifier, are one task), weighted by the most
    calls any candidate makes; kernels already scheduled, or with nothing to schedule, are not tasks.
    Also `{variant: [(kernel, calls)]}`: what each build runs, to estimate it from the records."""
    from tvm.s_tir import meta_schedule as ms

    tasks: list = []
    uses: dict[str, list] = {variant: [] for variant in variants}
    for variant, mod in variants.items():
        for task in ms.relax_integration.extract_tasks(mod, target, module_equality=MODULE_EQUALITY):
            if (
                task.mod.attrs
                and task.mod.attrs.get("tirx.is_scheduled", False)
                or not _has_loops_to_schedule(task, target)
            ):
                continue
            uses[variant].append((task.mod, int(task.weight)))
            same = next((t for t in tasks if _same_kernel(t.mod, task.mod)), None)
            if same is None:
                tasks.append(task)
            elif int(task.weight) > int(same.weight):
                tasks[tasks.index(same)] = task
    return tasks, uses


def _same_kernel(one, other) -> bool:
    """Whether two tasks' modules are the same kernel (the same computation at the same shapes)."""
    import tvm_ffi

    return bool(tvm_ffi.structural_equal(one, other))


def _has_loops_to_schedule(task, target) -> bool:
    """Whether the task's kernel stores anything through TIR loops: MetaSchedule's cost model
    reads features of those stores. `topk`'s kernel is one call into the runtime's sort: no
    features, and XGBoost's prediction over a batch of such candidates fails ("Cannot cast array
    data from dtype('float64') to dtype('int64')"), which failed the detector's tuning once its
    budget reached `topk`."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    context = ms.TuneContext(mod=task.mod, target=target)
    candidate = ms.MeasureCandidate(tvm.s_tir.Schedule(task.mod), ms.arg_info.ArgInfo.from_prim_func(task.mod["main"]))
    return ms.feature_extractor.PerStoreFeature().extract_from(context, [candidate])[0].shape[0] > 0


def _tune(variants: dict, job: ConversionJob, tune_spec: dict) -> _Tuning:
    import tvm

    started = time.perf_counter()
    _register_cpu_tensor_intrinsics_only()
    scratch = tempfile.mkdtemp(prefix="ayci-tvm-tune-")
    records_dir = Path(job.tuning_dir) if job.tuning_dir else Path(scratch) / "records"
    records_dir.mkdir(parents=True, exist_ok=True)
    target = tvm.target.Target(tune_spec)

    meta = _read_meta(records_dir)
    same_target = meta.get("target") == tune_spec
    if not same_target:  # records of another target: searched again from nothing
        for stale in records_dir.glob("database_*.json"):
            stale.unlink()
    have = int(meta.get("trials", 0)) if same_target else 0
    # a search the time limit cut still answered the trials it was asked for: not searched again for them
    asked = max(have, int(meta.get("trials_asked", 0))) if same_target else 0
    record_file = records_dir / "database_tuning_record.json"
    database = _open_records(records_dir)
    if database is None:  # stored records TVM cannot read back: searched again from nothing
        job.progress("tvm: the stored tuning records do not load; searching again")
        for unreadable in [*records_dir.glob("database_*.json"), records_dir / TUNING_META]:
            unreadable.unlink(missing_ok=True)
        have, asked, database = 0, 0, _open_records(records_dir)
    extracted, uses = _extract_tasks(variants, target)
    budget, tasks_before, borrowed = job.tuning_trials - have, 0, []
    if asked >= job.tuning_trials and record_file.exists() and record_file.stat().st_size > 0:
        tasks_before = int(meta.get("tasks", len(extracted)))
        # A kernel the records lack was not there when they were tuned (another TVM, another
        # lowering) only if that search could cover every kernel: a smaller budget leaves the
        # cheapest kernels out on purpose (`_search`).
        covered_all = have // MIN_TRIALS_PER_TASK >= len(extracted)
        missing = [task for task in extracted if not database.has_workload(task.mod)] if covered_all else []
        if not missing:
            job.progress(f"tvm: applying stored tuning records ({have} trials, {tasks_before} tasks)")
            return _Tuning(
                database,
                trials=have,
                tasks=tasks_before,
                seconds=time.perf_counter() - started,
                reused=True,
                scratch=scratch,
            )
        # The kernels the records lack are searched, as deeply as the others were.
        job.progress(f"tvm: the stored tuning records lack {len(missing)} of {len(extracted)} kernels; searching those")
        extracted, budget = (
            missing,
            max(MIN_TRIALS_PER_TASK * len(missing), have * len(missing) // max(1, tasks_before)),
        )
    else:
        borrowed = _borrow_schedules(database, extracted, job, tune_spec)
        extracted = [task for task in extracted if task not in borrowed]
        if borrowed:
            job.progress(
                f"tvm: {len(borrowed)} of {len(borrowed) + len(extracted)} kernels take schedules tuned for other models"
            )
        if not extracted:
            return _Tuning(
                database,
                trials=have,
                tasks=0,
                borrowed=len(borrowed),
                seconds=time.perf_counter() - started,
                scratch=scratch,
            )

    try:
        records = _Records(database, records_dir, have=have, asked=asked, tasks=tasks_before)
        return _search(job, records, extracted, uses, budget, scratch, tune_spec, started, len(borrowed))
    except Exception as exc:
        shutil.rmtree(scratch, ignore_errors=True)
        raise ConversionError(f"TVM tuning failed: {_first_line(exc)}") from exc


def _open_records(folder: Path):
    """MetaSchedule's JSON database in `folder`, or None when its files do not load."""
    from tvm.s_tir import meta_schedule as ms

    try:
        return ms.database.JSONDatabase(work_dir=str(folder), module_equality=MODULE_EQUALITY)
    except Exception:
        return None


def _borrow_schedules(database, tasks: list, job: ConversionJob, tune_spec: dict) -> list:
    """The tasks another model's records already hold a schedule for, searched at least as deeply
    as this conversion would (its trials per task >= this budget's): their best records are
    copied into `database`, and the search skips them (kernels share a workload when their
    computation, shapes and fused operators are the same: ResNet-18 and ResNet-34 share most).
    Records of another tuning target are not read."""
    from tvm.s_tir import meta_schedule as ms

    depth = job.tuning_trials / max(1, len(tasks))
    borrowed: list = []
    for folder in job.shared_tuning_dirs:
        meta = _read_meta(Path(folder))
        if meta.get("target") != tune_spec:
            continue
        if int(meta.get("trials", 0)) / max(1, int(meta.get("tasks", 1))) < depth:
            continue
        other = _open_records(Path(folder))
        if other is None:  # another model's records that do not load: not shared
            continue
        for task in tasks:
            if task in borrowed or not other.has_workload(task.mod):
                continue
            best = other.get_top_k(other.commit_workload(task.mod), 8)
            if not best:
                continue
            workload = database.commit_workload(task.mod)
            for record in best:
                database.commit_tuning_record(
                    ms.database.TuningRecord(record.trace, workload, record.run_secs, record.target, record.args_info)
                )
            borrowed.append(task)
    return borrowed


@dataclass
class _Records:
    """The tuning records a search adds to: MetaSchedule's database in `folder`, and what its
    meta (TUNING_META) said before: trials measured, trials asked for, tasks searched."""

    database: object
    folder: Path
    have: int = 0
    asked: int = 0
    tasks: int = 0

    def write_meta(self, tune_spec: dict, measured: int, asked: int, tasks: int) -> None:
        meta = {
            "target": tune_spec,
            "trials": self.have + measured,
            "trials_asked": max(self.asked, self.have + asked),
            "tasks": self.tasks + tasks,
        }
        (self.folder / TUNING_META).write_text(json.dumps(meta))


class _TimeLimit:
    """The end of a search: `seconds` after `started` (perf_counter; None: no end). A batch of
    trials is started only if it would end before then at the pace so far (seconds per trial
    started since the first batch: evolving, building and measuring a batch all scale with its
    size), so the search ends at the limit rather than a batch past it."""

    def __init__(self, seconds: float | None, started: float) -> None:
        self.at = None if seconds is None else started + seconds
        self.first_batch: float | None = None
        self.started_trials = 0
        self.reached = False

    def allows(self, trials: int) -> bool:
        if self.at is None:
            return True
        now = time.perf_counter()
        pace = (
            (now - self.first_batch) / self.started_trials
            if self.first_batch is not None and self.started_trials
            else 0.0
        )
        if now + pace * trials > self.at:
            self.reached = True
        return not self.reached

    def starting_batch(self) -> None:
        """A batch is being evolved: the pace is counted from the first one's start."""
        if self.first_batch is None:
            self.first_batch = time.perf_counter()

    def started_batch(self, trials: int) -> None:
        self.starting_batch()
        self.started_trials += trials


def _time_limited(strategy, limit: _TimeLimit):
    """`strategy` (a MetaSchedule search strategy) that yields no more candidates once `limit`
    does not allow its next batch: the task scheduler then ends each task as it comes round,
    joining the batches still being measured, so their records are kept.

    It also ends a task whose batch comes back empty (every schedule its search finds is
    measured already: an elementwise or gather kernel has one or two). The task scheduler would
    otherwise ask again until the task's trials were spent, and never get any: on the detector
    it asked 109 times, for about a minute of the 15."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy

    @derived_object
    class TimeLimited(PySearchStrategy):
        def __init__(self, inner) -> None:
            super().__init__()
            self.inner, self.batch = inner, 1

        def _initialize_with_tune_context(self, context) -> None:
            self.inner._initialize_with_tune_context(context)

        def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None) -> None:
            self.batch = num_trials_per_iter
            self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)

        def post_tuning(self) -> None:
            self.inner.post_tuning()

        def generate_measure_candidates(self):
            if not limit.allows(self.batch):
                return None
            limit.starting_batch()
            candidates = self.inner.generate_measure_candidates()
            if not candidates:  # None: the task's trials are spent; empty: its search space is
                return None
            limit.started_batch(len(candidates))
            return candidates

        def notify_runner_results(self, measure_candidates, results) -> None:
            self.inner.notify_runner_results(measure_candidates, results)

        def clone(self):
            return TimeLimited(self.inner.clone())

    return TimeLimited(strategy)


def _search(job, records: _Records, extracted, uses, budget, scratch, tune_spec, started, borrowed: int) -> _Tuning:
    """Run MetaSchedule on `extracted` with `budget` trials, ending early at
    `job.tuning_time_limit_s` after `started` (`_TimeLimit`); records go to `records`, whose
    meta then counts the trials measured and the trials asked for.

    With one build, one search. With several (`nhwc` and `nhwc-winograd`), a race: a first
    round over the tasks of every build; then, in chunks of a quarter of the budget, each build's
    time is estimated from the records (its kernels' best times x calls, `_kernel_costs`), a
    build more than RACE_MARGIN behind the best stops being tuned, and the chunk goes to the
    kernels that matter of the builds still in; once one is left, the rest of the budget goes
    to it. Measured on ResNet-18 b1 at 600 trials: one search over both builds spent 260 of its
    trials on direct 3x3 convolutions that the shipped Winograd build does not run; and deciding
    after the first round alone picked the wrong build in one search of four (estimated 44.6 ms
    direct against 49.0 Winograd; the direct build then ran 1.15x behind ONNX Runtime, where
    Winograd builds ran 0.88-0.95), so a build close behind stays in the race."""
    from tvm.s_tir import meta_schedule as ms

    # The heaviest kernels first, as many as the budget tunes at MIN_TRIALS_PER_TASK each: the
    # gradient scheduler's first pass gives every task one round in order, so a task after the
    # budget ran out would stay naive loops, and a big convolution left so costs far more than
    # an elementwise kernel left so.
    extracted.sort(key=_task_cost, reverse=True)
    every_task = len(extracted)
    # The rounds are sized for the trials the time limit fits at TRIAL_PACE_S (when the budget
    # asks more): a first round sized for a budget the limit cuts would end before it reached
    # the last kernels, and they would stay naive loops. The search goes on past it while the
    # limit allows.
    planned = (
        budget if job.tuning_time_limit_s is None else max(1, min(budget, int(job.tuning_time_limit_s / TRIAL_PACE_S)))
    )
    extracted = extracted[: max(1, min(len(extracted), planned // MIN_TRIALS_PER_TASK))]
    # Half the budget goes to a first round over every task, the other half to the rounds the
    # gradient scheduler gives the tasks that still cost the most (a convolution gains from 100+
    # trials, an elementwise kernel is done in a dozen).
    per_round = max(4, min(32, planned // len(extracted) // 2))
    measured = [0]
    limit = _TimeLimit(job.tuning_time_limit_s, started)
    # The stock evolutionary search evolves 512 schedules for 4 generations before every round;
    # with a few trials per round that search, not measuring, took 80-90% of the time here.
    strategy = _time_limited(
        ms.search_strategy.EvolutionarySearch(population_size=128, init_min_unmeasured=32, genetic_num_iters=2), limit
    )
    contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
        extracted, work_dir=scratch, strategy=strategy, num_threads=host_num_cores(), seed=0
    )
    cores = host_num_cores()
    # One cost model for every stage: each starts with what the ones before measured.
    cost_model = ms.cost_model.CostModel.create("xgb", num_tuning_cores=cores, tree_method="auto")
    progress = _progress_callback(job, budget, records.have, measured)

    def run(chosen: list[int], trials: int, trials_per_round: int, trials_per_task: int | None = None) -> None:
        ms.tune.tune_tasks(
            tasks=[contexts[i] for i in chosen],
            task_weights=[weights[i] for i in chosen],
            work_dir=scratch,
            max_trials_global=trials,
            max_trials_per_task=trials_per_task or max(trials_per_round, trials // len(chosen) * 4),
            num_trials_per_iter=trials_per_round,
            builder=ms.builder.LocalBuilder(f_build=_make_f_build(), max_workers=cores, timeout_sec=120),
            runner=ms.runner.LocalRunner(
                timeout_sec=60, evaluator_config=ms.runner.EvaluatorConfig(number=3, repeat=1, min_repeat_ms=50)
            ),
            database=records.database,
            cost_model=cost_model,
            measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), progress],
            module_equality=MODULE_EQUALITY,
        )

    everything = list(range(len(contexts)))
    within = "" if job.tuning_time_limit_s is None else f" or {job.tuning_time_limit_s:.0f} s, whichever comes first"
    first_round = per_round * len(contexts)
    estimates: dict[str, float] = {}
    # Builds are raced only when the first round reaches every kernel (none left out of the
    # budget): a build is estimated from all of its kernels or not at all.
    if len(uses) < 2 or len(extracted) < every_task or planned - first_round < per_round:
        job.progress(f"tvm: tuning {len(contexts)} tasks, {budget} trials{within} ({per_round} per round)")
        run(everything, budget, per_round)
    else:
        job.progress(
            f"tvm: tuning {len(contexts)} tasks of the builds {', '.join(uses)}, {budget} trials{within}: "
            f"a first round of {first_round} trials ({per_round} each)"
        )
        # One round each and no more (a task whose search space is small yields fewer candidates,
        # and the scheduler would give what they leave to the next rounds of the others).
        run(everything, first_round, per_round, trials_per_task=per_round)
        racing, kernels = list(uses), [task.mod for task in extracted]
        while (rest := budget - measured[0]) >= 4 and limit.allows(4):
            alike = _run_alike(uses, racing)
            costs = {
                variant: c
                for variant in racing
                if (c := _kernel_costs(records.database, uses[variant], alike)) is not None
            }
            if not costs:  # a kernel of every build has no record and they differ in it
                run(everything, rest, max(4, min(32, rest // len(everything) // 2)))
                break
            estimates = {variant: 1000 * sum(cost for _, cost in c) for variant, c in costs.items()}
            best = min(estimates.values())
            racing = [variant for variant, value in estimates.items() if value <= best * (1 + RACE_MARGIN)]
            focus = sorted({i for variant in racing for i in _kernels_that_matter(costs[variant], kernels)})
            chunk = rest if len(racing) == 1 else min(rest, max(planned // 4, 4 * len(focus)))
            job.progress(
                f"tvm: estimated {', '.join(f'{k} {v:.1f} ms' for k, v in estimates.items())}; "
                f"{chunk} trials go to the {len(focus)} kernels that matter of {', '.join(racing)}"
            )
            before = measured[0]
            run(focus, chunk, max(4, min(32, chunk // len(focus) // 2)))
            if measured[0] == before:  # every task's search space is spent
                break
    if limit.reached:
        job.progress(
            f"tvm: the tuning time limit ({job.tuning_time_limit_s:.0f} s) ended the search after "
            f"{records.have + measured[0]} of {records.have + budget} trials"
        )
    records.write_meta(tune_spec, measured[0], budget, len(contexts))
    return _Tuning(
        records.database,
        trials=records.have + measured[0],
        tasks=len(contexts),
        borrowed=borrowed,
        seconds=time.perf_counter() - started,
        scratch=scratch,
        estimates=estimates,
        time_limited=limit.reached,
    )


def _best_s(database, kernel) -> float | None:
    """The best time the records hold for `kernel` (a task's module), None if none."""
    if not database.has_workload(kernel):
        return None
    best = database.get_top_k(database.commit_workload(kernel), 1)
    return float(np.mean([float(s) for s in best[0].run_secs])) if best else None


def _kernel_costs(database, kernels: list, alike: list = ()) -> list | None:
    """A build's kernels (`kernels`: [(kernel, calls)]) each with its best recorded time x its
    calls, in seconds (their sum estimates the build); None when the records lack one of them
    (a guess for it would decide the estimate), unless it is one of `alike` (`_run_alike`): it
    adds the same to every build raced, so leaving it out of each estimate keeps their order.
    After a first round that reached every kernel, a kernel without a record is one whose every
    candidate failed to run, such as the detector's gathers and takes (they index with an input,
    which MetaSchedule fills at random); it stays untuned whatever the race gives it."""
    costs = []
    for kernel, calls in kernels:
        seconds = _best_s(database, kernel)
        if seconds is None:
            if _runs_as_often(alike, kernel, calls):
                continue
            return None
        costs.append((kernel, calls * seconds))
    return costs


def _run_alike(uses: dict, builds: list) -> list:
    """The kernels (`[(kernel, calls)]`) every one of `builds` runs, as often (`uses`: `_extract_tasks`)."""
    first, *others = builds
    return [
        (kernel, calls)
        for kernel, calls in uses[first]
        if all(_runs_as_often(uses[build], kernel, calls) for build in others)
    ]


def _runs_as_often(kernels: list, kernel, calls: int) -> bool:
    """Whether `kernels` (`[(kernel, calls)]`) has `kernel`, called `calls` times."""
    return any(times == calls and _same_kernel(kernel, other) for other, times in kernels)


def _kernels_that_matter(costs: list, tasks: list) -> list[int]:
    """Indexes into `tasks` of a build's kernels (`costs`: [(kernel, seconds)], `_kernel_costs`)
    that take at least 1% of its estimated time: the rest are done (an elementwise kernel takes
    0.01-0.1 ms of ResNet-18's 20+) and further trials would not show."""
    total = sum(cost for _, cost in costs) or 1.0
    chosen = [
        i
        for i, task in enumerate(tasks)
        if any(cost >= 0.01 * total and _same_kernel(task, kernel) for kernel, cost in costs)
    ]
    return chosen or list(range(len(tasks)))


def _register_cpu_tensor_intrinsics_only() -> None:
    """Import the x86 and arm tensor intrinsics without the GPU ones.

    MetaSchedule's TuneContext imports the package `tvm.s_tir.tensor_intrin`, whose `__init__`
    parses ~500 TVMScript kernels, most of them CUDA/ROCm/Hexagon: 20 s on an idle 2-core machine,
    70-180 s under load, before the first trial. CPU schedule rules need only the x86 and arm
    intrinsics (1 s). The package is registered empty, so its other submodules stay importable."""
    import importlib
    import types

    name = "tvm.s_tir.tensor_intrin"
    if name in sys.modules:
        return
    import tvm.s_tir

    package = types.ModuleType(name)
    package.__path__ = [str(Path(tvm.s_tir.__file__).parent / "tensor_intrin")]
    package.__package__ = name
    sys.modules[name] = package
    tvm.s_tir.tensor_intrin = package
    for submodule in ("x86", "arm_cpu"):
        setattr(package, submodule, importlib.import_module(f"{name}.{submodule}"))


def _task_cost(task) -> float:
    """FLOPs of one extracted task times how often the model calls it."""
    from tvm.s_tir.analysis import estimate_tir_flops

    try:
        return float(estimate_tir_flops(task.dispatched[0])) * int(task.weight)
    except Exception:
        return 0.0


def _progress_callback(job: ConversionJob, budget: int, already: int, measured: list[int]):
    """Reports the trials done (at most every 5 s) and counts them in `measured[0]`."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    @derived_object
    class ReportProgress(PyMeasureCallback):
        def __init__(self) -> None:
            super().__init__()
            self.last = 0.0

        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
            measured[0] += len(measure_candidates)
            now = time.monotonic()
            if now - self.last > 5 or measured[0] >= budget:
                self.last = now
                job.progress(f"tvm: tuned {already + measured[0]}/{already + budget} trials")

    return ReportProgress()


# ---------------------------------------------------------------- runtime


def _import_runtime():
    """TVM's runtime only: no compiler, and no torch (tvm_ffi imports torch when it can)."""
    if "tvm" in sys.modules and "tvm.relax" in sys.modules:
        import tvm

        return tvm
    os.environ.setdefault("TVM_USE_RUNTIME_LIB", "1")
    blocked = "torch" not in sys.modules
    if blocked:
        sys.modules["torch"] = None  # type: ignore[assignment]  # ImportError for `import torch`
    try:
        import tvm
        import tvm.runtime.vm
    finally:
        if blocked:
            del sys.modules["torch"]
    _load_runtime_extra()
    return tvm


def _load_runtime_extra() -> None:
    """The runtime's contrib functions (`tvm.contrib.sort.topk`, which a detector's NMS calls)
    live in `libtvm_runtime_extra`, which `import tvm` loads only with the compiler: without it
    a runtime-only process failed the detector's first inference ("Cannot find function
    tvm.contrib.sort.topk"). Loaded as TVM's own backend autoload does."""
    from tvm.base import _LOADED_LIBS
    from tvm_ffi.libinfo import load_lib_ctypes

    if "tvm_runtime_extra" in _LOADED_LIBS:
        return
    runtime_dir = Path(_LOADED_LIBS["tvm_runtime"]._name).resolve().parent
    try:
        _LOADED_LIBS["tvm_runtime_extra"] = load_lib_ctypes(
            package="tvm", target_name="tvm_runtime_extra", extra_lib_paths=[runtime_dir], mode="RTLD_LOCAL"
        )
    except (OSError, RuntimeError):  # a TVM without it: only models that call its functions fail, naming the function
        pass


def import_runtime(path: Path) -> None:
    _import_runtime()


def _load_vm(path: Path, threads: int):
    """TVM's runtime, the Relax VM of `model.so` and its device."""
    # Read when TVM's thread pool starts (the first parallel kernel of the process): a measuring
    # process loads one model, so this is its thread count. (runtime.config_threadpool could
    # resize a running pool, but it also pins threads to cores, which a confined child must not.)
    os.environ["TVM_NUM_THREADS"] = str(threads)
    tvm = _import_runtime()
    executable = tvm.runtime.load_module(str(path))
    device = tvm.cpu()
    return tvm, tvm.runtime.vm.VirtualMachine(executable, device), device


def _runner(tvm, vm, device):
    main = vm["main"]

    def run(inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        args = [tvm.runtime.tensor(np.ascontiguousarray(value), device) for value in inputs.values()]
        return _flatten(main(*args))

    return run


def load(path: Path, threads: int):
    """A runner for `model.so`: named numpy inputs (in the workload's input order) -> outputs."""
    return _runner(*_load_vm(path, threads))


def profile(
    path: Path, threads: int, inputs: dict[str, np.ndarray], runs: int, work: Path, settings: dict | None = None
):
    """`runs` inferences with the Relax VM's instrument hook timing every call it makes (fused
    kernels and the VM's builtins: allocation, copies, shape checks): a Chrome trace and one
    `(name, op_type, ms)` per call; and each profiled inference's wall time (ms). (TVM 0.2x's VM has no `profile()`; its instrument is how a
    Relax VM is profiled now.) The hook is a Python call around every kernel: the bench measures
    what that costs (`bench/bench_profile.py`)."""
    import time

    tvm, vm, device = _load_vm(path, threads)
    run = _runner(tvm, vm, device)
    run(inputs)  # the first call sets things up: not profiled
    events: list[dict] = []
    started: list[float] = []
    origin = time.perf_counter()

    def instrument(func, symbol, before_run, ret_value, *args):
        now = time.perf_counter()
        if before_run:
            started.append(now)
        elif started:
            begin = started.pop()
            events.append(
                {
                    "name": str(symbol),
                    "cat": "tvm",
                    "ph": "X",
                    "pid": 0,
                    "tid": 0,
                    "ts": (begin - origin) * 1e6,
                    "dur": (now - begin) * 1e6,
                }
            )
        return 0  # VMInstrumentReturnKind.NO_OP: run the call as usual

    vm.set_instrument(instrument)
    run_ms = [timed_ms(run, inputs) for _ in range(runs)]
    calls = [(event["name"], _kernel_type(event["name"]), event["dur"] / 1000) for event in events]
    return (
        {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"profiler": "tvm relax vm instrument"}},
        calls,
        run_ms,
    )


def _kernel_type(symbol: str) -> str:
    """A fused kernel's operator type: its name without `fused_` and the numbers TVM appends to
    each part (`fused_conv2d1_add2_relu11` -> `conv2d_add_relu`); a VM builtin keeps its name."""
    import re

    return "_".join(re.sub(r"(?<=\D)\d+$", "", part) for part in symbol.removeprefix("fused_").split("_")) or symbol


def _flatten(value) -> list[np.ndarray]:
    if hasattr(value, "numpy"):
        return [value.numpy()]
    out: list[np.ndarray] = []
    for item in value:
        out.extend(_flatten(item))
    return out
