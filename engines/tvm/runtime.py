"""Running a built `model.so`: TVM's runtime alone (no compiler, no torch) and the Relax VM.

`load` imports only TVM's runtime (`TVM_USE_RUNTIME_LIB=1`, torch kept out: ~1.4 s, ~95 MB);
inputs are passed in the order of the dict (the workload's `INPUT_NAMES` order), outputs come
back flattened in the model's output order. `profile` times every call the VM makes.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import numpy as np

from engines import timed_ms


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
    # a TVM without it: only models that call its functions fail, naming the function
    with contextlib.suppress(OSError, RuntimeError):
        _LOADED_LIBS["tvm_runtime_extra"] = load_lib_ctypes(
            package="tvm", target_name="tvm_runtime_extra", extra_lib_paths=[runtime_dir], mode="RTLD_LOCAL"
        )


def import_runtime(path: Path) -> None:
    """TVM's runtime, and nothing else: what running `model.so` needs (timed as the cold start's imports)."""
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
    `(name, op_type, ms)` per call; and each profiled inference's wall time (ms). (TVM 0.2x's VM
    has no `profile()`; its instrument is how a Relax VM is profiled now.) The hook is a Python
    call around every kernel: the bench measures what that costs (`bench/bench_profile.py`)."""
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
