"""Profiles are deduplicated per result and run, counted in the owner's daily budget, and keyed by
the run that asked: a profile request on a reused result never overwrites (or shows) another
owner's profile."""

from __future__ import annotations

import json
from dataclasses import replace

from fastapi.testclient import TestClient

from core.profiles import operator_rows
from schemas import keys
from schemas.documents import CombinationProfile
from services.inference.handlers import InferenceDeps, on_profile_requested
from services.request.app import create_app
from tests.fakes import tiny_onnx_model
from tests.unit.test_request_api import (  # noqa: F401
    ALICE,
    BOB,
    client,
    deps,
    fake_summary,
    run_body,
    stored_model,
    upload,
)


def archived_run(client, deps, model, headers=ALICE) -> tuple[str, dict]:  # noqa: F811
    """A run of `headers`' owner, archived with results measured by run r0 (reused, as from another owner)."""
    run_id = client.post("/runs", headers=headers, json=run_body(*model)).json()["run_id"]
    summary = fake_summary(run_id)
    for i, result in enumerate(summary["results"]):
        result["combo_key"] = f"c{i}"
    deps.store.put_bytes(keys.summary(run_id), json.dumps(summary).encode())
    return run_id, summary


def keep_profile(store, combo_key: str, run_id: str) -> None:
    trace_key = keys.profile_trace(combo_key, run_id)
    store.put_bytes(trace_key, b'{"traceEvents": []}')
    store.put_bytes(
        keys.profile(combo_key, run_id),
        CombinationProfile(
            combo_key=combo_key,
            run_id=run_id,
            label="intel/onnx/b1/1769MB",
            optimizer="onnx",
            trace_key=trace_key,
            runs=1,
            operators=operator_rows([("c", "Conv", 0.005)], 1),
            unprofiled_p50_ms=1.0,
            profiled_p50_ms=1.2,
            confined=True,
            profiled_at="2026-01-01T00:00:00+00:00",
        ).to_bytes(),
    )


def profile_requests(deps) -> list:  # noqa: F811
    return [e for e in deps.publisher.published if e.type == "ProfileRequested"]


def test_a_profiled_result_answers_its_profile_and_a_pending_pass_is_not_started_again(client, deps, stored_model):  # noqa: F811
    run_id, _ = archived_run(client, deps, stored_model)
    path = f"/runs/{run_id}/combinations/c0/profile"
    first = client.post(path, headers=ALICE)
    assert first.status_code == 202 and first.json()["state"] == "requested" and len(profile_requests(deps)) == 1
    again = client.post(path, headers=ALICE)
    assert again.status_code == 202 and again.json()["state"] == "pending" and len(profile_requests(deps)) == 1
    keep_profile(deps.store, "c0", run_id)  # the pass is done
    done = client.post(path, headers=ALICE)
    assert done.status_code == 200 and done.json()["state"] == "profiled" and len(profile_requests(deps)) == 1
    assert done.json()["profile"]["run_id"] == run_id


def test_a_new_pass_counts_in_the_owner_s_daily_budget(client, deps, stored_model):  # noqa: F811
    deps.limits = replace(deps.limits, max_combinations_per_day=3)  # the run's 2 combinations, and one pass
    client = TestClient(create_app(deps))
    run_id, _ = archived_run(client, deps, stored_model)
    assert client.post(f"/runs/{run_id}/combinations/c0/profile", headers=ALICE).status_code == 202
    over = client.post(f"/runs/{run_id}/combinations/c1/profile", headers=ALICE)
    assert over.status_code == 429 and "a profiled pass would pass your daily 3" in over.json()["detail"]
    assert int(over.headers["retry-after"]) > 0 and len(profile_requests(deps)) == 1
    # refused, so nothing is pending: asked again, it is refused again (not "pending")
    assert client.post(f"/runs/{run_id}/combinations/c1/profile", headers=ALICE).status_code == 429


def test_a_reused_result_s_profile_is_the_requesting_run_s_never_another_owner_s(client, deps, stored_model):  # noqa: F811
    alice_run, summary = archived_run(client, deps, stored_model, ALICE)
    assert upload(client, tiny_onnx_model(), headers=BOB).status_code == 201  # Bob holds the same model
    bob_run, _ = archived_run(client, deps, stored_model, BOB)  # both reuse r0's results
    keep_profile(deps.store, "c0", alice_run)
    # Bob sees no profile of Alice's, nor her run id
    assert client.get(f"/runs/{bob_run}/combinations/c0/profile", headers=BOB).status_code == 404
    assert client.get(f"/runs/{bob_run}/profiles", headers=BOB).json()["tables"] == []
    asked = client.post(f"/runs/{bob_run}/combinations/c0/profile", headers=BOB)
    assert asked.status_code == 202 and alice_run not in asked.text
    (event,) = profile_requests(deps)
    assert event.run_id == bob_run
    # the worker stores the pass under Bob's run: Alice's profile is untouched
    deps.store.put_bytes(event.payload.result_key, json.dumps(summary["results"][0]).encode())
    profiled_as = []

    def profile(store, result):
        profiled_as.append(result["run_id"])
        keep_profile(store, result["combo_key"], result["run_id"])

    on_profile_requested(event, InferenceDeps(store=deps.store, profile=profile))
    assert profiled_as == [bob_run]
    assert json.loads(deps.store.get_bytes(keys.profile("c0", alice_run)))["run_id"] == alice_run
    mine = client.get(f"/runs/{bob_run}/profiles", headers=BOB)
    assert mine.status_code == 200 and alice_run not in mine.text and "r0" not in json.dumps(mine.json())
    assert client.post(f"/runs/{bob_run}/combinations/c0/profile", headers=BOB).status_code == 200
