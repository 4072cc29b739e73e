"""The real path on LocalStack: every service its own process (`python -m services.<name>`),
events through EventBridge -> SQS, objects in S3. Real engines on a tiny model."""

from __future__ import annotations

import json
import signal
import time
import uuid

import boto3
import pytest

from adapters.aws_calls import CALLER_ENV, ENV, acting_as, recorded
from ayci.bootstrap import aws
from ayci.settings import Settings
from infra import localstack as cloud
from schemas import keys
from schemas.combos import Combo, Matrix, combo_key
from schemas.events import ComboPending, RequestSubmitted, RunPlanned
from services.request.replay import replay, stored_events
from services.request.submission import new_run, store_model
from tests.conftest import TINY_IMAGE_SIZE
from tests.iam_roles import Deployment, not_granted

pytestmark = pytest.mark.localstack
RUN_TIMEOUT_S = 240
DEADLINE_S = 15  # the deadline test's run (its intel combination is a stored result, reused at once)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    prefix = f"t{uuid.uuid4().hex[:6]}"
    outputs = cloud.deploy(prefix)
    calls = tmp_path_factory.mktemp("aws-calls")  # every AWS action the services call (test_iam_grants)
    env = cloud.service_env(
        outputs, prefix, {"AYCI_MEASURE_TIME_CAP_S": "1", "AYCI_MEASURE_MIN_ITERATIONS": "5", ENV: str(calls)}
    )
    processes = cloud.ServiceProcesses(env=env, log_dir=tmp_path_factory.mktemp("service-logs"))
    processes.start_all()
    with pytest.MonkeyPatch.context() as patch:
        for name in ("AYCI_BUCKET", "AYCI_BUS_NAME", "AYCI_QUEUE_PREFIX"):
            patch.setenv(name, env[name])
        patch.setenv(ENV, str(calls))  # the test acts as the request service: its calls count too
        patch.setenv(CALLER_ENV, "request")  # (its own checks and set-ups are `acting_as("test")`)
        yield {"prefix": prefix, "outputs": outputs, "processes": processes, "wiring": aws(Settings()), "calls": calls}
    processes.stop_all()
    from infra.stack import delete_stack

    delete_stack(prefix, empty_bucket=True)


def submit(stack, model_path, optimizers=("onnx",), memory=(1769,), **extra) -> tuple[str, RequestSubmitted]:
    wiring = stack["wiring"]
    model = store_model(wiring.store, model_path, "image_classification", TINY_IMAGE_SIZE)
    matrix = Matrix(optimizers={"intel": list(optimizers)}, batch_sizes=[1], memory_sizes_mb=list(memory))
    request = RequestSubmitted(model=model, matrix=matrix, **extra)
    envelope = new_run(request)
    wiring.publisher.publish([envelope])
    return envelope.run_id, request


def wait_summary(stack, run_id: str, timeout: float = RUN_TIMEOUT_S) -> dict:
    store = stack["wiring"].store
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if store.exists(keys.summary(run_id)):
            return json.loads(store.get_bytes(keys.summary(run_id)))
        for name, process in stack["processes"].processes.items():
            assert process.poll() is None, f"{name} died:\n{stack['processes'].log_text(name)[-3000:]}"
        time.sleep(0.25)  # a HEAD on LocalStack: a second here was half a second lost per run on average
    logs = "\n".join(f"--- {n}\n{stack['processes'].log_text(n)[-2000:]}" for n in stack["processes"].processes)
    raise AssertionError(f"run {run_id} did not end in {timeout} s\n{logs}")


def test_every_worker_starts_polling_and_the_converter_parent_never_imports_torch(stack):
    """Every worker process polls its queues. The converter's own process never imports torch:
    conversion (and any model code) runs only in the sandboxed child, so a warm-up in the parent
    would buy nothing and a model's import-time work cannot reach the long-lived process."""
    processes = stack["processes"]
    processes.wait_started(timeout=180)
    for name in processes.processes:
        assert '"worker_started"' in processes.log_text(name), processes.log_text(name)[-2000:]
    converter = processes.log_text("converter")
    assert '"warmed_up"' not in converter, converter[-2000:]


