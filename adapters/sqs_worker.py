"""A service's queue consumer on the real path: long-polls its SQS queue(s) with aiobotocore
and hands each event to the service's runner.

- While a handler works (conversion and measurement take minutes), a heartbeat keeps the
  message invisible to other workers; if this worker dies, the message reappears within
  `visibility_s` and another worker (or this one, restarted) takes it again.
- A message is deleted only once its handler finished; a failure leaves it to be retried
  (after a short back-off) and after 3 receives SQS moves it to the queue's DLQ. The last
  error is kept at `failures/{service}/{event id}.json`, so the DLQ report can say why.
- A malformed message, or an event of an unknown type or version, goes to the DLQ at once,
  with the reason logged and kept beside it. Nothing else stops.
- Each message of a batch is settled on its own: one bad message never blocks the others.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from dataclasses import dataclass, field

import structlog
from aiobotocore.session import get_session

from adapters.aws import envelope_from_sqs_body
from adapters.aws_calls import acting_as, record_calls
from core.ports import ObjectStore
from core.runtime import LoggedPublisher, ServiceRunner, dead_letter_failure
from schemas import keys
from schemas.events import Envelope, SchemaError

log = structlog.get_logger()


@dataclass
class QueueWorker:
    runner: ServiceRunner
    queue_names: list[str]
    queue_prefix: str
    visibility_s: int = 30
    batch_size: int = 10
    wait_s: int = 10
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def service(self) -> str:
        return self.runner.service.name

    async def run(self) -> None:
        async with get_session().create_client("sqs") as sqs:
            record_calls(sqs)
            urls = {
                name: (await sqs.get_queue_url(QueueName=f"{self.queue_prefix}-{name}"))["QueueUrl"]
                for name in self.queue_names
            }
            dlqs = {
                name: (await sqs.get_queue_url(QueueName=f"{self.queue_prefix}-{name}-dlq"))["QueueUrl"]
                for name in self.queue_names
            }
            log.info("worker_started", service=self.service, queues=self.queue_names)
            wait = self.wait_s if len(urls) == 1 else 1
            while not self.stopping.is_set():
                for name, url in urls.items():
                    if self.stopping.is_set():
                        break
                    response = await sqs.receive_message(
                        QueueUrl=url,
                        MaxNumberOfMessages=self.batch_size,
                        WaitTimeSeconds=wait,
                        VisibilityTimeout=self.visibility_s,
                        AttributeNames=["ApproximateReceiveCount"],
                    )
                    messages = response.get("Messages", [])
                    if messages:
                        await self._settle_batch(sqs, url, dlqs[name], messages)
            log.info("worker_stopped", service=self.service)

    async def _settle_batch(self, sqs, url: str, dlq_url: str, messages: list[dict]) -> None:
        pending = {m["ReceiptHandle"] for m in messages}
        heartbeat = asyncio.create_task(self._heartbeat(sqs, url, pending))
        try:
            for message in messages:
                await self._settle(sqs, url, dlq_url, message)
                pending.discard(message["ReceiptHandle"])
        finally:
            heartbeat.cancel()

    async def _heartbeat(self, sqs, url: str, pending: set[str]) -> None:
        while True:
            await asyncio.sleep(self.visibility_s / 3)
            for handle in list(pending):
                try:
                    await sqs.change_message_visibility(
                        QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=self.visibility_s
                    )
                except Exception as exc:  # the message may be gone already
                    log.warning("heartbeat_failed", service=self.service, error=str(exc))

    async def _settle(self, sqs, url: str, dlq_url: str, message: dict) -> None:
        receives = int(message.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
        try:
            envelope = envelope_from_sqs_body(message["Body"])
        except SchemaError as exc:
            log.error("poison_message", service=self.service, reason=str(exc), message_id=message["MessageId"])
            await sqs.send_message(
                QueueUrl=dlq_url,
                MessageBody=message["Body"],
                MessageAttributes={"reason": {"DataType": "String", "StringValue": str(exc)[:1000]}},
            )
            await sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
            return
        bound = log.bind(
            service=self.service,
            run_id=envelope.run_id,
            event_id=envelope.event_id,
            event_type=envelope.type,
            receives=receives,
        )
        try:
            await asyncio.to_thread(self.runner.handle, envelope)
        except Exception as exc:
            bound.exception("handler_failed")
            reason = f"{type(exc).__name__}: {exc}"[:1000]
            await asyncio.to_thread(
                self.runner.store.put_bytes,
                keys.failure(self.service, envelope.event_id),
                json.dumps({"reason": reason, "receives": receives}).encode(),
            )
            # retry soon rather than after the full visibility timeout
            await sqs.change_message_visibility(
                QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=min(2 * receives, 30)
            )
            return
        await sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


@dataclass
class DeadLetterWatcher:
    """Reports what lands in a DLQ: an event of one combination becomes that combination's
    `ComboFailed` (stage `dead_letter`, with the last error), so its run still ends. Every
    dead letter is kept at `dead-letters/{queue}/{message id}.json` before it is deleted."""

    store: ObjectStore
    publisher: LoggedPublisher
    queue_names: list[str]
    queue_prefix: str
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        with acting_as("dead-letters"):  # on AWS the dead-letter function does this, with a role of its own
            await self._watch()

    async def _watch(self) -> None:
        async with get_session().create_client("sqs") as sqs:
            record_calls(sqs)
            urls = {
                name: (await sqs.get_queue_url(QueueName=f"{self.queue_prefix}-{name}-dlq"))["QueueUrl"]
                for name in self.queue_names
            }
            while not self.stopping.is_set():
                for name, url in urls.items():
                    response = await sqs.receive_message(
                        QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1, MessageAttributeNames=["All"]
                    )
                    for message in response.get("Messages", []):
                        try:
                            await asyncio.to_thread(self.report, name, message)
                        except (
                            Exception
                        ):  # a dead letter that cannot be reported stays for the next pass; the watcher goes on
                            log.exception("dead_letter_report_failed", queue=name, message_id=message.get("MessageId"))
                            continue
                        await sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])

    def report(self, queue: str, message: dict) -> None:
        reason = message.get("MessageAttributes", {}).get("reason", {}).get("StringValue")
        report_dead_letter(self.store, self.publisher, queue, message["Body"], message["MessageId"], reason)


def report_dead_letter(
    store: ObjectStore, publisher, queue: str, body: str, message_id: str, reason: str | None
) -> None:
    """Keep what reached `queue`'s DLQ at `dead-letters/{queue}/{message id}.json` and publish
    what ends the work it stood for (`dead_letter_failure`). Used by the worker processes'
    `DeadLetterWatcher` and by the dead-letter Lambda function."""
    envelope: Envelope | None = None
    try:
        envelope = envelope_from_sqs_body(body)
    except SchemaError as exc:
        reason = reason or str(exc)
    if envelope is not None and reason is None:
        service = queue.split("-")[0]
        key = keys.failure(service, envelope.event_id)
        reason = json.loads(store.get_bytes(key))["reason"] if store.exists(key) else "failed 3 deliveries"
    store.put_bytes(
        keys.dead_letter(queue, message_id),
        json.dumps({"queue": queue, "reason": reason, "body": body, "at": time.time()}).encode(),
        if_absent=True,
    )
    failure = dead_letter_failure(envelope, reason) if envelope is not None else None
    log.error(
        "dead_letter",
        queue=queue,
        reason=reason,
        run_id=envelope.run_id if envelope else None,
        reported=failure is not None,
    )
    if failure is not None:
        publisher.publish([failure])


async def run_until_signalled(*tasks_of) -> None:
    """Run the workers until SIGTERM/SIGINT, then let them finish their current message."""
    loop = asyncio.get_running_loop()
    workers = list(tasks_of)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: [w.stopping.set() for w in workers])
    await asyncio.gather(*(w.run() for w in workers))
