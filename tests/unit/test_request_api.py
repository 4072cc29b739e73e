"""The request service's HTTP API, in process (no bus driven: the publisher records)."""

from __future__ import annotations

import csv as csv_module
import hashlib
import io
import json
from dataclasses import replace
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from mangum import Mangum

from adapters.local_store import LocalFolderStore
from adapters.uploads import LocalUploader
from ayci.bootstrap import request_limits
from ayci.settings import Settings
from services.request.app import RequestDeps, create_app, parse_api_keys
from tests.conftest import archived_summary, measured_result
from tests.fakes import RecordingPublisher, tiny_onnx_model

ALICE = {"X-API-Key": "alice-key-123"}
BOB = {"X-API-Key": "bob-key-4567"}
FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def deps(tmp_path):
    settings = Settings(data_dir=tmp_path / "data", max_body_bytes=4096, max_model_bytes=10_000_000)
    store = LocalFolderStore(settings.data_dir)
    return RequestDeps(
        store=store,
        publisher=RecordingPublisher(),
        api_keys=parse_api_keys("alice-key-123:alice,bob-key-4567:bob"),
        uploader=LocalUploader(tmp_path / "uploads"),
        limits=request_limits(settings),
    )


@pytest.fixture
def client(deps):
    return TestClient(create_app(deps))


def upload(client, data: bytes, sha256: str | None = None, size: int | None = None, headers=ALICE):
    sha256 = sha256 or hashlib.sha256(data).hexdigest()
    size = len(data) if size is None else size
    offer = client.post("/models/uploads", headers=headers, json={"sha256": sha256, "size_bytes": size})
    assert offer.status_code in (200, 201), offer.text
    if offer.json()["upload"]:
        put = client.put("/" + offer.json()["upload"]["url"], headers=headers, content=data)
        if put.status_code != 204:
            return put
    return client.post(f"/models/{sha256}/verify", headers=headers, json={"size_bytes": size})


def run_body(sha256: str, size: int, **changes) -> dict:
    body = {
        "model": {"sha256": sha256, "size_bytes": size},
        "workload": "image_classification",
        "input_size": [32, 32],
        "matrix": {"intel": ["base", "onnx"]},
        "batch_sizes": [1],
        "memory_sizes_mb": [1769],
    }
    return {**body, **changes}


@pytest.fixture
def stored_model(client):
    data = tiny_onnx_model()
    assert upload(client, data).status_code == 201
    return hashlib.sha256(data).hexdigest(), len(data)


PROTECTED = [
    ("get", "/models/" + "a" * 64, None),
    ("post", "/models/uploads", {"sha256": "a" * 64, "size_bytes": 1}),
    ("post", f"/models/{'a' * 64}/verify", {"size_bytes": 1}),
    ("post", "/runs", {}),
    ("post", "/plans", {}),
    ("put", "/inputs", None),
    ("get", "/runs/00000000-0000-4000-8000-000000000000", None),
    ("get", "/runs/00000000-0000-4000-8000-000000000000/results", None),
]


@pytest.mark.parametrize(("method", "path", "body"), PROTECTED)
def test_every_route_but_the_page_needs_a_key(client, method, path, body):
    kwargs = {"json": body} if body is not None else {}
    missing = getattr(client, method)(path, **kwargs)
    assert missing.status_code == 401 and "X-API-Key" in missing.json()["detail"]
    wrong = getattr(client, method)(path, headers={"X-API-Key": "not-a-key"}, **kwargs)
    assert wrong.status_code == 403 and "not valid" in wrong.json()["detail"]


def test_a_body_that_is_not_json_still_needs_the_key(client):
    response = client.post("/runs", content=b"{not json", headers={"Content-Type": "application/json"})
    assert response.status_code == 401
    assert (
        client.post("/runs", content=b"{not json", headers={**ALICE, "Content-Type": "application/json"}).status_code
        == 422
    )


def test_the_page_and_the_openapi_document_need_no_key(client):
    page = client.get("/")
    assert page.status_code == 200 and "model-sha256" in page.text and "static/app.js" in page.text
    assert "http" not in page.text.split("<body>")[1].replace("http://www.w3.org", "")  # nothing from a CDN
    assert client.get("/static/app.js").status_code == 200
    spec = client.get("/openapi.json").json()
    assert {"/runs", "/runs/{run_id}", "/runs/{run_id}/results", "/models/{sha256}", "/models/uploads"} <= set(
        spec["paths"]
    )
    assert spec["components"]["securitySchemes"]["APIKeyHeader"]["name"] == "X-API-Key"


