"""Lambda's CPU rule: a function of `memory_mb` gets `memory_mb / 1,769` vCPUs, at most 6, as a CFS
quota. The measurement confines itself to that share (`measuring/confinement.py`), the prediction
models latency from it (`core/lambda_model/prediction.py`), and the run plan picks its anchor sizes
by it (`core/run_plan.py`).
"""

from __future__ import annotations

import math

MB_PER_VCPU = 1769  # 1 vCPU at 1,769 MB (AWS's documentation: "about 1 vCPU per 1,769 MB")
MAX_VCPUS = 6.0  # at most 6 vCPUs (10,240 MB gives 5.79)
# the CFS period of the quota: the kernel's default, which the measurement's cgroup uses and the
# prediction's simulation of a throttled thread assumes
CPU_PERIOD_US = 100_000


def lambda_vcpus(memory_mb: int) -> float:
    """The CPU share Lambda gives a function of `memory_mb`: 1 vCPU per 1,769 MB, at most 6."""
    return min(MAX_VCPUS, memory_mb / MB_PER_VCPU)


def lambda_threads(memory_mb: int) -> int:
    """The engine threads AYCI runs at `memory_mb` (`measuring/launcher.py`): whole vCPUs, at least one."""
    return max(1, math.floor(lambda_vcpus(memory_mb) + 1e-9))
