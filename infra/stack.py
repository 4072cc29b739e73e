"""Deploy, read and delete the AYCI stack (`infra/template.yaml`) with CloudFormation.

The same code serves AWS and LocalStack (`scripts/localstack.sh start`). The endpoint is
`endpoint_url` if given (with LocalStack's credentials, passed to the client), else
`AWS_ENDPOINT_URL` if set, else AWS as the environment configures it; with an endpoint
the stack is deployed with `Platform=localstack`, which leaves out what LocalStack cannot
create, and the SES sender is verified with SES v1 `verify_email_identity` instead.

    python -m infra deploy --stack NAME [--region R] [--yes]   # AWS: images + stack, a change set shown and confirmed
    python -m infra destroy --stack NAME [--region R] [--yes] [--delete-data]
    python -m infra deploy [stack] [prefix]   # LocalStack (AWS_ENDPOINT_URL set): prints the outputs as JSON
    python -m infra delete [stack]

The AWS commands are `infra/aws.py`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import ClientError, WaiterError

from adapters.aws import AwsEndpoint

TEMPLATE = Path(__file__).resolve().parent.parent / "infra" / "template.yaml"
TEMPLATE_BODY_MAX_BYTES = 51_200  # CloudFormation's limit on a TemplateBody (beyond it, a template in S3)


def template_body() -> str:
    """`infra/template.yaml` as CloudFormation gets it: compact JSON (the YAML's comments and
    indentation would take it past `TEMPLATE_BODY_MAX_BYTES`), the short forms of the
    intrinsic functions (`!Sub`, `!GetAtt A.B`...) written out (`Fn::Sub`, `Fn::GetAtt`...)."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    def intrinsic(loader: yaml.SafeLoader, tag: str, node: yaml.Node) -> dict:
        if isinstance(node, yaml.ScalarNode):
            value: Any = loader.construct_scalar(node)
        elif isinstance(node, yaml.SequenceNode):
            value = loader.construct_sequence(node, deep=True)
        else:
            value = loader.construct_mapping(node, deep=True)
        if tag == "Ref":
            return {"Ref": value}
        if tag == "GetAtt" and isinstance(value, str):
            value = value.split(".", 1)
        return {f"Fn::{tag}": value}

    Loader.add_multi_constructor("!", intrinsic)
    body = json.dumps(yaml.load(TEMPLATE.read_text(), Loader=Loader), separators=(",", ":"))
    if len(body.encode()) > TEMPLATE_BODY_MAX_BYTES:
        raise RuntimeError(
            f"infra/template.yaml is {len(body.encode()):,} bytes as compact JSON, over CloudFormation's "
            f"{TEMPLATE_BODY_MAX_BYTES:,}"
        )
    return body


DEFAULT_SENDER = "ayci@example.com"
STACK_TIMEOUT_S = 3600  # how long a stack's create, update or delete may take


@dataclass(frozen=True)
class StackOutputs:
    """What the services need from a deployed stack. Keys of the dicts are service names as
    in `core.routing.ROUTES` ("dedup", "inference-intel", ...)."""

    stack_name: str
    bus_name: str
    bucket: str
    queue_urls: dict[str, str]
    queue_arns: dict[str, str]
    dlq_urls: dict[str, str]


def deploy_stack(
    stack_name: str = "ayci",
    prefix: str = "ayci",
    endpoint_url: str | None = None,
    *,
    sender_email: str = DEFAULT_SENDER,
    parameters: Mapping[str, str] | None = None,
) -> StackOutputs:
    """Create the stack, or update it if it exists (an unchanged stack is reused as it is),
    wait until it is complete, and return its outputs. `parameters` adds or overrides
    template parameters (e.g. `DeployLambdas`). Raises `RuntimeError` with CloudFormation's
    reasons if the stack fails."""
    endpoint = _endpoint(endpoint_url)
    on_localstack = endpoint is not None
    cfn = _client("cloudformation", endpoint)
    params = {
        "Prefix": prefix,
        "Platform": "localstack" if on_localstack else "aws",
        "SenderEmail": sender_email,
        **(parameters or {}),
    }
    request: dict[str, Any] = {
        "StackName": stack_name,
        "TemplateBody": template_body(),
        "Parameters": [{"ParameterKey": k, "ParameterValue": v} for k, v in params.items()],
        "Capabilities": ["CAPABILITY_IAM"],
    }
    status = _stack_status(cfn, stack_name)
    if status == "ROLLBACK_COMPLETE":  # a failed first create cannot be updated
        _delete_and_wait(cfn, stack_name, on_localstack)
        status = None
    if status is None:
        cfn.create_stack(**request)
        _wait(cfn, "stack_create_complete", stack_name, on_localstack)
    elif status.endswith("_IN_PROGRESS"):
        raise RuntimeError(f"stack {stack_name} is busy ({status}); try again when it settles")
    else:
        try:
            cfn.update_stack(**request)
        except ClientError as error:
            if "No updates are to be performed" not in str(error):
                raise
        else:
            _wait(cfn, "stack_update_complete", stack_name, on_localstack)
    if on_localstack:
        # AWS::SES::EmailIdentity (SES v2) is left out there; SES v1 verifies at once.
        _client("ses", endpoint).verify_email_identity(EmailAddress=sender_email)
    return read_stack(stack_name, endpoint)


