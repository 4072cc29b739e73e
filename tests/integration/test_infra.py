"""The CloudFormation stack on LocalStack: every event type reaches exactly the queues that
`core.routing.ROUTES` names (so template and routing table agree), and a message that keeps
failing ends in its queue's DLQ."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest

from core.routing import ROUTES
from infra.stack import DEFAULT_SENDER, StackOutputs, delete_stack, deploy_stack

pytestmark = pytest.mark.localstack

# VisibilityTimeout per service, as the template declares it.
VISIBILITY_TIMEOUTS = {
    "dedup": 60,
    "converter": 900,
    "inference-intel": 900,
    "inference-arm": 900,
    "archiver": 60,
    "notifier": 60,
}


@pytest.fixture(scope="module")
def stack() -> Iterator[StackOutputs]:
    """A stack of its own (unique prefix), so tests sharing the LocalStack don't interfere."""
    name = f"ayci-test-{uuid.uuid4().hex[:8]}"
    outputs = deploy_stack(stack_name=name, prefix=name)
    yield outputs
    delete_stack(stack_name=name, empty_bucket=True)


def envelope(event_type: str, payload: dict[str, Any]) -> dict[str, Any]:
    """An event envelope as producers put it in the EventBridge `detail`."""
    return {
        "event_id": str(uuid.uuid4()),
        "type": event_type,
        "schema_version": 1,
        "run_id": "run-infra-test",
        "time": datetime.now(UTC).isoformat(),
        "producer": "test_infra",
        "causation_id": None,
        "payload": payload,
    }


def put(stack: StackOutputs, events: list[dict[str, Any]]) -> None:
    entries = [
        {"EventBusName": stack.bus_name, "Source": "ayci.test", "DetailType": e["type"], "Detail": json.dumps(e)}
        for e in events
    ]
    for start in range(0, len(entries), 10):  # PutEvents takes at most 10
        response = boto3.client("events").put_events(Entries=entries[start : start + 10])
        assert response["FailedEntryCount"] == 0, response


def drain(stack: StackOutputs, expected_total: int, timeout_s: float = 10.0) -> list[tuple[str, dict[str, Any]]]:
    """Receive and delete everything in the service queues: (service, EventBridge event)
    pairs. Waits until `expected_total` arrived (delivery is asynchronous on AWS), then
    one more round to catch any extra."""
    sqs = boto3.client("sqs")
    received: list[tuple[str, dict[str, Any]]] = []
    deadline = time.monotonic() + timeout_s
    extra_round = False
    while True:
        got_any = False
        for service, url in stack.queue_urls.items():
            messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
            for message in messages.get("Messages", []):
                got_any = True
                received.append((service, json.loads(message["Body"])))
                sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        if got_any:
            continue
        if extra_round or time.monotonic() > deadline:
            return received
        if len(received) >= expected_total:
            extra_round = True
            time.sleep(0.5)
        else:
            time.sleep(0.2)


def test_outputs_name_every_queue_and_its_dlq(stack: StackOutputs) -> None:
    sqs = boto3.client("sqs")
    assert set(stack.queue_urls) == set(VISIBILITY_TIMEOUTS)
    assert set(stack.dlq_urls) == set(VISIBILITY_TIMEOUTS)
    assert stack.bus_name == f"{stack.stack_name}-bus"
    boto3.client("s3").head_bucket(Bucket=stack.bucket)
    for service, url in stack.queue_urls.items():
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        assert attributes["QueueArn"] == stack.queue_arns[service]
        assert int(attributes["VisibilityTimeout"]) == VISIBILITY_TIMEOUTS[service]
        redrive = json.loads(attributes["RedrivePolicy"])
        dlq_arn = sqs.get_queue_attributes(QueueUrl=stack.dlq_urls[service], AttributeNames=["QueueArn"])
        assert redrive["deadLetterTargetArn"] == dlq_arn["Attributes"]["QueueArn"]
        assert int(redrive["maxReceiveCount"]) == 3


def test_each_event_type_reaches_exactly_its_consumers(stack: StackOutputs) -> None:
    events: list[dict[str, Any]] = []
    expected: dict[str, list[str]] = {}  # event id -> services, sorted
    for event_type, services in ROUTES.items():
        hardwares = ("intel", "arm") if any("{hardware}" in s for s in services) else (None,)
        for hardware in hardwares:
            payload = {"combo": {"hardware": hardware, "optimizer": "base"}} if hardware else {}
            event = envelope(event_type, payload)
            events.append(event)
            expected[event["event_id"]] = sorted(s.format(hardware=hardware) for s in services)
    # Events no rule takes: an unknown hardware, an unknown type.
    for event in (envelope("ModelConverted", {"combo": {"hardware": "riscv"}}), envelope("NoSuchEvent", {})):
        events.append(event)
        expected[event["event_id"]] = []

    put(stack, events)
    received = drain(stack, expected_total=sum(len(s) for s in expected.values()))

    arrived: dict[str, list[str]] = {event_id: [] for event_id in expected}
    for service, event in received:
        # The target input is the whole EventBridge event; the envelope is its detail.
        assert event["detail-type"] == event["detail"]["type"]
        arrived[event["detail"]["event_id"]].append(service)
    assert {k: sorted(v) for k, v in arrived.items()} == expected
    # intel and arm kept apart: each inference queue gets one event of each type routed by hardware
    by_hardware = sum(any("{hardware}" in s for s in services) for services in ROUTES.values())
    assert by_hardware >= 1
    assert Counter(s for s, _ in received)["inference-intel"] == by_hardware
    assert Counter(s for s, _ in received)["inference-arm"] == by_hardware


def test_message_failing_three_times_moves_to_the_dlq(stack: StackOutputs) -> None:
    sqs = boto3.client("sqs")
    url, dlq_url = stack.queue_urls["dedup"], stack.dlq_urls["dedup"]
    event = envelope("RequestSubmitted", {})
    put(stack, [event])

    def ours(messages: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            m for m in messages.get("Messages", []) if json.loads(m["Body"])["detail"]["event_id"] == event["event_id"]
        ]

    # Receive without deleting, as a consumer that keeps failing does; VisibilityTimeout=0
    # makes the message visible again at once instead of after 60 s.
    receipts = 0
    for _ in range(10):
        if not ours(sqs.receive_message(QueueUrl=url, VisibilityTimeout=0, WaitTimeSeconds=1)):
            break
        receipts += 1
    assert receipts == 3

    dead = ours(sqs.receive_message(QueueUrl=dlq_url, MaxNumberOfMessages=10, WaitTimeSeconds=5))
    assert len(dead) == 1
    sqs.delete_message(QueueUrl=dlq_url, ReceiptHandle=dead[0]["ReceiptHandle"])


def test_sender_identity_is_verified(stack: StackOutputs) -> None:
    attributes = boto3.client("ses").get_identity_verification_attributes(Identities=[DEFAULT_SENDER])
    assert attributes["VerificationAttributes"][DEFAULT_SENDER]["VerificationStatus"] == "Success"


def test_deploying_again_reuses_the_stack(stack: StackOutputs) -> None:
    assert deploy_stack(stack_name=stack.stack_name, prefix=stack.stack_name) == stack
