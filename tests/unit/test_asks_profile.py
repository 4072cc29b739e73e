"""The inference worker reads a stored plan as stored (`STORED`): a run whose price region left
the price table after it was accepted still says whether it asked for profiles."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from adapters.memory_store import MemoryStore
from schemas import keys
from schemas.combos import Matrix, ModelRef, combo_key
from schemas.events import RequestSubmitted, RunPlanned
from services.inference.handlers import _asks_profile

MODEL = ModelRef(sha256="cd" * 32, size_bytes=1000, format="pt2", workload="image_classification", input_size=[32, 32])
RUN = "run-profiled"


MATRIX = Matrix(optimizers={"intel": ["base"]}, batch_sizes=[1], memory_sizes_mb=[1769])


def stored_plan(store: MemoryStore, profile: bool) -> None:
    req = RequestSubmitted(model=MODEL, matrix=MATRIX, profile=profile)  # us-east-1, accepted
    combos = {combo_key(MODEL, c, req.tuning): c for c in req.matrix.combos()}
    plan = RunPlanned(model=MODEL, combos=combos, deadline=datetime.now(UTC) + timedelta(hours=1), request=req)
    store.put_bytes(keys.plan(RUN), plan.model_dump_json().encode())


@pytest.mark.parametrize("profile", [True, False])
def test_a_stored_plan_reads_after_its_price_region_left_the_table(tmp_path, monkeypatch, profile):
    store = MemoryStore()
    stored_plan(store, profile)
    table = tmp_path / "prices.json"
    region = {"x86_64_per_gb_second_usd": 1e-5, "arm64_per_gb_second_usd": 8e-6, "per_million_requests_usd": 0.1}
    table.write_text(
        json.dumps({"date": "2030-01-01", "default_region": "eu-test-1", "regions": {"eu-test-1": region}})
    )
    monkeypatch.setenv("AYCI_LAMBDA_PRICES", str(table))
    with pytest.raises(ValidationError, match="price_region"):  # a new request in that region is refused
        RequestSubmitted(model=MODEL, matrix=MATRIX, price_region="us-east-1")
    assert _asks_profile(store, RUN) is profile
