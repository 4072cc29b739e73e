"""The real path's adapters: S3 for the object store, EventBridge for publishing, SQS for
delayed messages. Clients go where the environment says (`AWS_ENDPOINT_URL`: LocalStack in a
service process started for it, unset on AWS), or to an `AwsEndpoint` given explicitly (the CLI
on LocalStack)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from adapters.aws_calls import record_calls
from core.ports import NotFound
from core.routing import consumers
from schemas.events import Envelope

SQS_MAX_DELAY_S = 900
EVENTBRIDGE_SOURCE = "ayci"
# a conditional write that lost: the object changed (412), or a concurrent conditional write won (409)
CONDITION_FAILED = ("PreconditionFailed", "412", "ConditionalRequestConflict", "409")
_CLIENT_CONFIG = Config(retries={"max_attempts": 8, "mode": "adaptive"}, max_pool_connections=20)


@dataclass(frozen=True)
class AwsEndpoint:
    """Where AWS calls go when not to AWS itself (LocalStack): its address, region and
    credentials, given to each client rather than set in the process's environment."""

    url: str
    region: str = "us-east-1"
    access_key_id: str = "test"
    secret_access_key: str = "test"


def client(service: str, endpoint: AwsEndpoint | None = None):
    """A client of `service`: AWS as the environment configures it, or `endpoint`."""
    if endpoint is None:
        made = boto3.session.Session().client(service, config=_CLIENT_CONFIG)
    else:
        session = boto3.session.Session(
            aws_access_key_id=endpoint.access_key_id,
            aws_secret_access_key=endpoint.secret_access_key,
            region_name=endpoint.region,
        )
        made = session.client(service, endpoint_url=endpoint.url, config=_CLIENT_CONFIG)
    record_calls(made)
    return made


class S3Store:
    """The object store on S3, with the same keys as the local folder. Writes that must
    happen once are S3 conditional writes (`If-None-Match: *`); a compare-and-put is `If-Match`
    on the object's ETag."""

    def __init__(self, bucket: str, s3=None) -> None:
        self.bucket = bucket
        self.s3 = s3 or client("s3")

    def exists(self, key: str) -> bool:
        try:
            self.s3.head_object(Bucket=self.bucket, Key=key)
            return True
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
                return False
            raise

    def get_bytes(self, key: str) -> bytes:
        try:
            return self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
                raise NotFound(key) from exc
            raise

    def put_bytes(self, key: str, data: bytes, *, if_absent: bool = False) -> bool:
        try:
            if if_absent:
                self.s3.put_object(Bucket=self.bucket, Key=key, Body=data, IfNoneMatch="*")
            else:
                self.s3.put_object(Bucket=self.bucket, Key=key, Body=data)
            return True
        except ClientError as exc:
            if if_absent and exc.response["Error"]["Code"] in CONDITION_FAILED:
                return False
            raise

    def get_versioned(self, key: str) -> tuple[bytes, str]:
        try:
            answer = self.s3.get_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
                raise NotFound(key) from exc
            raise
        return answer["Body"].read(), answer["ETag"]

    def compare_and_put(self, key: str, data: bytes, *, version: str | None) -> str | None:
        condition = {"IfNoneMatch": "*"} if version is None else {"IfMatch": version}
        try:
            return self.s3.put_object(Bucket=self.bucket, Key=key, Body=data, **condition)["ETag"]
        except ClientError as exc:
            if exc.response["Error"]["Code"] in (*CONDITION_FAILED, "NoSuchKey", "404"):  # 404: deleted meanwhile
                return None
            raise

    def get_file(self, key: str, path: Path) -> None:
        try:
            self.s3.download_file(self.bucket, key, str(path))
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
                raise NotFound(key) from exc
            raise

    def put_file(self, key: str, path: Path) -> None:
        self.s3.upload_file(str(path), self.bucket, key)

    def list_keys(self, prefix: str) -> list[str]:
        keys = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            keys += [item["Key"] for item in page.get("Contents", [])]
        return sorted(keys)


def eventbridge_entry(envelope: Envelope, bus_name: str) -> dict:
    """One `PutEvents` entry: detail-type = event type, detail = the versioned envelope."""
    return {
        "Source": EVENTBRIDGE_SOURCE,
        "DetailType": envelope.type,
        "Detail": envelope.to_json(),
        "EventBusName": bus_name,
    }


class EventBridgePublisher:
    """Publishes on the bus; rules route each event type to its consumers' queues. A delayed
    event is sent straight to its consumers' queues with an SQS delay (at most 15 min; the
    consumer re-delays if it arrives early), shaped like an EventBridge delivery."""

    def __init__(self, bus_name: str, queue_prefix: str, events=None, sqs=None, copies: int = 1) -> None:
        self.bus_name = bus_name
        self.copies = copies
        self.queue_prefix = queue_prefix
        self.events = events or client("events")
        self.sqs = sqs or client("sqs")
        self._queue_urls: dict[str, str] = {}

    def publish(self, envelopes: list[Envelope]) -> None:
        envelopes = [e for e in envelopes for _ in range(self.copies)]
        for start in range(0, len(envelopes), 10):  # PutEvents takes 10 entries per call
            batch = envelopes[start : start + 10]
            response = self.events.put_events(Entries=[eventbridge_entry(e, self.bus_name) for e in batch])
            if response.get("FailedEntryCount"):
                failed = [
                    (e.type, r.get("ErrorMessage"))
                    for e, r in zip(batch, response["Entries"], strict=True)
                    if r.get("ErrorCode")
                ]
                raise RuntimeError(f"PutEvents failed for {failed}")

    def queue_url(self, name: str) -> str:
        if name not in self._queue_urls:
            self._queue_urls[name] = self.sqs.get_queue_url(QueueName=f"{self.queue_prefix}-{name}")["QueueUrl"]
        return self._queue_urls[name]

    def publish_at(self, envelope: Envelope, when: datetime) -> None:
        delay = int(min(SQS_MAX_DELAY_S, max(0, (when - datetime.now(UTC)).total_seconds() + 1)))
        body = json.dumps(
            {
                "version": "0",
                "detail-type": envelope.type,
                "source": EVENTBRIDGE_SOURCE,
                "time": envelope.time.isoformat(),
                "detail": json.loads(envelope.to_json()),
            }
        )
        for name in consumers(envelope):
            self.sqs.send_message(QueueUrl=self.queue_url(name), MessageBody=body, DelaySeconds=delay)


def envelope_from_sqs_body(body: str) -> Envelope:
    """The envelope inside an SQS message that EventBridge delivered (`detail`)."""
    try:
        message = json.loads(body)
    except ValueError as exc:
        from schemas.events import SchemaError

        raise SchemaError(f"message body is not JSON: {exc}") from exc
    detail = message.get("detail", message) if isinstance(message, dict) else message
    return Envelope.parse(detail)
