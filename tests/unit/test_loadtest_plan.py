"""The load test's traffic plan (the Locust shape follows it) and how its comparison with the
simulation is judged."""

import pytest

from core.lambda_model.traffic import BURST_MULTIPLIER
from serving.loadtest import LoadPlan, compare, rate_at, users_at


def test_spiky_plan_bursts_in_the_middle_of_each_half_and_stops_at_the_duration():
    plan = LoadPlan(rps=3, duration_s=60, pattern="spiky")
    assert rate_at(plan, 5) == 3 and rate_at(plan, 15) == 3 * BURST_MULTIPLIER and rate_at(plan, 20) == 3
    assert rate_at(plan, 46) == 3 * BURST_MULTIPLIER and rate_at(plan, 59) == 3
    assert users_at(plan, 15) == 30 and users_at(plan, 59.9) == 3 and users_at(plan, 60) is None
    assert LoadPlan(rps=3, duration_s=60).max_requests == 2 * 180 + 100
    assert all(rate_at(LoadPlan(rps=3, duration_s=60), t) == 3 for t in range(60))


@pytest.mark.parametrize(
    "kwargs, field",
    [({"rps": 0}, "rps"), ({"rps": 1e6}, "rps"), ({"duration_s": 1}, "duration"), ({"pattern": "wavy"}, "pattern")],
)
def test_a_bad_plan_is_refused_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        LoadPlan(**{"rps": 2, "duration_s": 30, **kwargs})


def observed(p99, cold_share, cold_starts=3, waited=3):
    return {
        "p50_ms": 5.0,
        "p99_ms": p99,
        "cold_share": cold_share,
        "cold_starts": cold_starts,
        "waited_for_load": waited,
        "answered": 300,
    }


PREDICTED = {
    "p50_ms": 5.0,
    "p99_ms": 100.0,
    "cold_share": 0.01,
    "cold_starts": 3,
    "peak_instances": 2,
    "lambda": {"peak_instances": 9, "cold_share": 0.03, "p99_ms": 400.0},
}
RESULT = {"cold_start_ms": {"total": 400.0}}


def test_within_fifteen_percent_needs_no_explanation_and_a_gap_is_explained():
    close = compare(observed(110, 0.011), PREDICTED, RESULT, max_workers=2, models=1)
    assert close["p99_within"] and close["cold_share_within"] and close["explained"] == []
    far = compare(observed(130, 0.011, waited=12), PREDICTED, RESULT, max_workers=2, models=1)
    assert not far["p99_within"] and far["p99_ratio"] == pytest.approx(1.3)
    assert any("12 requests waited for 3 cold loads" in r for r in far["explained"])
    assert any("up to 9 instances" in r for r in far["explained"])
