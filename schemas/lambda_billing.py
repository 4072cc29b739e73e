"""How Lambda bills what is not a request's duration: provisioned concurrency's steps, SnapStart's
cache, restores and billed restore duration, and ephemeral storage above the free 512 MB.

The rules and prices live beside the duration prices, in the `billing` block of the price file
(`data/lambda_prices.json`, or the file `AYCI_LAMBDA_PRICES` names), each with its source and
date; a price file without the block gets the rules below (AWS's, as of that date) and no
ephemeral storage price.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from schemas.cost import prices_path


class BillingRules(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")
    date: str = ""
    source: str = ""
    provisioned_step_s: float = Field(default=300, gt=0)  # billed from enabling to disabling, rounded up to 5 minutes
    snapstart_cache_minimum_s: float = Field(default=3 * 3600, ge=0)  # the cache is billed for at least 3 hours
    free_ephemeral_storage_mb: int = 512
    # SnapStart's restored cold start: the snapshot's restore (latency, not billed), then the runtime's
    # load and the after-restore hooks (the Billed Restore Duration, billed as duration)
    snapstart_restore_latency_ms: float = Field(default=400, ge=0)
    snapstart_restore_latency_source: str = ""
    snapstart_runtime_load_ms: float = Field(default=100, ge=0)
    snapstart_runtime_load_source: str = ""
    snapstart_after_restore_hooks_ms: float = Field(default=1, ge=0)
    snapstart_after_restore_hooks_source: str = ""
    ephemeral_storage_per_gb_second_usd: dict[str, float] = Field(default_factory=dict)

    @property
    def snapstart_billed_restore_ms(self) -> float:
        """The Billed Restore Duration of one restore: the runtime's load plus the after-restore hooks."""
        return self.snapstart_runtime_load_ms + self.snapstart_after_restore_hooks_ms

    def provisioned_seconds(self, duration_s: float) -> float:
        """Provisioned concurrency kept `duration_s`, as billed: rounded up to the step (5 minutes)."""
        return math.ceil(duration_s / self.provisioned_step_s - 1e-9) * self.provisioned_step_s

    def snapstart_cache_seconds(self, duration_s: float) -> float:
        """SnapStart's cache for a version active `duration_s`, as billed: at least the minimum (3 hours)."""
        return max(duration_s, self.snapstart_cache_minimum_s)

    def ephemeral_price(self, region: str) -> float | None:
        return self.ephemeral_storage_per_gb_second_usd.get(region)

    def ephemeral_storage_usd(self, storage_mb: int, billed_s: float, region: str) -> float:
        """Ephemeral storage configured at `storage_mb` over `billed_s` of billed duration: only what is
        above the free 512 MB is priced (0 when the region has no price and nothing is above it)."""
        extra_gb = max(0, storage_mb - self.free_ephemeral_storage_mb) / 1024
        if not extra_gb:
            return 0.0
        price = self.ephemeral_price(region)
        if price is None:
            raise ValueError(f"no ephemeral storage price for {region} in the price file")
        return extra_gb * billed_s * price


def load_billing(path: Path | None = None) -> BillingRules:
    """The billing rules of the price file at `path` (default: the one `schemas.cost` reads)."""
    path = Path(path or prices_path())
    return _load(path, path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _load(path: Path, _mtime: int) -> BillingRules:
    return BillingRules.model_validate(json.loads(path.read_text()).get("billing") or {})