def test_upload_verify_and_never_again(client, deps):
    data = tiny_onnx_model()
    sha = hashlib.sha256(data).hexdigest()
    assert client.get(f"/models/{sha}", headers=ALICE).json()["stored"] is False
    verified = upload(client, data)
    assert verified.status_code == 201
    answer = verified.json()
    assert {k: answer[k] for k in ("sha256", "stored", "size_bytes", "format")} == {
        "sha256": sha,
        "stored": True,
        "size_bytes": len(data),
        "format": "onnx",
    }
    # the signature read at intake, without running the model
    (pixels,) = answer["signature"]["inputs"]
    assert pixels["dims"] == [1, 3, 8, 8] and pixels["dtype"] == "float32" and answer["signature"]["outputs"]
    assert deps.store.get_bytes(f"models/{sha}") == data
    again = client.post("/models/uploads", headers=ALICE, json={"sha256": sha, "size_bytes": len(data)})
    assert again.status_code == 200 and again.json()["stored"] is True and again.json()["upload"] is None


def test_another_owner_cannot_probe_or_run_a_model_without_uploading_it(client, deps):
    """Knowing a SHA-256 tells nothing about other owners' models (#12): Bob sees Alice's model
    as not stored, cannot run it, and gets it only by uploading the same bytes himself."""
    data = tiny_onnx_model()
    sha = hashlib.sha256(data).hexdigest()
    assert upload(client, data).status_code == 201  # Alice's
    assert client.get(f"/models/{sha}", headers=BOB).json() == {
        "sha256": sha,
        "stored": False,
        "size_bytes": None,
        "format": None,
        "signature": None,
    }
    assert client.post("/runs", headers=BOB, json=run_body(sha, len(data))).status_code == 409
    offer = client.post("/models/uploads", headers=BOB, json={"sha256": sha, "size_bytes": len(data)})
    assert offer.status_code == 201 and offer.json()["upload"] is not None
    assert (
        client.post(f"/models/{sha}/verify", headers=BOB, json={"size_bytes": len(data)}).status_code == 409
    )  # nothing uploaded
    assert upload(client, data, headers=BOB).status_code == 201
    assert client.get(f"/models/{sha}", headers=BOB).json()["stored"] is True
    assert client.post("/runs", headers=BOB, json=run_body(sha, len(data))).status_code == 201


def test_an_upload_whose_sha256_does_not_match_is_rejected_and_nothing_stored(client, deps, tmp_path):
    data = tiny_onnx_model()
    claimed = hashlib.sha256(b"something else").hexdigest()
    response = upload(client, data, sha256=claimed)
    assert response.status_code == 422 and "SHA-256" in response.json()["detail"]
    assert not deps.store.exists(f"models/{claimed}")
    assert not any(p.is_file() for p in (tmp_path / "uploads").rglob("*"))  # the staged bytes are gone
    assert client.post(f"/models/{claimed}/verify", headers=ALICE, json={"size_bytes": len(data)}).status_code == 409


def test_a_file_that_is_not_a_model_is_rejected(client, deps):
    data = b"just some text, not a model" * 10
    response = upload(client, data)
    assert response.status_code == 422 and "not an accepted model" in response.json()["detail"]
    assert not deps.store.exists(f"models/{hashlib.sha256(data).hexdigest()}")


def test_upload_size_limits(client, deps):
    data = tiny_onnx_model()
    sha = hashlib.sha256(data).hexdigest()
    too_big = client.post("/models/uploads", headers=ALICE, json={"sha256": sha, "size_bytes": 10_000_001})
    assert too_big.status_code == 413 and "at most" in too_big.json()["detail"]
    # more bytes than announced: refused while streaming, nothing staged or stored
    longer = upload(client, data, size=len(data) - 10)
    assert longer.status_code == 413 and "larger than the announced" in longer.json()["detail"]
    assert client.post(f"/models/{sha}/verify", headers=ALICE, json={"size_bytes": len(data) - 10}).status_code == 409
    assert not deps.store.exists(f"models/{sha}")


