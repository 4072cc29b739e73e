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
    assert one["per_request_usd"] == pytest.approx(per_request)
    assert one["per_million_inferences_usd"] == pytest.approx(per_request * 1e6)
    assert eight["per_million_inferences_usd"] == pytest.approx(per_request * 1e6 / 8)
    # a cold start is billed whole, rounded up to the next ms
    assert one["cold_start_billed_ms"] == 1501
    assert one["cold_start_usd"] == pytest.approx(1.501 * 1769 / 1024 * 0.0000166667 + 0.2e-6)
    assert one["price_region"] == "us-east-1" and one["price_date"] == load_prices().date
    assert one["architecture"] == "x86_64"


def test_arm_is_cheaper_per_gb_second():
    args = dict(billed_ms_per_request=10, cold_start_ms=100, memory_mb=1024, batch_size=1, region="us-east-1")
    assert (
        cost_block(hardware="arm", **args)["per_request_usd"] < cost_block(hardware="intel", **args)["per_request_usd"]
    )


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
    assert cost["per_request_usd"] == pytest.approx(1e-5 + 0.1e-6) and cost["price_date"] == "2030-01-01"
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
