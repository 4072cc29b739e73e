"""Where a measurement ran: the host (CPU model and flags, cores, kernel, cgroup version) as
the worker sees it, and AYCI's version. The measuring process adds its own Python, machine and
engine library versions (`measure.py`), which for emulated arm are the aarch64 root's."""

from __future__ import annotations

import functools
import platform
from pathlib import Path

from measuring.machine_load import host_cores
from schemas.versions import AYCI_VERSION

# flags that decide which kernels an engine can use (vector widths, dot products, matrix units)
RELEVANT_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "asimddp",
    "sve",
    "sve2",
    "bf16",
    "i8mm",
)


@functools.cache
def _cpu() -> tuple[str, list[str]]:
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "Hardware", "CPU part") and model in (
                "",
                platform.machine(),
                platform.processor(),
            ):
                model = value.strip()
            elif key in ("flags", "Features"):
                flags |= set(value.split())
    except OSError:
        pass
    return model, sorted(f for f in flags if f in RELEVANT_FLAGS)


def _cgroup_version() -> str:
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():
        return "v2"
    return "v1" if Path("/sys/fs/cgroup/cpu").exists() else "none"


def host_environment() -> dict:
    model, flags = _cpu()
    return {
        "cpu_model": model,
        "cpu_flags": flags,
        "host_cores": host_cores(),
        "kernel": platform.release(),
        "cgroup": _cgroup_version(),
        "ayci_version": AYCI_VERSION,
    }