def test_complete_run_then_replay_from_model_converted(stack, tiny_image_model):
    run_id, _ = submit(stack, tiny_image_model, optimizers=("base", "onnx"), force=True)
    summary = wait_summary(stack, run_id)
    assert summary["status"] == "complete", summary["failures"]
    assert len(summary["results"]) == 2
    assert all(r["agreement"]["score"] == 1.0 and not r["reused"] for r in summary["results"])
    store, publisher = stack["wiring"].store, stack["wiring"].publisher
    log = store.list_keys(f"runs/{run_id}/events/")
    assert {k.split("-")[1] for k in (key.rsplit("/", 1)[1] for key in log)} >= {
        "RequestSubmitted",
        "RunPlanned",
        "ComboPending",
        "ModelConverted",
        "InferenceDone",
        "RunArchived",
    }

    # replay from ModelConverted, forced: a new run linked to the original, measured again
    envelopes = replay(store, run_id, "ModelConverted", force=True)
    publisher.publish(envelopes)
    forced = wait_summary(stack, envelopes[0].run_id)
    assert forced["status"] == "complete" and forced["request"]["replay_of"] == run_id
    assert len(forced["results"]) == 2 and not any(r["reused"] for r in forced["results"])
    assert {r["measured_at"] for r in forced["results"]}.isdisjoint(r["measured_at"] for r in summary["results"])
    # without --force the stored results are reused
    envelopes = replay(store, run_id, "ModelConverted")
    publisher.publish(envelopes)
    reused = wait_summary(stack, envelopes[0].run_id)
    assert reused["status"] == "complete" and all(r["reused"] for r in reused["results"])


def test_partial_and_all_failed_runs_end_with_a_status(stack, tiny_image_model):
    partial_id, _ = submit(stack, tiny_image_model, optimizers=("base",), memory=(128, 1769))
    all_failed_id, _ = submit(stack, tiny_image_model, optimizers=("onnx",), memory=(128,))
    partial = wait_summary(stack, partial_id)
    assert partial["status"] == "partial"
    assert [f["combo"]["memory_mb"] for f in partial["failures"]] == [128]
    assert partial["failures"][0]["stage"] == "plan"
    assert "128 MB cannot hold them" in partial["failures"][0]["reason"]
    failed = wait_summary(stack, all_failed_id)
    assert failed["status"] == "failed" and not failed["results"]
    # ONNX Runtime's floor fits in 128 MB on paper: this one reached a worker and ran out there
    assert failed["failures"][0]["stage"] == "inference"
    assert "out of memory at 128 MB" in failed["failures"][0]["reason"]


def test_every_event_delivered_twice_changes_nothing(stack, tiny_image_model):
    """Publish every event of a run twice (the request included) while it runs: one result per
    combination, one summary, an event log without duplicates."""
    copies_env = {**stack["processes"].env, "AYCI_PUBLISH_COPIES": "2"}
    doubled = cloud.ServiceProcesses(env=copies_env, log_dir=stack["processes"].log_dir / "doubled")
    stack["processes"].stop_all()
    doubled.start_all()
    try:
        wiring = aws(Settings(publish_copies=2))
        model = store_model(wiring.store, tiny_image_model, "image_classification", TINY_IMAGE_SIZE)
        matrix = Matrix(optimizers={"intel": ["onnx"]}, batch_sizes=[1, 2], memory_sizes_mb=[1769])
        envelope = new_run(RequestSubmitted(model=model, matrix=matrix, force=True))
        wiring.publisher.publish([envelope])
        stack_view = {**stack, "processes": doubled}
        summary = wait_summary(stack_view, envelope.run_id)
        time.sleep(5)  # let the second copies drain
        assert summary["status"] == "complete" and len(summary["results"]) == 2
        log = wiring.store.list_keys(f"runs/{envelope.run_id}/events/")
        event_ids = [key.rsplit("-", 5)[-5:] for key in log]
        assert len(log) == len({tuple(e) for e in event_ids})
        assert sum("RunArchived" in k for k in log) == 1
        # one InferenceDone per measurement: each combination's quick pass, and a refinement for those racing kept
        done = [
            (e.payload.combo_key, e.payload.refine)
            for e in stored_events(wiring.store, envelope.run_id)
            if e.type == "InferenceDone"
        ]
        assert len(done) == len(set(done)) and {k for k, _ in done} == {r["combo_key"] for r in summary["results"]}
        assert json.loads(wiring.store.get_bytes(keys.summary(envelope.run_id))) == summary
    finally:
        doubled.stop_all()
        stack["processes"].processes.clear()
        stack["processes"].start_all()