def test_a_body_too_large_is_413_and_the_service_stays_up(client, stored_model):
    huge = json.dumps({**run_body(*stored_model), "email": "x" * 5000})
    response = client.post("/runs", headers={**ALICE, "Content-Type": "application/json"}, content=huge)
    assert response.status_code == 413 and "at most 4096 bytes" in response.json()["detail"]

    def chunks():  # no Content-Length: counted while read
        yield huge[:3000].encode()
        yield huge[3000:].encode()

    chunked = client.post("/runs", headers={**ALICE, "Content-Type": "application/json"}, content=chunks())
    assert chunked.status_code == 413
    assert client.post("/runs", headers=ALICE, json=run_body(*stored_model)).status_code == 201


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"matrix": {}}, "matrix", "at least 1"),
        ({"matrix": {"intel": []}}, "matrix", "no optimizer"),
        ({"matrix": {"quantum": ["base"]}}, "matrix.quantum", "intel"),
        ({"matrix": {"intel": ["tensorrt"]}}, "matrix.intel.0", "base"),
        ({"memory_sizes_mb": [64]}, "memory_sizes_mb.0", "128"),
        ({"batch_sizes": []}, "batch_sizes", "at least 1"),
        ({"input_size": [128]}, "input_size", "[height, width]"),
        ({"workload": "speech"}, "workload", "image_classification"),
        ({"model": {"sha256": "xyz", "size_bytes": 1}}, "model.sha256", "pattern"),
        ({"email": "not an email"}, "email", "pattern"),
        ({"surprise": 1}, "surprise", "not permitted"),
    ],
)
def test_bad_runs_are_422_naming_the_field_and_nothing_is_created(client, deps, stored_model, changes, field, words):
    response = client.post("/runs", headers=ALICE, json=run_body(*stored_model, **changes))
    assert response.status_code == 422, response.text
    errors = response.json()["detail"]
    assert any(".".join(map(str, e["loc"][1:])).startswith(field) and words in e["msg"] for e in errors), errors
    assert deps.publisher.published == [] and not deps.store.list_keys("runs/")


def test_a_run_needs_its_model_stored_with_that_size(client, deps, stored_model):
    sha, size = stored_model
    missing = client.post("/runs", headers=ALICE, json=run_body("b" * 64, size))
    assert missing.status_code == 409 and "upload it first" in missing.json()["detail"]
    wrong_size = client.post("/runs", headers=ALICE, json=run_body(sha, size + 1))
    assert wrong_size.status_code == 422 and wrong_size.json()["detail"][0]["loc"] == ["body", "model", "size_bytes"]
    too_many = client.post(
        "/runs",
        headers=ALICE,
        json=run_body(
            sha,
            size,
            matrix={"intel": ["base", "onnx", "tvm"]},
            batch_sizes=list(range(1, 17)),
            memory_sizes_mb=list(range(128, 144)),
        ),
    )
    assert (
        too_many.status_code == 422
        and "768 combinations; a run may have at most 512" in too_many.json()["detail"][0]["msg"]
    )
    assert deps.publisher.published == []


def test_submit_then_follow_a_run_and_other_owners_see_nothing(client, deps, stored_model):
    created = client.post(
        "/runs", headers=ALICE, json=run_body(*stored_model, email="alice@example.com", slo_p99_ms=50)
    )
    assert created.status_code == 201
    run_id = created.json()["run_id"]
    assert created.json()["combinations"] == 2 and created.headers["location"] == f"runs/{run_id}"
    (event,) = deps.publisher.published
    assert event.type == "RequestSubmitted" and event.run_id == run_id
    assert (
        event.payload.owner == "alice"
        and event.payload.email == "alice@example.com"
        and event.payload.model.format == "onnx"
    )
    progress = client.get(f"/runs/{run_id}", headers=ALICE).json()
    assert progress["status"] == "running" and progress["total"] == 2 and progress["queued"] == 2
    assert {c["label"] for c in progress["combinations"]} == {"intel/base/b1/1769MB", "intel/onnx/b1/1769MB"}
    assert client.get(f"/runs/{run_id}/results", headers=ALICE).status_code == 409
    assert client.get(f"/runs/{run_id}", headers=BOB).status_code == 404
    assert client.get(f"/runs/{run_id}/results", headers=BOB).status_code == 404
    assert client.get("/runs/../../etc/passwd", headers=ALICE).status_code == 404
    assert client.get("/runs/not-a-uuid", headers=ALICE).status_code == 422


