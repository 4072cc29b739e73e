"""The TVM targets a conversion compiles for and tunes under.

intel compiles for a CPU level every current Lambda x86_64 host runs (`PORTABLE_INTEL_CPU`,
x86-64-v3: AVX2 and FMA, no AVX-512; docs/lambda.md gives the evidence), or for this host's
exact CPU when asked (`HOST_CPU`, resolved to LLVM's name for it); the name is part of the
artifact key. arm compiles for Graviton2 (`neoverse-n1`), which every Graviton generation runs;
it is cross-compiled for aarch64 (`aarch64-linux-gnu-gcc`) and its kernels are tuned on the x86
host under a 128-bit-vector proxy target (`ARM_PROXY_CPU`, 4 floats a vector like NEON), because
no aarch64 CPU here times like the real core (docs/tvm.md says why).
"""

from __future__ import annotations

import os
import shutil

from engines import ConversionError

DEFAULT_ARM_CPU = "neoverse-n1"  # Graviton2: Graviton3 (neoverse-v1) and 4 (neoverse-v2) run its code
# AVX2, FMA, BMI2, F16C, no AVX-512: AWS documents AVX2 for Lambda x86_64 (and `-march=haswell`)
PORTABLE_INTEL_CPU = "x86-64-v3"
HOST_CPU = "host"  # asked for instead of a CPU name: this machine's exact CPU (not portable)
ARM_TRIPLE = "aarch64-linux-gnu"
ARM_CC = "aarch64-linux-gnu-gcc"
# The x86 target arm kernels are tuned on: 128-bit vectors like NEON.
ARM_PROXY_CPU = "x86-64-v2"


def host_cpu_name() -> str:
    """LLVM's name for this machine's CPU (e.g. `znver4`, `skylake-avx512`, `icelake-server`).

    What an intel artifact is compiled for when the host's CPU is asked for (`HOST_CPU`): its
    code may use instructions a Lambda host lacks (AVX-512 here). Imports TVM's compiler (a few
    seconds, once per process)."""
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
    cpu = target_cpu or PORTABLE_INTEL_CPU
    if cpu == HOST_CPU:
        cpu = host_cpu_name()
    return {"kind": "llvm", "mcpu": cpu, "num-cores": cores}


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
