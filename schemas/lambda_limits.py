"""Lambda's rules: its CPU rule, and the limits a deployment must fit.

The CPU rule: a function of `memory_mb` gets `memory_mb / 1,769` vCPUs, at most 6, as a CFS
quota. The measurement confines itself to that share (`measuring/confinement.py`), the prediction
models latency from it (`core/lambda_model/prediction.py`), and the run plan picks its anchor sizes
by it (`core/run_plan.py`).

The limits (`load_limits()`, from the dated `data/lambda_limits.json`, each with its source): the
6 MB synchronous payload, the 10 s init phase, 250 MB unzipped for a zip and 10 GB for an image,
ephemeral storage, SnapStart's conditions, the concurrency quota and scaling rate, and the
installed size of each engine's runtime. `core/lambda_rules.py` checks a combination against them.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

from pydantic import BaseModel, ConfigDict

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


DEFAULT_LIMITS_PATH = Path(__file__).resolve().parents[1] / "data" / "lambda_limits.json"


class _Sourced(BaseModel):
    model_config = ConfigDict(extra="allow")
    source: str = ""


class SyncPayload(_Sourced):
    request_bytes: int
    response_bytes: int


class InitPhase(_Sourced):
    value: float


class DeploymentLimits(_Sourced):
    zip_unzipped_bytes: int
    container_image_bytes: int


class EphemeralStorage(_Sourced):
    default: int
    max: int


class SnapStartRules(_Sourced):
    python_min: str
    max_ephemeral_storage_mb: int
    provisioned_concurrency: bool = False
    efs: bool = False
    container_images: bool = False


class Concurrency(_Sourced):
    account_default: int
    scaling_per_10_s: int


class RuntimeSize(BaseModel):
    model_config = ConfigDict(extra="allow")
    installed_mb: float
    distributions: str = ""


class LambdaLimits(BaseModel):
    model_config = ConfigDict(extra="allow")
    date: str
    sync_payload: SyncPayload
    init_phase_s: InitPhase
    deployment: DeploymentLimits
    ephemeral_storage_mb: EphemeralStorage
    snapstart: SnapStartRules
    concurrency: Concurrency
    runtimes: dict[str, RuntimeSize | str]

    def runtime_mb(self, runtime: str) -> float:
        size = self.runtimes[runtime]
        assert isinstance(size, RuntimeSize), runtime
        return size.installed_mb


@functools.cache
def load_limits(path: Path = DEFAULT_LIMITS_PATH) -> LambdaLimits:
    """Lambda's limits, read once from the dated data file."""
    return LambdaLimits.model_validate_json(Path(path).read_text())