def test_a_run_the_bus_does_not_take_is_503_and_never_shown(client, deps, stored_model):
    class DownPublisher:
        def publish(self, envelopes):
            raise ConnectionError("EventBridge is unreachable")

    deps.publisher = DownPublisher()
    response = client.post("/runs", headers=ALICE, json=run_body(*stored_model))
    assert response.status_code == 503 and "nothing was started" in response.json()["detail"]
    (record_key,) = [k for k in deps.store.list_keys("runs/") if k.endswith("run.json")]
    run_id = record_key.split("/")[1]
    assert client.get(f"/runs/{run_id}", headers=ALICE).status_code == 404
    deps.publisher = RecordingPublisher()
    assert client.post("/runs", headers=ALICE, json=run_body(*stored_model)).status_code == 201


def fake_summary(run_id: str) -> dict:
    results = [
        measured_result("intel/onnx/b1/1769MB", p99=5.0, cost=0.40),
        measured_result("intel/onnx/b1/3538MB", p99=4.0, cost=0.90),
        measured_result("intel/base/b1/1769MB", p99=20.0, cost=1.50),
    ]
    failure = {"label": "intel/tvm/b1/1769MB", "stage": "converter", "reason": "TVM could not build"}
    return archived_summary(run_id, "partial", results, [failure])


def test_results_as_json_and_csv(client, deps, stored_model):
    run_id = client.post("/runs", headers=ALICE, json=run_body(*stored_model)).json()["run_id"]
    deps.store.put_bytes(f"runs/{run_id}/summary.json", json.dumps(fake_summary(run_id)).encode())
    assert client.get(f"/runs/{run_id}", headers=ALICE).json()["status"] == "partial"
    results = client.get(f"/runs/{run_id}/results", headers=ALICE).json()
    assert [r["combination"] for r in results["rows"]] == [
        "intel/onnx/b1/3538MB",
        "intel/onnx/b1/1769MB",
        "intel/base/b1/1769MB",
        "intel/tvm/b1/1769MB",
    ]
    assert results["pareto_front"] == ["intel/onnx/b1/3538MB", "intel/onnx/b1/1769MB"]  # base is beaten on both
    assert results["recommended"]["fastest"] == "intel/onnx/b1/3538MB"
    assert results["recommended"]["cheapest"] == "intel/onnx/b1/1769MB"
    assert results["failures"] == [
        {"combination": "intel/tvm/b1/1769MB", "stage": "converter", "reason": "TVM could not build"}
    ]
    csv = client.get(f"/runs/{run_id}/results", headers={**ALICE, "Accept": "text/csv"})
    assert csv.headers["content-type"].startswith("text/csv")
    table = list(csv_module.DictReader(io.StringIO(csv.text)))
    assert {
        "combination",
        "status",
        "p50_ms",
        "p90_ms",
        "p99_ms",
        "cold_start_ms",
        "peak_rss_mb",
        "cost_per_million_usd",
        "agreement",
        "note",
    } <= set(table[0])
    assert [r["combination"] for r in table] == [r["combination"] for r in results["rows"]]
    first = table[0]
    assert (
        first["status"],
        first["p50_ms"],
        first["p99_ms"],
        first["cold_start_ms"],
        first["cost_per_million_usd"],
    ) == ("measured", "2.0", "4.0", "900.0", "0.9")
    assert table[3]["status"] == "failed" and "TVM could not build" in table[3]["note"]