def test_poison_messages_go_to_the_dlq_and_the_run_still_ends(stack, tiny_image_model):
    store, publisher = stack["wiring"].store, stack["wiring"].publisher
    sqs = boto3.client("sqs")
    dedup_url = sqs.get_queue_url(QueueName=f"{stack['prefix']}-dedup")["QueueUrl"]
    sqs.send_message(QueueUrl=dedup_url, MessageBody="{this is not json")
    sqs.send_message(QueueUrl=dedup_url, MessageBody=json.dumps({"detail": {"type": "Mystery", "schema_version": 1}}))
    old_request = {
        "event_id": "e",
        "type": "RequestSubmitted",
        "schema_version": 1,
        "run_id": "r",
        "time": "2026-01-01T00:00:00Z",
        "producer": "x",
        "payload": {"model": {}},
    }
    for body in ("[]", "123", "null", json.dumps({"detail": old_request})):  # each once killed the worker
        sqs.send_message(QueueUrl=dedup_url, MessageBody=body)

    # a planned run whose one combination names a model that is not stored: the converter
    # fails on it every time, SQS dead-letters it after 3 receives, the run ends partial
    model = store_model(store, tiny_image_model, "image_classification", TINY_IMAGE_SIZE)
    ghost = model.model_copy(update={"sha256": "f" * 64})
    good = Combo(hardware="intel", optimizer="onnx", batch_size=1, memory_mb=1769)
    bad = Combo(hardware="intel", optimizer="onnx", batch_size=2, memory_mb=1769)
    good_key, bad_key = combo_key(model, good), combo_key(ghost, bad)
    request = RequestSubmitted(
        model=model, matrix=Matrix(optimizers={"intel": ["onnx"]}, batch_sizes=[1], memory_sizes_mb=[1769]), force=True
    )
    start = new_run(request)
    from datetime import UTC, datetime, timedelta

    plan = RunPlanned(
        model=model,
        combos={good_key: good, bad_key: bad},
        deadline=datetime.now(UTC) + timedelta(minutes=10),
        request=request,
    )
    pending = [
        ComboPending(model=model, combo=good, combo_key=good_key, artifact_key=uuid.uuid4().hex, target_cpu="x86_64"),
        ComboPending(model=ghost, combo=bad, combo_key=bad_key, artifact_key=uuid.uuid4().hex, target_cpu="x86_64"),
    ]
    publisher.publish([start.caused(p, producer="test", index=i) for i, p in enumerate([plan, *pending])])
    summary = wait_summary(stack, start.run_id)
    assert summary["status"] == "partial"
    (failure,) = summary["failures"]
    assert failure["combo_key"] == bad_key and failure["stage"] == "dead_letter"
    assert "NotFound" in failure["reason"] or "models/" in failure["reason"]
    with acting_as("test"):
        letters = [json.loads(store.get_bytes(k)) for k in store.list_keys("dead-letters/")]
    reasons = " ".join(letter["reason"] for letter in letters)
    assert "not JSON" in reasons and "unknown event type 'Mystery'" in reasons
    assert "an event must be a JSON object" in reasons and "RequestSubmitted v1 cannot be upcast" in reasons
    assert sum(letter["queue"] == "dedup" for letter in letters) >= 6
    for name in ("dedup", "converter", "archiver"):
        assert stack["processes"].processes[name].poll() is None  # nothing else stopped


