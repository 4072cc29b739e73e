"""Racing in the HTTP API: `precision` on submission (quick by default, exact on request) and the
running answer on `GET /runs/{id}` once the quick pass stored it."""

from __future__ import annotations

import json

from core.racing import answer, race
from schemas import keys
from tests.unit.test_racing import fig
from tests.unit.test_request_api import ALICE, client, deps, run_body, stored_model  # noqa: F401 (fixtures)


def test_precision_is_quick_by_default_and_exact_on_request(client, deps, stored_model):  # noqa: F811
    assert client.post("/runs", headers=ALICE, json=run_body(*stored_model)).status_code == 201
    assert client.post("/runs", headers=ALICE, json=run_body(*stored_model, precision="exact")).status_code == 201
    assert [e.payload.precision for e in deps.publisher.published] == ["quick", "exact"]
    wrong = client.post("/runs", headers=ALICE, json=run_body(*stored_model, precision="rough"))
    assert wrong.status_code == 422


def test_the_running_answer_is_shown_with_its_intervals_once_the_quick_pass_stored_it(client, deps, stored_model):  # noqa: F811
    run_id = client.post("/runs", headers=ALICE, json=run_body(*stored_model)).json()["run_id"]
    progress = client.get(f"/runs/{run_id}", headers=ALICE).json()
    assert progress["answer"] is None and progress["answer_text"] == []
    fast = fig("intel/onnx/b1/1769MB", p99=10, cost=2.0, precision="quick")
    slow = fig("intel/base/b1/1769MB", p99=30, cost=6.0, precision="quick")
    doc = answer(
        {f.label: f for f in (fast, slow)}, race([fast, slow]), balance_weight=0.5, stage="quick", refining=[fast.label]
    )
    deps.store.put_bytes(keys.answer(run_id), json.dumps(doc).encode())
    progress = client.get(f"/runs/{run_id}", headers=ALICE).json()
    assert progress["answer"]["picks"]["fastest"] == fast.label
    assert progress["answer"]["rows"][fast.label]["p99_low"] == fast.p99_low
    assert progress["answer"]["dominated"][slow.label]["by"] == fast.label
    assert progress["answer_text"][0].startswith("first answer (quick pass; refining 1")
    assert any("dominated by intel/onnx/b1/1769MB" in line for line in progress["answer_text"])


def test_a_combination_skipped_because_it_cannot_change_the_answer_is_shown_skipped_not_failed(
    client,  # noqa: F811
    deps,  # noqa: F811
    stored_model,  # noqa: F811
):
    from datetime import UTC, datetime, timedelta

    from schemas.combos import combo_key
    from schemas.events import ComboFailed, Envelope, FailureStage, RunPlanned
    from services.archiver.handlers import ArchiverDeps, on_combo_failed, on_run_planned

    run_id = client.post("/runs", headers=ALICE, json=run_body(*stored_model)).json()["run_id"]
    request = deps.publisher.published[-1].payload
    combos = {combo_key(request.model, c, request.tuning): c for c in request.matrix.combos()}
    plan = RunPlanned(
        model=request.model, combos=combos, deadline=datetime.now(UTC) + timedelta(hours=1), request=request
    )
    archiver = ArchiverDeps(deps.store)
    on_run_planned(Envelope.wrap(plan, run_id=run_id, producer="dedup"), archiver)
    key, combo = next(iter(combos.items()))
    skipped = ComboFailed(combo=combo, combo_key=key, stage=FailureStage.skipped, reason="tuning skipped: why")
    on_combo_failed(Envelope.wrap(skipped, run_id=run_id, producer="converter"), archiver)
    progress = client.get(f"/runs/{run_id}", headers=ALICE).json()
    entry = next(c for c in progress["combinations"] if c["combo_key"] == key)
    assert entry["state"] == "skipped" and entry["reason"] == "tuning skipped: why"
    assert progress["skipped"] == 1 and progress["failed"] == 0