def test_traffic_of_a_finished_run(client, deps, stored_model):
    run_id = client.post("/runs", headers=ALICE, json=run_body(*stored_model)).json()["run_id"]
    assert client.post(f"/runs/{run_id}/traffic", headers=ALICE, json={"rps": 1}).status_code == 409  # still running
    deps.store.put_bytes(f"runs/{run_id}/summary.json", json.dumps(fake_summary(run_id)).encode())
    answer = client.post(
        f"/runs/{run_id}/traffic",
        headers=ALICE,
        json={"rps": 0.5, "pattern": "spiky", "duration_s": 86400, "slo_p99_ms": 2000},
    )
    assert answer.status_code == 200, answer.text
    report = answer.json()
    assert {r["combination"] for r in report["rows"]} == {
        "intel/onnx/b1/3538MB",
        "intel/onnx/b1/1769MB",
        "intel/base/b1/1769MB",
    }
    for row in report["rows"]:  # SnapStart priced only where Lambda's rules allow it, else the reason
        options = {o["option"] for o in row["options"]}
        assert "on demand" in options, row
        assert "SnapStart (estimate)" in options or any("SnapStart" in note for note in row["notes"]), row
    assert report["recommended"] is not None
    bad = client.post(f"/runs/{run_id}/traffic", headers=ALICE, json={"rps": -1})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][-1] == "rps"
    assert client.post(f"/runs/{run_id}/traffic", headers=BOB, json={"rps": 1}).status_code in (403, 404)


def test_api_gateway_rest_proxy_event_through_mangum(deps, stored_model, client):
    run_id = client.post("/runs", headers=ALICE, json=run_body(*stored_model)).json()["run_id"]
    event = json.loads((FIXTURES / "apigw_rest_get_run.json").read_text().replace("RUN_ID", run_id))
    response = Mangum(create_app(deps), lifespan="off")(event, None)
    assert response["statusCode"] == 200, response
    assert json.loads(response["body"])["run_id"] == run_id
    del event["headers"]["X-API-Key"], event["multiValueHeaders"]["X-API-Key"]
    assert Mangum(create_app(deps), lifespan="off")(event, None)["statusCode"] == 401


def test_lambda_handler_builds_the_app_once(monkeypatch, deps, stored_model, client):
    import ayci.bootstrap
    from services.request import lambda_handler

    built = []
    monkeypatch.setattr(ayci.bootstrap, "aws_request_deps", lambda settings: built.append(1) or deps)
    monkeypatch.setattr(lambda_handler, "_adapter", None)
    run_id = client.post("/runs", headers=ALICE, json=run_body(*stored_model)).json()["run_id"]
    event = json.loads((FIXTURES / "apigw_rest_get_run.json").read_text().replace("RUN_ID", run_id))
    assert lambda_handler.handler(event, None)["statusCode"] == 200
    assert lambda_handler.handler(event, None)["statusCode"] == 200
    assert built == [1]


def test_api_keys_setting():
    assert parse_api_keys(" k1234567:alice , k7654321:bob ") == {"k1234567": "alice", "k7654321": "bob"}
    assert parse_api_keys("") == {}
    for bad in ("short:alice", "k1234567", "k1234567:has space"):
        with pytest.raises(ValueError):
            parse_api_keys(bad)


def test_an_owner_cancels_a_running_run_and_no_one_else_can(client, deps, stored_model):
    sha, size = stored_model
    run_id = client.post("/runs", headers=ALICE, json=run_body(sha, size)).json()["run_id"]
    assert client.delete(f"/runs/{run_id}", headers=BOB).status_code == 404
    cancelled = client.delete(f"/runs/{run_id}", headers=ALICE)
    assert cancelled.status_code == 202, cancelled.text
    closing = deps.publisher.published[-1]
    assert closing.type == "RunDeadlineReached" and closing.payload.reason == "cancelled by its owner"
    assert closing.payload.stage == "cancelled" and closing.payload.request.owner == "alice"
    deps.store.put_bytes(f"runs/{run_id}/summary.json", b"{}")  # archived meanwhile
    assert client.delete(f"/runs/{run_id}", headers=ALICE).status_code == 409


def test_per_owner_limits_are_429_with_retry_after(deps, stored_model):
    sha, size = stored_model
    deps.limits = replace(deps.limits, max_runs_in_flight=2, max_combinations_per_day=5)
    client = TestClient(create_app(deps))
    for _ in range(2):
        assert client.post("/runs", headers=ALICE, json=run_body(sha, size)).status_code == 201  # 2 combinations each
    busy = client.post("/runs", headers=ALICE, json=run_body(sha, size))
    assert (
        busy.status_code == 429 and busy.headers["retry-after"] == "60" and "2 runs in flight" in busy.json()["detail"]
    )
    for key in deps.store.list_keys("owners/alice/days/"):  # both archived meanwhile
        deps.store.put_bytes(f"runs/{key.rsplit('/', 1)[-1]}/summary.json", b"{}")
    daily = client.post("/runs", headers=ALICE, json=run_body(sha, size))
    assert daily.status_code == 429 and int(daily.headers["retry-after"]) > 0 and "daily 5" in daily.json()["detail"]


