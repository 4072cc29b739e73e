"""A record of the AWS actions this process calls, to check them against the IAM policies
the template grants (`tests/integration/test_aws_pipeline.py` for the services on LocalStack,
`tests/unit/test_measuring_function.py` for the Lambda control plane of the measuring functions).

Off unless `AYCI_RECORD_AWS_CALLS` names a folder: then every boto3/aiobotocore client made
by the adapters appends one line per API call to a file of this process in that folder:
who called (the function it stands for: `AYCI_RECORD_AWS_AS`, or `acting_as(...)` around a
block), `service:Operation` and the resource it acted on (a bucket/key, a queue, a bus, a
function[:qualifier], a sender, a secret). The operation names are botocore's; `iam_action`
maps them to the IAM actions that authorize them, `Call.arn` the resource to its ARN, so each
function's calls can be checked against its own role (`tests/iam_roles.py`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import NamedTuple

ENV = "AYCI_RECORD_AWS_CALLS"
CALLER_ENV = "AYCI_RECORD_AWS_AS"  # the function this process stands for (infra/localstack.py sets it)
_acting_as: ContextVar[str | None] = ContextVar("aws_calls_acting_as", default=None)

# botocore operations authorized by an IAM action of another name
_S3_ACTIONS = {
    "HeadObject": "s3:GetObject",
    "ListObjectsV2": "s3:ListBucket",
    "ListObjects": "s3:ListBucket",
    "CopyObject": "s3:GetObject",  # and s3:PutObject on the target
    "CreateMultipartUpload": "s3:PutObject",
    "UploadPart": "s3:PutObject",
    "CompleteMultipartUpload": "s3:PutObject",
    "AbortMultipartUpload": "s3:AbortMultipartUpload",
}
_LAMBDA_ACTIONS = {"Invoke": "lambda:InvokeFunction"}
_SIGNING_PREFIX = {"sqs": "sqs", "s3": "s3", "events": "events", "ses": "ses", "sesv2": "ses", "lambda": "lambda"}


def iam_action(service: str, operation: str) -> str:
    if service == "s3" and operation in _S3_ACTIONS:
        return _S3_ACTIONS[operation]
    if service == "lambda" and operation in _LAMBDA_ACTIONS:
        return _LAMBDA_ACTIONS[operation]
    return f"{_SIGNING_PREFIX.get(service, service)}:{operation}"


@contextmanager
def acting_as(caller: str) -> Iterator[None]:
    """Record the calls made in this block (this thread or task) as `caller`'s."""
    token = _acting_as.set(caller)
    try:
        yield
    finally:
        _acting_as.reset(token)


def _resource(service: str, operation: str, params: dict) -> str:
    """What the call acts on, without region or account (`Call.arn` adds them)."""
    if service == "s3":
        bucket, key = params.get("Bucket", ""), params.get("Key")
        return f"{bucket}/{key}" if key is not None else bucket
    if service == "sqs":
        return params.get("QueueName") or params.get("QueueUrl", "").rstrip("/").rsplit("/", 1)[-1]
    if service == "events":
        entries = params.get("Entries") or [{}]
        return (entries[0].get("EventBusName") or "default").rsplit("/", 1)[-1]
    if service == "lambda":
        name, qualifier = params.get("FunctionName", ""), params.get("Qualifier")
        return f"{name}:{qualifier}" if qualifier else name
    if service in ("ses", "sesv2"):
        return params.get("Source") or params.get("FromEmailAddress") or ""
    if service == "secretsmanager":
        return params.get("SecretId", "")
    return ""


def record_calls(client) -> None:
    """Record `client`'s API calls if asked to (see the module's docstring)."""
    folder = os.environ.get(ENV)
    if not folder:
        return
    path = Path(folder) / f"calls-{os.getpid()}.txt"
    service = client.meta.service_model.service_name

    def write(operation: str, resource: str) -> None:
        caller = _acting_as.get() or os.environ.get(CALLER_ENV, "")
        with open(path, "a") as out:
            out.write(f"{caller}\t{service}:{operation}\t{resource}\n")

    def on_call(params, model, context=None, **_) -> None:
        if (context or {}).get("is_presign_request") and model.name == "CreateBucket":
            return  # botocore's presigned POST borrows CreateBucket's model: no call (the signature is, below)
        write(model.name, _resource(service, model.name, params or {}))

    def on_presigned_post(request, **_) -> None:
        """A presigned POST is an upload this role signs: S3 authorizes it as the signer's PutObject."""
        fields = request.context.get("s3-presign-post-fields")
        if fields is None:
            return
        conditions = request.context.get("s3-presign-post-policy", {}).get("conditions", [])
        bucket = next((c["bucket"] for c in conditions if isinstance(c, dict) and "bucket" in c), "")
        write("PutObject", f"{bucket}/{fields['key']}")

    # before the request is built: the call's own parameters (and before any stand-in answer)
    client.meta.events.register("before-parameter-build", on_call)
    client.meta.events.register("before-sign.s3.PutObject", on_presigned_post)


class Call(NamedTuple):
    caller: str  # the function the call was made for ("" when not said)
    service: str
    operation: str
    resource: str

    @property
    def action(self) -> str:
        return iam_action(self.service, self.operation)

    def arn(self, region: str, account: str, partition: str = "aws") -> str:
        """The ARN IAM authorizes this call on."""
        head = f"arn:{partition}:{self.service if self.service != 'sesv2' else 'ses'}:{region}:{account}"
        if self.service == "s3":
            return f"arn:{partition}:s3:::{self.resource}"
        if self.service == "sqs":
            return f"{head}:{self.resource}"
        if self.service == "events":
            return f"{head}:event-bus/{self.resource}"
        if self.service == "lambda":
            return f"{head}:function:{self.resource}"
        if self.service in ("ses", "sesv2"):
            return f"{head}:identity/{self.resource}"
        if self.service == "secretsmanager" and self.resource.startswith("arn:"):
            return self.resource
        return f"{head}:{self.resource}"


def _lines(folder: Path) -> Iterator[str]:
    for path in Path(folder).glob("calls-*.txt"):
        yield from path.read_text().splitlines()


def recorded(folder: Path) -> set[Call]:
    """Every call recorded in `folder`: who made it, what, on what."""
    calls = set()
    for line in _lines(folder):
        caller, call, resource = line.split("\t", 2)
        service, _, operation = call.partition(":")
        calls.add(Call(caller, service, operation, resource))
    return calls


def recorded_calls(folder: Path) -> set[tuple[str, str]]:
    """Every (service, operation) recorded in `folder`."""
    return {(call.service, call.operation) for call in recorded(folder)}
