"""How busy the machine was around a measurement, so a disturbed one can be seen and repeated.

`LoadSample.now()` before and after; `load_report(before, after, own_cpu_s, needed_cores, host_slowdown)`
gives the load averages, the CPU pressure (PSI, where the kernel has it) and the cores other work kept
busy while the measurement ran (all CPU time on the machine minus the measurement's own). It was
disturbed when other work used more than the cores the measurement left free (plus a margin):
work that only fills idle cores does not compete with it; or when the host itself ran slower than
its own reference (`host_speed.py`: a slowdown from outside the machine, which its CPU accounting
does not see).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from measuring.host_speed import SLOW_HOST_RATIO

DISTURBED_MARGIN_CORES = 0.25  # how far other work may reach into the cores a measurement needs


def host_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _busy_cpu_s() -> float | None:
    """CPU seconds spent not idle, summed over every core, since boot."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return None
    values = [int(v) for v in fields]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    busy = sum(values[:8]) - idle  # user nice system idle iowait irq softirq steal (guest is inside user)
    return busy / os.sysconf("SC_CLK_TCK")


def _cpu_pressure_avg10() -> float | None:
    """Share of the last 10 s in which some runnable task waited for a CPU (percent)."""
    try:
        for line in Path("/proc/pressure/cpu").read_text().splitlines():
            if line.startswith("some "):
                return float(dict(p.split("=") for p in line.split()[1:])["avg10"])
    except (OSError, ValueError, KeyError):
        pass
    return None


@dataclass(frozen=True)
class LoadSample:
    at: float
    loadavg_1m: float
    cpu_pressure_avg10: float | None
    busy_cpu_s: float | None

    @classmethod
    def now(cls) -> LoadSample:
        return cls(time.monotonic(), os.getloadavg()[0], _cpu_pressure_avg10(), _busy_cpu_s())


def load_report(
    before: LoadSample,
    after: LoadSample,
    own_cpu_s: float | None,
    needed_cores: float = 1.0,
    host_slowdown: float | None = None,
) -> dict:
    """The machine's load around one measurement that needed `needed_cores` (its CPU share,
    or its threads when unconfined), and how much slower than its reference the host ran around it
    (`host_speed.slowdown`; None: not probed, or no reference yet); see the module docstring."""
    elapsed = max(1e-6, after.at - before.at)
    other = None
    if before.busy_cpu_s is not None and after.busy_cpu_s is not None and own_cpu_s is not None:
        other = max(0.0, (after.busy_cpu_s - before.busy_cpu_s - own_cpu_s) / elapsed)
    cores = host_cores()
    limit = cores - min(needed_cores, cores) + DISTURBED_MARGIN_CORES  # the free cores, and the margin
    return {
        "host_cores": cores,
        "loadavg_1m_before": before.loadavg_1m,
        "loadavg_1m_after": after.loadavg_1m,
        "cpu_pressure_avg10_before": before.cpu_pressure_avg10,
        "cpu_pressure_avg10_after": after.cpu_pressure_avg10,
        "other_busy_cores": other,  # average cores busy with other work during the measurement
        "other_work_limit_cores": limit,
        "host_slowdown": host_slowdown,
        "disturbed": (other is not None and other > limit)
        or (host_slowdown is not None and host_slowdown > SLOW_HOST_RATIO),
    }