def test_email_goes_only_where_the_deployment_allows(deps, stored_model):
    sha, size = stored_model
    deps.limits = replace(deps.limits, email_allowed=("@example.com", "boss@corp.io"))
    client = TestClient(create_app(deps))
    refused = client.post("/runs", headers=ALICE, json=run_body(sha, size, email="victim@elsewhere.org"))
    assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["body", "email"]
    for allowed in ("me@example.com", "Boss@corp.io"):
        assert client.post("/runs", headers=ALICE, json=run_body(sha, size, email=allowed)).status_code == 201


def test_a_plan_before_the_run_says_what_cannot_run(client, stored_model):
    sha, size = stored_model  # an ONNX model with a fixed input of [1, 3, 8, 8]
    answer = client.post(
        "/plans",
        headers=ALICE,
        json=run_body(sha, size, input_size=[8, 8], batch_sizes=[1, 2], memory_sizes_mb=[128, 1769]),
    )
    assert answer.status_code == 200, answer.text
    plan = {c["label"]: c for c in answer.json()["combinations"]}
    assert (
        plan["intel/onnx/b1/1769MB"]["state"] == "measure"
        and plan["intel/onnx/b1/1769MB"]["estimated_measurement_s"] > 0
    )
    assert plan["intel/onnx/b2/1769MB"]["state"] == "impossible"
    assert plan["intel/onnx/b2/1769MB"]["reason"].startswith("x has a fixed batch of 1: batch 2 cannot run")
    assert answer.json()["totals"]["impossible"] == 4 and answer.json()["totals"]["to_measure"] == 4
    other_size = client.post("/plans", headers=ALICE, json=run_body(sha, size, input_size=[32, 32])).json()
    assert all(
        c["state"] == "impossible" and "fixed size 8 on axis 2" in c["reason"] for c in other_size["combinations"]
    )
    assert client.post("/plans", headers=BOB, json=run_body(sha, size)).status_code == 409  # not Bob's model


def test_your_own_inputs_are_checked_and_stored(client, stored_model, deps, tmp_path):
    import numpy as np

    good = io.BytesIO()
    np.savez(good, pixels=np.zeros((2, 3, 8, 8), np.float32))
    stored = client.put("/inputs", headers=ALICE, content=good.getvalue())
    assert stored.status_code == 201, stored.text
    assert stored.json()["arrays"] == {"pixels": {"shape": [2, 3, 8, 8], "dtype": "float32"}}
    bad = io.BytesIO()
    np.savez(bad, pixels=np.array([None, {"x": 1}], dtype=object))
    refused = client.put("/inputs", headers=ALICE, content=bad.getvalue())
    assert refused.status_code == 422 and "object arrays" in refused.json()["detail"]
    assert client.put("/inputs", headers=ALICE, content=b"not an npz").status_code == 422
    stored_npz = [k for k in deps.store.list_keys("inputs/") if k.endswith(".npz")]
    assert len(stored_npz) == 1  # nothing stored of the refused ones
    sha, size = stored_model
    body = run_body(sha, size, workload="custom", input_size=[1], inputs_sha256=stored.json()["sha256"])
    plan = client.post("/plans", headers=ALICE, json=body).json()
    assert {c["state"] for c in plan["combinations"]} == {"measure"}
    missing = client.post("/runs", headers=ALICE, json={**body, "inputs_sha256": "c" * 64})
    assert missing.status_code == 409 and "PUT /inputs" in missing.json()["detail"]
    assert (
        client.post("/runs", headers=ALICE, json={**body, "inputs_sha256": None}).status_code == 422
    )  # custom needs inputs


