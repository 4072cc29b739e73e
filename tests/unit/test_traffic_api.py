"""`POST /runs/{id}/traffic` at the heaviest traffic answers within the request's simulation budget,
off the event loop, and says it thinned."""

from __future__ import annotations

import json
import time

from tests.unit.test_request_api import ALICE, client, deps, fake_summary, run_body, stored_model  # noqa: F401


def test_spiky_traffic_at_the_highest_rate_over_a_month_is_bounded(client, deps, stored_model):  # noqa: F811
    run_id = client.post("/runs", headers=ALICE, json=run_body(*stored_model)).json()["run_id"]
    deps.store.put_bytes(f"runs/{run_id}/summary.json", json.dumps(fake_summary(run_id)).encode())
    started = time.perf_counter()
    answer = client.post(
        f"/runs/{run_id}/traffic", headers=ALICE, json={"rps": 100_000, "pattern": "spiky", "duration_s": 30 * 86400}
    )
    assert answer.status_code == 200, answer.text
    report = answer.json()
    assert time.perf_counter() - started < 20
    assert report["simulated_events"] <= report["event_budget"] and report["thinned"]
    assert len(report["rows"]) == 3 and all(r["thinned"] for r in report["rows"])


def test_the_email_s_traffic_section_is_bounded_the_same_way():
    from report.render import traffic_lines

    summary = fake_summary("0" * 8 + "-0000-0000-0000-" + "0" * 12)
    summary["request"] = {
        "traffic": {"rps": 100_000, "pattern": "spiky", "idle_timeout_s": 600, "duration_s": 30 * 86400}
    }
    started = time.perf_counter()
    lines = traffic_lines(summary)
    assert time.perf_counter() - started < 20
    assert lines[0].startswith("Under your traffic (100000 req/s, spiky") and "thinned" in lines[-1]


def test_the_email_s_traffic_section_plays_by_the_request_s_concurrency_limit():
    """The run's traffic block names a concurrency limit (RequestSubmitted v8): the email's rows say what
    it throttles."""
    from report.render import traffic_lines

    summary = fake_summary("0" * 8 + "-0000-0000-0000-" + "0" * 12)
    summary["request"] = {
        "traffic": {"rps": 50, "pattern": "steady", "idle_timeout_s": 600, "duration_s": 3600, "concurrency_limit": 1}
    }
    lines = traffic_lines(summary)
    assert any("throttled" in line for line in lines[1:-1]), lines
    (cheapest,) = [line for line in lines if "cheapest" in line]
    assert cheapest.endswith("none")  # every way throttles far beyond 1 %: nothing is picked
