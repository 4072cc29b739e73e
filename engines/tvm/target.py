"""The TVM targets a conversion compiles for and tunes under.

intel compiles for this host's exact CPU (LLVM's name for it, part of the artifact key). arm is
cross-compiled for aarch64 (`aarch64-linux-gnu-gcc`); its kernels are tuned on the x86 host
under a 128-bit-vector proxy target (`ARM_PROXY_CPU`, 4 floats a vector like NEON), because no
aarch64 CPU here times like the real core (docs/tvm.md says why).
"""

from __future__ import annotations

import os
import shutil

from engines import ConversionError

DEFAULT_ARM_CPU = "neoverse-n1"  # Graviton2
ARM_TRIPLE = "aarch64-linux-gnu"
ARM_CC = "aarch64-linux-gnu-gcc"
# The x86 target arm kernels are tuned on: 128-bit vectors like NEON.
ARM_PROXY_CPU = "x86-64-v2"


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
        raise ConversionError("an intel TVM conversion needs job.target_cpu (engines.tvm.host_cpu_name())")
    return {"kind": "llvm", "mcpu": target_cpu, "num-cores": cores}


def tuning_target_spec(hardware: str, target_cpu: str | None, num_cores: int | None = None) -> dict:
    """The target candidates are measured under: the real one for intel, the 128-bit proxy for arm."""
    if str(hardware) == "arm":
        return {"kind": "llvm", "mcpu": ARM_PROXY_CPU, "num-cores": num_cores or host_num_cores()}
    return target_spec(hardware, target_cpu, num_cores)


def check_arm_toolchain() -> None:
    """Raises ConversionError (saying how to install it) when the aarch64 cross-compiler is missing."""
    if shutil.which(ARM_CC) is None:
        raise ConversionError(
            f"{ARM_CC} is not installed: arm TVM artifacts are cross-compiled "
            "(apt-get install -y gcc-aarch64-linux-gnu libc6-dev-arm64-cross, or scripts/arm-sysroot.sh)"
        )