def read_stack(stack_name: str = "ayci", endpoint_url: str | None = None) -> StackOutputs:
    """The outputs of an existing, deployed stack."""
    cfn = _client("cloudformation", _endpoint(endpoint_url))
    stack = cfn.describe_stacks(StackName=stack_name)["Stacks"][0]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    prefix = next(p["ParameterValue"] for p in stack["Parameters"] if p["ParameterKey"] == "Prefix")
    queue_urls: dict[str, str] = {}
    queue_arns: dict[str, str] = {}
    dlq_urls: dict[str, str] = {}
    # The template names queue outputs <Service>QueueUrl / <Service>QueueArn / <Service>DlqUrl.
    for key, url in outputs.items():
        if key.endswith("QueueUrl"):
            service = url.rsplit("/", 1)[-1].removeprefix(f"{prefix}-")
            base = key.removesuffix("QueueUrl")
            queue_urls[service] = url
            queue_arns[service] = outputs[f"{base}QueueArn"]
            dlq_urls[service] = outputs[f"{base}DlqUrl"]
    return StackOutputs(
        stack_name=stack_name,
        bus_name=outputs["BusName"],
        bucket=outputs["BucketName"],
        queue_urls=queue_urls,
        queue_arns=queue_arns,
        dlq_urls=dlq_urls,
    )


def delete_stack(stack_name: str = "ayci", endpoint_url: str | None = None, *, empty_bucket: bool = False) -> None:
    """Delete the stack and wait until it is gone; a missing stack is fine. CloudFormation
    cannot delete a bucket that holds objects: `empty_bucket=True` deletes them first."""
    endpoint = _endpoint(endpoint_url)
    cfn = _client("cloudformation", endpoint)
    if _stack_status(cfn, stack_name) is None:
        return
    if empty_bucket:
        empty_bucket_objects(_client("s3", endpoint), read_stack(stack_name, endpoint).bucket)
    _delete_and_wait(cfn, stack_name, endpoint is not None)


def _endpoint(endpoint_url: str | None) -> str | None:
    return endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None


def _client(service: str, endpoint_url: str | None):
    """AWS as the environment configures it, or the endpoint (LocalStack) with its credentials
    (the environment's when it has them)."""
    if endpoint_url is None:
        return boto3.client(service)
    local = AwsEndpoint(endpoint_url)
    return boto3.session.Session(
        aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", local.access_key_id),
        aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", local.secret_access_key),
        region_name=os.environ.get("AWS_DEFAULT_REGION", local.region),
    ).client(service, endpoint_url=endpoint_url)


def _stack_status(cfn: Any, stack_name: str) -> str | None:
    """The stack's status, or None if there is no such (undeleted) stack."""
    try:
        stacks = cfn.describe_stacks(StackName=stack_name)["Stacks"]
    except ClientError as error:
        if "does not exist" in str(error):
            return None
        raise
    status = stacks[0]["StackStatus"] if stacks else None
    return None if status in (None, "DELETE_COMPLETE") else status


def _delete_and_wait(cfn: Any, stack_name: str, on_localstack: bool) -> None:
    cfn.delete_stack(StackName=stack_name)
    _wait(cfn, "stack_delete_complete", stack_name, on_localstack)


def _wait(cfn: Any, waiter: str, stack_name: str, on_localstack: bool) -> None:
    """Wait for `waiter`; on failure raise with the reasons of the resources that failed."""
    delay = 1 if on_localstack else 10  # LocalStack finishes in seconds
    try:
        cfn.get_waiter(waiter).wait(
            StackName=stack_name, WaiterConfig={"Delay": delay, "MaxAttempts": STACK_TIMEOUT_S // delay}
        )
    except WaiterError as error:
        events = cfn.describe_stack_events(StackName=stack_name)["StackEvents"]
        reasons = [
            f"{e['LogicalResourceId']}: {e.get('ResourceStatusReason', '')}"
            for e in events
            if e["ResourceStatus"].endswith("FAILED")
        ]
        raise RuntimeError(f"stack {stack_name}: {waiter} failed: {'; '.join(reasons) or error}") from error


def empty_bucket_objects(s3: Any, bucket: str) -> None:
    """Delete every object of `bucket` (a bucket must be empty before CloudFormation or S3 can delete it)."""
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            s3.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