def test_worker_killed_mid_combination_is_retried(stack, tiny_image_model):
    processes = stack["processes"]
    # exact: one measurement per combination (racing's quick pass and refinement are the doubled-delivery test's)
    run_id, _ = submit(
        stack, tiny_image_model, optimizers=("onnx",), memory=(1769, 3538), force=True, precision="exact"
    )
    deadline = time.monotonic() + 120
    while "measurement_started" not in processes.log_text("inference-intel").split("worker_started")[-1]:
        assert time.monotonic() < deadline, processes.log_text("inference-intel")[-2000:]
        time.sleep(0.2)
    processes.kill("inference-intel", signal.SIGKILL)
    processes.start("inference-intel", "inference", ["--hardware", "intel"])
    summary = wait_summary(stack, run_id)
    assert summary["status"] == "complete", summary["failures"]
    assert len(summary["results"]) == 2
    assert sum("InferenceDone" in k for k in stack["wiring"].store.list_keys(f"runs/{run_id}/events/")) == 2


def test_two_converters_share_the_work(stack, tiny_image_model):
    processes = stack["processes"]
    processes.start("converter-2", "converter")
    try:
        wiring = stack["wiring"]
        model = store_model(wiring.store, tiny_image_model, "image_classification", TINY_IMAGE_SIZE)
        matrix = Matrix(optimizers={"intel": ["onnx"]}, batch_sizes=[3, 5, 6, 7], memory_sizes_mb=[1769])
        envelope = new_run(RequestSubmitted(model=model, matrix=matrix, force=True))
        wiring.publisher.publish([envelope])
        summary = wait_summary(stack, envelope.run_id)
        assert summary["status"] == "complete" and len(summary["results"]) == 4
        conversions = {
            name: sum(
                1
                for line in processes.log_text(name).splitlines()
                if "conversion_done" in line and envelope.run_id in line
            )
            for name in ("converter", "converter-2")
        }
        assert all(count >= 1 for count in conversions.values()), conversions
        assert sum(conversions.values()) == 4
    finally:
        processes.kill("converter-2", signal.SIGTERM)
        del processes.processes["converter-2"]


def test_run_ends_at_its_deadline_naming_what_never_reported(stack, tiny_image_model):
    """No arm worker runs here: the arm combination never reports, and the archiver closes the
    run at its deadline (a delayed message) as partial. The intel combination's result is stored
    first (after the tests above, a reuse of theirs in a few seconds), so it reports at once and a
    short deadline (DEADLINE_S) cannot cut it: the test waits out the deadline, not a measurement."""
    intel_first, _ = submit(stack, tiny_image_model)
    assert wait_summary(stack, intel_first)["status"] == "complete"
    wiring = stack["wiring"]
    model = store_model(wiring.store, tiny_image_model, "image_classification", TINY_IMAGE_SIZE)
    matrix = Matrix(optimizers={"intel": ["onnx"], "arm": ["onnx"]}, batch_sizes=[1], memory_sizes_mb=[1769])
    envelope = new_run(RequestSubmitted(model=model, matrix=matrix, deadline_s=DEADLINE_S))
    wiring.publisher.publish([envelope])
    summary = wait_summary(stack, envelope.run_id, timeout=180)
    assert summary["status"] == "partial" and summary["closed_at_deadline"]
    (missing,) = summary["failures"]
    assert missing["combo"]["hardware"] == "arm" and missing["stage"] == "deadline"
    assert "never reported" in missing["reason"]


