"""The model's builds and the one shipped: lowering to TIR kernels, compiling with the tuned schedules.

A model with convolutions is lowered NHWC (channels innermost), computed directly (`nhwc`) and,
when it has 3x3 stride-1 convolutions and is tuned, also with Winograd F(4x4, 3x3)
(`nhwc-winograd`, `engines.tvm.winograd`). Convolutions are kept apart from the operators after
them, so each convolution shape is one tuning task in every layout. When several builds are
candidates, each is compiled with its tuned kernels and timed on this host, and the faster is
shipped. Weights are layout-free: the packing tuned kernels ask for is folded into the constants
at compile time.
"""

from __future__ import annotations

import time

import numpy as np

from engines import ConversionError, ConversionJob
from engines.tvm.importer import unsupported_ops
from schemas.reasons import whole

NO_CONVOLUTIONS = "no convolutions"  # the build of a model without any (no layout to choose)


def prepare(mod, spec: dict, measured: bool) -> dict:
    """The model lowered in each layout worth measuring: `{layout: module tuning sees}`.

    Convolutions go NHWC (channels innermost, so they vectorize over channels; measured on
    ResNet-18 b1, 2 cores: NHWC 12.8 ms after 500 trials and 12.3 ms after 1500, where NCHW gave
    15.7 ms after 2000), computed directly (`nhwc`) or, for 3x3 stride-1 convolutions, with
    Winograd F(4x4, 3x3) (`nhwc-winograd`, `engines.tvm.winograd`); both are tuned and the faster
    compiled model is kept (`choose_variant`); untuned (`measured` False), kernels are naive loops
    whatever the layout, so only `nhwc` is built. A model TVM's layout conversion cannot handle
    stays `nchw` (the example detector's post-processing did, until `_squeeze_axes_nonnegative`
    worked around the conversion's failure on it). Channel-blocked layouts
    (NCHWc) are not candidates: Relax's convolution legalization rejects them."""
    if not _has_convolutions(mod):
        try:
            return {NO_CONVOLUTIONS: lower(mod, spec, nhwc=False, winograd=False)}
        except Exception as exc:
            raise ConversionError(f"TVM cannot lower the model: {unsupported_ops(exc)}") from exc
    try:
        variants = {"nhwc": lower(mod, spec, nhwc=True, winograd=False)}
    except Exception:
        try:
            return {"nchw": lower(mod, spec, nhwc=False, winograd=False)}
        except Exception as exc:
            raise ConversionError(f"TVM cannot lower the model: {unsupported_ops(exc)}") from exc
    if not measured:
        return variants
    winograd = lower(mod, spec, nhwc=True, winograd=True)
    if winograd_kernels(winograd):
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


def winograd_kernels(mod) -> int:
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


def lower(mod, spec: dict, *, nhwc: bool, winograd: bool):
    import tvm
    from tvm import relax

    from engines.tvm import vector_math
    from engines.tvm.winograd import legalize_conv2d

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
        **vector_math.legalize_map(),
        **({"relax.nn.conv2d": legalize_conv2d} if winograd else {}),
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


def choose_variant(variants: dict, spec: dict, tune_spec: dict, database, examples: dict, job: ConversionJob):
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
            failures[variant] = whole(exc)
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
