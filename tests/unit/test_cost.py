"""The cost formula and the price table (schemas/cost.py)."""

import json
import math

import pytest
from pydantic import ValidationError

from schemas.combos import Hardware, Matrix, ModelRef
from schemas.cost import UnknownPriceRegion, cost_block, load_prices, request_cost_usd
from schemas.events import RequestSubmitted

MODEL = ModelRef(sha256="a" * 64, size_bytes=1, format="pt2", workload="image_classification", input_size=[32, 32])
MATRIX = Matrix(optimizers={"intel": ["onnx"]}, batch_sizes=[1], memory_sizes_mb=[1769])


def test_bundled_prices_have_region_and_date():
    table = load_prices()
    assert table.date and table.default_region == "us-east-1"
    east = table.region("us-east-1")
    assert east.per_gb_second(Hardware.intel) == 0.0000166667
    assert east.per_gb_second(Hardware.arm) == 0.0000133334
    assert east.per_million_requests_usd == 0.20


def test_request_cost_is_billed_duration_times_gb_times_price_plus_request():
    east = load_prices().region("us-east-1")
    # 100 ms at 1024 MB on x86: 0.1 GB-s
    assert request_cost_usd(100, 1024, Hardware.intel, east) == pytest.approx(0.1 * 0.0000166667 + 0.2e-6)
    assert request_cost_usd(100, 2048, Hardware.arm, east) == pytest.approx(0.2 * 0.0000133334 + 0.2e-6)


def test_cost_block_per_million_inferences_divides_a_request_by_its_batch():
    one = cost_block(
        billed_ms_per_request=20,
        cold_start_ms=1500.2,
        memory_mb=1769,
        batch_size=1,
        hardware="intel",
        region="us-east-1",
    )
    eight = cost_block(
        billed_ms_per_request=20,
        cold_start_ms=1500.2,
        memory_mb=1769,
        batch_size=8,
        hardware="intel",
        region="us-east-1",
    )
    per_request = 0.020 * 1769 / 1024 * 0.0000166667 + 0.2e-6
    assert one.per_request_usd == pytest.approx(per_request)
    assert one.per_million_inferences_usd == pytest.approx(per_request * 1e6)
    assert eight.per_million_inferences_usd == pytest.approx(per_request * 1e6 / 8)
    # a cold start is billed whole, rounded up to the next ms
    assert one.cold_start_billed_ms == 1501
    assert one.cold_start_usd == pytest.approx(1.501 * 1769 / 1024 * 0.0000166667 + 0.2e-6)
    assert one.price_region == "us-east-1" and one.price_date == load_prices().date
    assert one.architecture == "x86_64"


def test_arm_is_cheaper_per_gb_second():
    args = dict(billed_ms_per_request=10, cold_start_ms=100, memory_mb=1024, batch_size=1, region="us-east-1")
    assert cost_block(hardware="arm", **args).per_request_usd < cost_block(hardware="intel", **args).per_request_usd


def test_unknown_region_names_the_known_ones():
    with pytest.raises(UnknownPriceRegion, match="us-east-1"):
        load_prices().region("mars-north-1")


def test_prices_can_be_overridden_by_another_file(tmp_path, monkeypatch):
    override = tmp_path / "prices.json"
    override.write_text(
        json.dumps(
            {
                "date": "2030-01-01",
                "default_region": "eu-test-1",
                "regions": {
                    "eu-test-1": {
                        "x86_64_per_gb_second_usd": 1e-5,
                        "arm64_per_gb_second_usd": 8e-6,
                        "per_million_requests_usd": 0.1,
                    }
                },
            }
        )
    )
    monkeypatch.setenv("AYCI_LAMBDA_PRICES", str(override))
    cost = cost_block(
        billed_ms_per_request=1000, cold_start_ms=1, memory_mb=1024, batch_size=1, hardware="intel", region="eu-test-1"
    )
    assert cost.per_request_usd == pytest.approx(1e-5 + 0.1e-6) and cost.price_date == "2030-01-01"
    request = RequestSubmitted(model=MODEL, matrix=MATRIX)
    assert request.price_region == "eu-test-1"  # the table's default region
    with pytest.raises(ValidationError, match="price_region"):
        RequestSubmitted(model=MODEL, matrix=MATRIX, price_region="us-east-1")


@pytest.mark.parametrize(
    "field, value",
    [
        ("price_region", "mars-north-1"),
        ("slo_p99_ms", 0),
        ("slo_p99_ms", -3.0),
        ("slo_p99_ms", math.nan),
        ("balance_weight", 1.5),
        ("balance_weight", -0.1),
    ],
)
def test_bad_request_fields_are_errors_naming_the_field(field, value):
    with pytest.raises(ValidationError) as raised:
        RequestSubmitted(model=MODEL, matrix=MATRIX, **{field: value})
    assert [e["loc"] for e in raised.value.errors()] == [(field,)]


@pytest.mark.parametrize("memory", [127, 10241, 1769.5, "1769"])
def test_memory_sizes_are_lambdas(memory):
    with pytest.raises(ValidationError, match="memory_sizes_mb"):
        Matrix(optimizers={"intel": ["onnx"]}, batch_sizes=[1], memory_sizes_mb=[memory])
    assert Matrix(
        optimizers={"intel": ["onnx"]}, batch_sizes=[1], memory_sizes_mb=[128, 1000, 10240]
    ).memory_sizes_mb == [128, 1000, 10240]


def test_older_requests_stay_readable_with_the_default_region():
    data = RequestSubmitted(model=MODEL, matrix=MATRIX).model_dump(mode="json")
    del data["price_region"]
    assert RequestSubmitted.model_validate(data).price_region == "us-east-1"


def test_billing_rules_beside_the_prices_with_their_source_and_date():
    """Provisioned concurrency in 5-minute steps, SnapStart's cache for at least 3 hours, its billed
    restore (the runtime's load + the after-restore hooks), ephemeral storage above 512 MB priced."""
    from schemas.lambda_billing import load_billing

    billing = load_billing()
    assert billing.date and "lambda/pricing" in billing.source and "snapstart" in billing.source
    assert billing.provisioned_seconds(3600) == 3600 and billing.provisioned_seconds(3601) == 3900
    assert billing.snapstart_cache_seconds(600) == 3 * 3600 and billing.snapstart_cache_seconds(86400) == 86400
    assert (
        billing.snapstart_billed_restore_ms
        == billing.snapstart_runtime_load_ms + billing.snapstart_after_restore_hooks_ms
    )
    assert billing.ephemeral_storage_usd(512, 1000.0, "us-east-1") == 0.0
    # 10,240 MB: 9.5 GB above the free 512 MB, for 1,000 s of billed duration
    assert billing.ephemeral_storage_usd(10240, 1000.0, "us-east-1") == pytest.approx(9.5 * 1000 * 3.09e-08)
    with pytest.raises(ValueError, match="ephemeral storage price"):
        billing.ephemeral_storage_usd(1024, 1.0, "eu-west-9")


def test_a_price_file_without_billing_rules_gets_aws_s(tmp_path):
    from schemas.lambda_billing import load_billing

    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"date": "2026-01-01", "default_region": "x", "regions": {}}))
    billing = load_billing(path)
    assert billing.provisioned_step_s == 300 and billing.snapstart_cache_minimum_s == 10800
    assert billing.ephemeral_storage_usd(512, 1.0, "x") == 0.0