def test_lambda_entrypoint_reports_only_the_failed_records(stack, tiny_image_model):
    """The dedup Lambda handler on an SQS event of two records: the malformed one is reported
    in `batchItemFailures`, the good one is handled (its run gets planned)."""
    from adapters.aws import eventbridge_entry
    from services.dedup.lambda_handler import handler

    wiring = stack["wiring"]
    model = store_model(wiring.store, tiny_image_model, "image_classification", TINY_IMAGE_SIZE)
    envelope = new_run(
        RequestSubmitted(
            model=model, matrix=Matrix(optimizers={"intel": ["onnx"]}, batch_sizes=[1], memory_sizes_mb=[1769])
        )
    )
    good_body = json.dumps(
        {"detail-type": envelope.type, "detail": json.loads(eventbridge_entry(envelope, "bus")["Detail"])}
    )

    def record(message_id: str, body: str) -> dict:
        return {
            "messageId": message_id,
            "receiptHandle": "r",
            "body": body,
            "attributes": {"ApproximateReceiveCount": "1"},
            "messageAttributes": {},
            "md5OfBody": "",
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:q",
            "awsRegion": "us-east-1",
        }

    with acting_as("dedup"):  # the dedup function's handler, run here
        response = handler({"Records": [record("good", good_body), record("bad", "{broken")]}, None)
    assert response == {"batchItemFailures": [{"itemIdentifier": "bad"}]}
    with acting_as("test"):
        assert wiring.store.exists(f"processed/dedup/{envelope.event_id}")
    summary = wait_summary(stack, envelope.run_id)  # the planned run goes on through the workers
    assert summary["status"] == "complete"


def test_the_dead_letter_lambda_ends_the_run_of_a_dead_lettered_request(stack, tiny_image_model):
    """On Lambda, nothing watches the DLQs but this function: a request that dedup failed three
    times ends its run (failed, with the reason) instead of leaving it running forever."""
    from services.archiver.dead_letter_lambda import handler

    wiring = stack["wiring"]
    model = store_model(wiring.store, tiny_image_model, "image_classification", TINY_IMAGE_SIZE)
    envelope = new_run(
        RequestSubmitted(
            model=model, matrix=Matrix(optimizers={"intel": ["onnx"]}, batch_sizes=[1], memory_sizes_mb=[1769])
        )
    )
    with acting_as("test"):  # what the dedup worker would have kept
        wiring.store.put_bytes(
            keys.failure("dedup", envelope.event_id),
            json.dumps({"reason": "RuntimeError: dedup is broken", "receives": 3}).encode(),
        )
    body = json.dumps({"detail-type": envelope.type, "detail": json.loads(envelope.to_json())})
    record = {
        "messageId": "m1",
        "receiptHandle": "r",
        "body": body,
        "attributes": {"ApproximateReceiveCount": "1"},
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "awsRegion": "us-east-1",
        "eventSourceARN": f"arn:aws:sqs:us-east-1:000000000000:{stack['prefix']}-dedup-dlq",
    }
    with acting_as("dead-letters"):  # the dead-letter function's handler, run here
        assert handler({"Records": [record]}, None) == {"batchItemFailures": []}
    summary = wait_summary(stack, envelope.run_id)
    assert summary["status"] == "failed" and not summary["results"]
    (failure,) = summary["failures"]
    assert failure["stage"] == "dead_letter" and "dedup is broken" in failure["reason"]
    with acting_as("test"):
        assert wiring.store.exists(keys.dead_letter("dedup", "m1"))


def test_every_aws_call_a_service_made_is_granted_by_its_own_role(stack):
    """LocalStack does not enforce IAM: a call the role does not grant works here and fails on
    AWS (as `sqs:GetQueueUrl` did: every RunPlanned dead-lettered). Each process stands for a
    function (`infra/localstack.py`; the archiver's dead-letter watcher for the dead-letter
    function), and each call it made, on the resource it made it on, must be allowed by that
    function's own role in `infra/template.yaml`. Runs last in this module, after every kind of
    run above, so it has seen what the services call."""
    calls = recorded(stack["calls"])
    actions = {call.action for call in calls}
    assert {"sqs:ReceiveMessage", "events:PutEvents", "s3:PutObject", "sqs:SendMessage"} <= actions, actions
    callers = {call.caller for call in calls}
    assert {"request", "dedup", "converter", "inference-intel", "archiver", "notifier", "dead-letters"} <= callers
    deployment = Deployment(stack["prefix"], "us-east-1", "000000000000")  # LocalStack's account
    assert stack["outputs"].bucket == deployment.bucket
    refused = not_granted(deployment, calls)
    assert refused == [], "called but not granted to the caller's role by infra/template.yaml:\n" + "\n".join(refused)