def test_an_onnx_model_with_external_data_is_uploaded_as_one_bundle(client, deps, tmp_path):
    import zipfile

    from tests.unit.test_model_signature import external_data_model

    model = external_data_model(tmp_path)
    alone = upload(client, model.read_bytes())
    assert (
        alone.status_code == 422 and "upload a .zip or .tar of the .onnx and its data files" in alone.json()["detail"]
    )
    bundle = tmp_path / "bundle.zip"
    with zipfile.ZipFile(bundle, "w") as archive:
        archive.write(model, "m.onnx")
        archive.write(model.parent / "m.onnx.data", "m.onnx.data")
    stored = upload(client, bundle.read_bytes())
    assert stored.status_code == 201, stored.text
    assert stored.json()["format"] == "onnx" and stored.json()["signature"]["external_data"] is False
    sha = stored.json()["sha256"]
    assert stored.json()["size_bytes"] == len(deps.store.get_bytes(f"models/{sha}"))  # unpacked, not uploaded
    assert deps.store.get_bytes(f"models/{sha}")[:4] != b"PK\x03\x04"  # kept as the one ONNX file made of it


def test_a_combination_s_profile_trace_is_served_and_404_says_why(client, deps, stored_model):
    from core.profiles import operator_rows
    from schemas import keys
    from schemas.documents import CombinationProfile

    run_id = client.post("/runs", headers=ALICE, json=run_body(*stored_model)).json()["run_id"]
    assert client.get(f"/runs/{run_id}/combinations/k/profile", headers=ALICE).status_code == 404  # still running
    summary = fake_summary(run_id)
    for i, result in enumerate(summary["results"]):
        result["combo_key"] = f"c{i}"  # a combination key is one path segment (a hash)
    deps.store.put_bytes(f"runs/{run_id}/summary.json", json.dumps(summary).encode())
    onnx = summary["results"][0]
    not_yet = client.get(f"/runs/{run_id}/combinations/{onnx['combo_key']}/profile", headers=ALICE)
    assert not_yet.status_code == 404 and "has not been profiled" in not_yet.json()["detail"]
    failed = client.get(f"/runs/{run_id}/combinations/k0/profile", headers=ALICE)
    assert failed.status_code == 404 and "TVM could not build" in failed.json()["detail"]
    unknown = client.get(f"/runs/{run_id}/combinations/nope/profile", headers=ALICE)
    assert unknown.status_code == 404 and "no combination nope" in unknown.json()["detail"]

    trace_key = keys.profile_trace(onnx["combo_key"], run_id)  # the run's own profile (its result was r0's)
    deps.store.put_bytes(
        trace_key, json.dumps({"traceEvents": [{"name": "Conv", "ph": "X", "ts": 0, "dur": 5}]}).encode()
    )
    deps.store.put_bytes(
        keys.profile(onnx["combo_key"], run_id),
        CombinationProfile(
            combo_key=onnx["combo_key"],
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
    served = client.get(f"/runs/{run_id}/combinations/{onnx['combo_key']}/profile", headers=ALICE)
    assert served.status_code == 200 and served.json()["traceEvents"][0]["name"] == "Conv"
    assert "attachment" in served.headers["content-disposition"]
    tables = client.get(f"/runs/{run_id}/profiles", headers=ALICE).json()["tables"]
    assert tables[0]["title"] == "intel/b1/1769MB" and tables[0]["rows"][0]["group"] == "conv"
    assert tables[0]["optimizers"][0]["trace"] == f"runs/{run_id}/combinations/{onnx['combo_key']}/profile"
    assert client.get(f"/runs/{run_id}/combinations/{onnx['combo_key']}/profile", headers=BOB).status_code == 404
    # "profile this": the combination's inference worker is asked, by an event
    other = summary["results"][1]
    asked = client.post(f"/runs/{run_id}/combinations/{other['combo_key']}/profile", headers=ALICE)
    assert (
        asked.status_code == 202
        and asked.json()["trace_url"] == f"runs/{run_id}/combinations/{other['combo_key']}/profile"
    )
    event = deps.publisher.published[-1]
    assert event.type == "ProfileRequested" and event.payload.result_key == keys.result_version(
        other["combo_key"], other["run_id"]
    )
    refused = client.post(f"/runs/{run_id}/combinations/k0/profile", headers=ALICE)
    assert refused.status_code == 404 and "TVM could not build" in refused.json()["detail"]
