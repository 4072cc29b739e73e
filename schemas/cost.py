"""What a request costs on Lambda: the price table and the one cost formula.

Prices live in one data file with their region and date (`data/lambda_prices.json`); the
environment variable `AYCI_LAMBDA_PRICES` names another file of the same shape to use
instead. A request is billed its duration rounded up to 1 ms x its memory in GB x the price
per GB-second of its architecture, plus the price per request. A request carries a whole
batch, so an inference costs a request's cost divided by the batch size.

It is part of the contract because a request's `price_region` is validated against it and
every result's `cost` block means what `cost_block` computes.
"""

from __future__ import annotations

import functools
import json
import math
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from schemas.combos import Hardware
from schemas.flexible import Flexible

DEFAULT_PRICES_PATH = Path(__file__).resolve().parents[1] / "data" / "lambda_prices.json"
ARCHITECTURE = {Hardware.intel: "x86_64", Hardware.arm: "arm64"}


class RegionPrices(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    x86_64_per_gb_second_usd: float = Field(gt=0)
    arm64_per_gb_second_usd: float = Field(gt=0)
    per_million_requests_usd: float = Field(ge=0)
    # the alternatives to on-demand cold starts (None: the table has no price for them)
    provisioned_x86_64_per_gb_second_usd: float | None = Field(default=None, gt=0)
    provisioned_x86_64_duration_per_gb_second_usd: float | None = Field(default=None, gt=0)
    provisioned_arm64_per_gb_second_usd: float | None = Field(default=None, gt=0)
    provisioned_arm64_duration_per_gb_second_usd: float | None = Field(default=None, gt=0)
    snapstart_cache_per_gb_second_usd: float | None = Field(default=None, gt=0)
    snapstart_restore_per_gb_usd: float | None = Field(default=None, gt=0)

    def per_gb_second(self, hardware: Hardware) -> float:
        return getattr(self, f"{ARCHITECTURE[Hardware(hardware)]}_per_gb_second_usd")

    def provisioned(self, hardware: Hardware) -> tuple[float, float] | None:
        """(per GB-second provisioned, per GB-second of the requests it serves), or None."""
        arch = ARCHITECTURE[Hardware(hardware)]
        kept, duration = (
            getattr(self, f"provisioned_{arch}_per_gb_second_usd"),
            getattr(self, f"provisioned_{arch}_duration_per_gb_second_usd"),
        )
        return (kept, duration) if kept and duration else None


class PriceTable(BaseModel):
    model_config = ConfigDict(frozen=True)
    source: str = ""
    date: str
    note: str = ""
    default_region: str
    regions: dict[str, RegionPrices] = Field(min_length=1)

    def region(self, name: str) -> RegionPrices:
        """The prices of region `name`; `UnknownPriceRegion` if the table has none."""
        if name not in self.regions:
            raise UnknownPriceRegion(f"unknown price region {name!r} (known: {', '.join(sorted(self.regions))})")
        return self.regions[name]


class Cost(Flexible):
    """A result's cost on Lambda (`cost_block`), priced for one region."""

    per_million_inferences_usd: float
    billed_ms_per_request: float | None = None
    per_request_usd: float | None = None
    cold_start_billed_ms: int | None = None
    cold_start_usd: float | None = None
    architecture: str | None = None
    price_region: str | None = None
    price_date: str | None = None


class UnknownPriceRegion(ValueError):
    pass


def prices_path() -> Path:
    return Path(os.environ.get("AYCI_LAMBDA_PRICES") or DEFAULT_PRICES_PATH)


def load_prices(path: Path | None = None) -> PriceTable:
    """The price table at `path` (default: `AYCI_LAMBDA_PRICES`, else the bundled file)."""
    path = Path(path or prices_path())
    return _load(path, path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _load(path: Path, _mtime: int) -> PriceTable:
    return PriceTable.model_validate(json.loads(path.read_text()))


def default_region() -> str:
    return load_prices().default_region


def request_cost_usd(billed_ms: float, memory_mb: int, hardware: Hardware, prices: RegionPrices) -> float:
    """One request billed `billed_ms` (already rounded up) at `memory_mb` on `hardware`."""
    return (
        billed_ms / 1000 * (memory_mb / 1024) * prices.per_gb_second(hardware) + prices.per_million_requests_usd / 1e6
    )


def cost_block(
    *,
    billed_ms_per_request: float,
    cold_start_ms: float,
    memory_mb: int,
    batch_size: int,
    hardware: Hardware,
    region: str,
    table: PriceTable | None = None,
) -> Cost:
    """A result's `cost`: per request (its mean billed duration), per million inferences, and
    of a cold start (a request whose billed duration is the whole cold start, since Lambda
    bills the init phase too)."""
    table = table or load_prices()
    prices = table.region(region)
    per_request = request_cost_usd(billed_ms_per_request, memory_mb, hardware, prices)
    cold_billed_ms = max(1, math.ceil(cold_start_ms))
    return Cost(
        billed_ms_per_request=billed_ms_per_request,
        per_request_usd=per_request,
        per_million_inferences_usd=per_request / batch_size * 1e6,
        cold_start_billed_ms=cold_billed_ms,
        cold_start_usd=request_cost_usd(cold_billed_ms, memory_mb, hardware, prices),
        architecture=ARCHITECTURE[Hardware(hardware)],
        price_region=region,
        price_date=table.date,
    )


BUILD_MEMORY_MB = 3008  # the converter function's size (infra/template.yaml): tuning runs there, on x86_64


def build_cost_usd(seconds: float, region: str, table: PriceTable | None = None) -> float:
    """`seconds` of the build's compute (the converter function: x86_64, `BUILD_MEMORY_MB`)."""
    prices = (table or load_prices()).region(region)
    return seconds * (BUILD_MEMORY_MB / 1024) * prices.per_gb_second(Hardware.intel)


def inference_cost_usd(
    ms: float, memory_mb: int, hardware: Hardware, batch_size: int, region: str, table: PriceTable | None = None
) -> float:
    """The compute of one inference taking `ms` per request of `batch_size` at `memory_mb`
    (unrounded, no request price: what a difference in latency is worth)."""
    prices = (table or load_prices()).region(region)
    return ms / 1000 * (memory_mb / 1024) * prices.per_gb_second(hardware) / batch_size
