"""A record of the AWS actions this process calls, to check them against the IAM policies
the template grants (`tests/integration/test_aws_pipeline.py` for the services on LocalStack,
`tests/unit/test_measuring_function.py` for the Lambda control plane of the measuring functions).

Off unless `AYCI_RECORD_AWS_CALLS` names a folder: then every boto3/aiobotocore client made
by the adapters appends one line per API call, `service:Operation`, to a file of this
process in that folder. The operation names are botocore's; `iam_action` maps them to the
IAM actions that authorize them.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "AYCI_RECORD_AWS_CALLS"

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


def record_calls(client) -> None:
    """Record `client`'s API calls if asked to (see the module's docstring)."""
    folder = os.environ.get(ENV)
    if not folder:
        return
    path = Path(folder) / f"calls-{os.getpid()}.txt"
    service = client.meta.service_model.service_name

    def on_call(model, **_) -> None:
        with open(path, "a") as out:
            out.write(f"{service}:{model.name}\n")

    client.meta.events.register("before-call", on_call)


def recorded_calls(folder: Path) -> set[tuple[str, str]]:
    """Every (service, operation) recorded in `folder`."""
    calls = set()
    for path in Path(folder).glob("calls-*.txt"):
        for line in path.read_text().splitlines():
            service, _, operation = line.partition(":")
            calls.add((service, operation))
    return calls
