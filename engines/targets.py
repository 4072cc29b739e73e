"""What each engine builds for: the target CPU an artifact names, and this host's hardware.

TVM compiles for an exact CPU; `base` and `onnx` artifacts are portable within an
architecture. The host's CPU name is LLVM's (what TVM targets for `intel`); it is asked of
TVM in a child process, so no service process loads TVM's compiler to name a CPU.
"""

from __future__ import annotations

import functools
import platform
import subprocess
import sys

from engines.tvm.target import DEFAULT_ARM_CPU
from schemas.combos import Hardware, Optimizer


def target_cpu(
    hardware: Hardware, optimizer: Optimizer, *, intel_cpu: str | None = None, arm_cpu: str = DEFAULT_ARM_CPU
) -> str:
    """What an artifact of `optimizer` for `hardware` is built for (part of its key)."""
    if Optimizer(optimizer) != Optimizer.tvm:
        return "aarch64" if Hardware(hardware) == Hardware.arm else "x86_64"
    if Hardware(hardware) == Hardware.arm:
        return arm_cpu
    return intel_cpu or host_cpu_name()


@functools.cache
def host_cpu_name() -> str:
    """This machine's CPU as LLVM names it (e.g. `znver4`); the architecture if TVM is absent."""
    code = "import tvm; print(tvm.target.codegen.llvm_get_system_cpu())"
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
        name = done.stdout.strip().splitlines()[-1]
        if name:
            return name
    except (subprocess.SubprocessError, OSError, IndexError):
        pass
    return platform.machine()


def native_hardware() -> Hardware:
    """The hardware this machine measures natively."""
    return Hardware.arm if platform.machine() in ("aarch64", "arm64") else Hardware.intel
