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
    assert progress["answer_text"][0] == "first answer (quick pass):"
    assert any("dominated by intel/onnx/b1/1769MB" in line for line in progress["answer_text"])
