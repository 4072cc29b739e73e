"""What each engine builds for: the target CPU an artifact names, and this host's hardware.

TVM compiles for a named CPU: by default a level every Lambda host of the architecture runs
(`x86-64-v3` for intel, `neoverse-n1` for arm: docs/lambda.md says why), the host's exact CPU
only when asked (`intel_cpu="host"`, AYCI_INTEL_CPU=host or `--target-cpu host`). `base` and
`onnx` artifacts are portable within an architecture. The host's CPU name is LLVM's; it is asked
of TVM in a child process, so no service process loads TVM's compiler to name a CPU.
"""

from __future__ import annotations

import functools
import platform
import subprocess
import sys

from engines.tvm.target import DEFAULT_ARM_CPU, HOST_CPU, PORTABLE_INTEL_CPU
from schemas.combos import Hardware, Optimizer


def target_cpu(
    hardware: Hardware, optimizer: Optimizer, *, intel_cpu: str | None = None, arm_cpu: str = DEFAULT_ARM_CPU
) -> str:
    """What an artifact of `optimizer` for `hardware` is built for (part of its key): for tvm the
    portable CPU level unless a CPU is named (`HOST_CPU`: this machine's, by LLVM's name)."""
    if Optimizer(optimizer) != Optimizer.tvm:
        return "aarch64" if Hardware(hardware) == Hardware.arm else "x86_64"
    if Hardware(hardware) == Hardware.arm:
        return host_cpu_name() if arm_cpu == HOST_CPU else arm_cpu
    if intel_cpu == HOST_CPU:
        return host_cpu_name()
    return intel_cpu or PORTABLE_INTEL_CPU


def is_portable(hardware: Hardware, target: str) -> bool:
    """Whether code built for `target` runs on every Lambda host of `hardware` (the default levels,
    and the architecture-wide targets of `base`/`onnx` artifacts)."""
    if Hardware(hardware) == Hardware.arm:
        return target in (DEFAULT_ARM_CPU, "aarch64")
    return target in (PORTABLE_INTEL_CPU, "x86-64", "x86-64-v2", "x86_64")


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
