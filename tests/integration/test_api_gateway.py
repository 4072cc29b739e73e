"""The HTTP API behind LocalStack's API Gateway (REST v1, a `{proxy+}` HTTP_PROXY integration
to `python -m services.request`), on the real path: the model uploaded with a presigned S3 POST,
the run carried by EventBridge + SQS to one process per service, the email sent through SES and
read back. Real engines on a tiny model."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
import urllib.request
import uuid

import boto3
import httpx
import pytest

from adapters.aws_calls import ENV, recorded
from infra import localstack as cloud
from tests.conftest import TINY_IMAGE_SIZE, wait_until_serving
from tests.iam_roles import Deployment, not_granted

pytestmark = pytest.mark.localstack
API_KEY, OTHER_KEY = "gateway-test-key-1", "gateway-test-key-2"
SENDER = "ayci@example.com"  # the stack's default sender, verified by the deploy
RUN_TIMEOUT_S = 300


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def create_gateway(port: int) -> str:
    """A REST API whose every path goes to the local server on `port`; returns its base URL."""
    apigw = boto3.client("apigateway")
    api_id = apigw.create_rest_api(name=f"ayci-{uuid.uuid4().hex[:6]}")["id"]
    root = next(r["id"] for r in apigw.get_resources(restApiId=api_id)["items"] if r["path"] == "/")
    proxy = apigw.create_resource(restApiId=api_id, parentId=root, pathPart="{proxy+}")["id"]
    apigw.put_method(
        restApiId=api_id,
        resourceId=proxy,
        httpMethod="ANY",
        authorizationType="NONE",
        requestParameters={"method.request.path.proxy": True},
    )
    apigw.put_integration(
        restApiId=api_id,
        resourceId=proxy,
        httpMethod="ANY",
        type="HTTP_PROXY",
        integrationHttpMethod="ANY",
        uri=f"http://127.0.0.1:{port}/{{proxy}}",
        requestParameters={"integration.request.path.proxy": "method.request.path.proxy"},
    )
    apigw.put_method(restApiId=api_id, resourceId=root, httpMethod="GET", authorizationType="NONE")
    apigw.put_integration(
        restApiId=api_id,
        resourceId=root,
        httpMethod="GET",
        type="HTTP_PROXY",
        integrationHttpMethod="GET",
        uri=f"http://127.0.0.1:{port}/",
    )
    apigw.create_deployment(restApiId=api_id, stageName="test")
    return f"{os.environ['AWS_ENDPOINT_URL']}/_aws/execute-api/{api_id}/test"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    prefix = f"g{uuid.uuid4().hex[:6]}"
    outputs = cloud.deploy(prefix)
    port = free_port()
    base = create_gateway(port)
    calls = tmp_path_factory.mktemp("aws-calls")  # every AWS call of every process, by function
    env = cloud.service_env(
        outputs,
        prefix,
        {
            "AYCI_MEASURE_TIME_CAP_S": "1",
            "AYCI_MEASURE_MIN_ITERATIONS": "5",
            "AYCI_RESULTS_URL": base,
            "AYCI_API_KEYS": f"{API_KEY}:gatewayuser,{OTHER_KEY}:someoneelse",
            "AYCI_SENDER_EMAIL": SENDER,
            ENV: str(calls),
        },
    )
    processes = cloud.ServiceProcesses(env=env, log_dir=tmp_path_factory.mktemp("service-logs"))
    processes.start_all()
    processes.start("request", args=["--port", str(port)])
    wait_until_serving(
        f"http://127.0.0.1:{port}/openapi.json",
        lambda: f"the request service did not start:\n{processes.log_text('request')[-3000:]}",
    )
    yield {"base": base, "processes": processes, "bucket": outputs.bucket, "prefix": prefix, "calls": calls}
    processes.stop_all()
    from infra.stack import delete_stack

    delete_stack(prefix, empty_bucket=True)


def call(gateway, method: str, path: str, key: str | None = API_KEY, **kwargs) -> httpx.Response:
    headers = {**({"X-API-Key": key} if key else {}), **kwargs.pop("headers", {})}
    return httpx.request(method, f"{gateway['base']}/{path}", headers=headers, timeout=60, **kwargs)


def test_upload_submit_follow_and_get_the_run_back_through_api_gateway(gateway, tiny_image_model):
    assert "model-sha256" in call(gateway, "GET", "", key=None).text  # the page, through the gateway
    data = tiny_image_model.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    assert call(gateway, "GET", f"models/{sha}").json()["stored"] is False

    # the upload: a presigned POST straight to S3, pinned to the announced size
    offer = call(gateway, "POST", "models/uploads", json={"sha256": sha, "size_bytes": len(data)})
    assert offer.status_code == 201, offer.text
    upload = offer.json()["upload"]
    assert upload["method"] == "POST"
    too_big = httpx.post(upload["url"], data=upload["fields"], files={"file": ("model", data + b"x")}, timeout=60)
    assert too_big.status_code == 400 and "EntityTooLarge" in too_big.text
    assert httpx.post(
        upload["url"], data=upload["fields"], files={"file": ("model", data)}, timeout=60
    ).status_code in (200, 201, 204)
    verified = call(gateway, "POST", f"models/{sha}/verify", json={"size_bytes": len(data)})
    assert verified.status_code == 201 and verified.json()["format"] == "pt2", verified.text
    again = call(gateway, "POST", "models/uploads", json={"sha256": sha, "size_bytes": len(data)})
    assert again.status_code == 200 and again.json()["upload"] is None  # never uploaded twice

    body = {
        "model": {"sha256": sha, "size_bytes": len(data)},
        "workload": "image_classification",
        "input_size": TINY_IMAGE_SIZE,
        "matrix": {"intel": ["onnx"]},
        "batch_sizes": [1],
        "memory_sizes_mb": [1769],
        "email": "gateway-user@example.com",
    }
    # bad input through the gateway: clear 4xx, nothing started
    assert call(gateway, "POST", "runs", key=None, json=body).status_code == 401
    assert call(gateway, "POST", "runs", key="wrong-key-000", json=body).status_code == 403
    unknown = call(gateway, "POST", "runs", json={**body, "matrix": {"quantum": ["onnx"]}})
    assert unknown.status_code == 422 and unknown.json()["detail"][0]["loc"][:3] == ["body", "matrix", "quantum"]

    created = call(gateway, "POST", "runs", json=body)
    assert created.status_code == 201, created.text
    run_id = created.json()["run_id"]
    assert call(gateway, "GET", f"runs/{run_id}", key=OTHER_KEY).status_code == 404

    deadline = time.monotonic() + RUN_TIMEOUT_S
    while (progress := call(gateway, "GET", f"runs/{run_id}").json())["status"] == "running":
        if time.monotonic() > deadline:
            pytest.fail(
                f"run {run_id} did not end: {progress}\n"
                + "\n".join(
                    gateway["processes"].log_text(n)[-2000:]
                    for n in ("dedup", "converter", "inference-intel", "archiver")
                )
            )
        time.sleep(1)
    assert progress["status"] == "complete" and progress["measured"] == 1
    (combo,) = progress["combinations"]
    assert combo["label"] == "intel/onnx/b1/1769MB" and combo["state"] == "measured" and combo["p99_ms"] > 0

    results = call(gateway, "GET", f"runs/{run_id}/results").json()
    assert (
        results["rows"][0]["combination"] == "intel/onnx/b1/1769MB"
        and results["recommended"]["fastest"] == "intel/onnx/b1/1769MB"
    )
    csv = call(gateway, "GET", f"runs/{run_id}/results", headers={"Accept": "text/csv"})
    assert csv.headers["content-type"].startswith("text/csv") and "intel/onnx/b1/1769MB,measured," in csv.text

    # the email, sent once by the notifier process through SES
    link = f"{gateway['base']}/runs/{run_id}/results"
    deadline = time.monotonic() + 60
    while not (mail := [m for m in sent_mail(SENDER) if run_id[:8] in m["Subject"]]):
        if time.monotonic() > deadline:
            pytest.fail(f"no email for run {run_id}:\n{gateway['processes'].log_text('notifier')[-3000:]}")
        time.sleep(1)
    (message,) = mail
    assert message["Destination"]["ToAddresses"] == ["gateway-user@example.com"]
    assert link in message["Body"]["text_part"] and "intel/onnx/b1/1769MB" in message["Body"]["html_part"]


def test_every_call_of_the_request_and_notifier_functions_is_granted_by_their_own_roles(gateway):
    """After the run above (upload, verify, submit, follow, results, email): the calls each
    process made, on their resources, are allowed by its function's own role (LocalStack does
    not enforce IAM; AWS would refuse the rest)."""
    calls = recorded(gateway["calls"])
    by = {(call.caller, call.action) for call in calls}
    assert {("request", "s3:PutObject"), ("request", "s3:DeleteObject"), ("request", "events:PutEvents")} <= by, by
    assert ("notifier", "ses:SendEmail") in by, by
    refused = not_granted(Deployment(gateway["prefix"], "us-east-1", "000000000000"), calls)
    assert refused == [], "called but not granted to the caller's role by infra/template.yaml:\n" + "\n".join(refused)


def sent_mail(sender: str) -> list[dict]:
    with urllib.request.urlopen(f"{os.environ['AWS_ENDPOINT_URL']}/_aws/ses?email={sender}", timeout=10) as response:
        return json.load(response)["messages"]
