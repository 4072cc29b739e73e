"""Deploy, read and delete the AYCI stack (`infra/template.yaml`) with CloudFormation.

The same code serves AWS and LocalStack (`scripts/localstack.sh start`). The endpoint is
`endpoint_url` if given, else `AWS_ENDPOINT_URL` (boto3 reads it itself); with an endpoint
the stack is deployed with `Platform=localstack`, which leaves out what LocalStack cannot
create, and the SES sender is verified with SES v1 `verify_email_identity` instead.

    python -m ayci.infra deploy --stack NAME [--region R] [--yes]   # AWS: images + stack, a change set shown and confirmed
    python -m ayci.infra destroy --stack NAME [--region R] [--yes] [--delete-data]
    python -m ayci.infra deploy [stack] [prefix]   # LocalStack (AWS_ENDPOINT_URL set): prints the outputs as JSON
    python -m ayci.infra delete [stack]

The AWS commands are `ayci/aws_deploy.py`.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import ClientError, WaiterError

TEMPLATE = Path(__file__).resolve().parent.parent / "infra" / "template.yaml"
DEFAULT_SENDER = "ayci@example.com"
_TIMEOUT_S = 1800


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
    cfn = boto3.client("cloudformation", endpoint_url=endpoint)
    params = {
        "Prefix": prefix,
        "Platform": "localstack" if on_localstack else "aws",
        "SenderEmail": sender_email,
        **(parameters or {}),
    }
    request: dict[str, Any] = {
        "StackName": stack_name,
        "TemplateBody": TEMPLATE.read_text(),
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
        boto3.client("ses", endpoint_url=endpoint).verify_email_identity(EmailAddress=sender_email)
    return read_stack(stack_name, endpoint)


def read_stack(stack_name: str = "ayci", endpoint_url: str | None = None) -> StackOutputs:
    """The outputs of an existing, deployed stack."""
    cfn = boto3.client("cloudformation", endpoint_url=_endpoint(endpoint_url))
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
    cfn = boto3.client("cloudformation", endpoint_url=endpoint)
    if _stack_status(cfn, stack_name) is None:
        return
    if empty_bucket:
        _empty_bucket(read_stack(stack_name, endpoint).bucket, endpoint)
    _delete_and_wait(cfn, stack_name, endpoint is not None)


def _endpoint(endpoint_url: str | None) -> str | None:
    return endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None


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
            StackName=stack_name, WaiterConfig={"Delay": delay, "MaxAttempts": _TIMEOUT_S // delay}
        )
    except WaiterError as error:
        events = cfn.describe_stack_events(StackName=stack_name)["StackEvents"]
        reasons = [
            f"{e['LogicalResourceId']}: {e.get('ResourceStatusReason', '')}"
            for e in events
            if e["ResourceStatus"].endswith("FAILED")
        ]
        raise RuntimeError(f"stack {stack_name}: {waiter} failed: {'; '.join(reasons) or error}") from error


def _empty_bucket(bucket: str, endpoint: str | None) -> None:
    s3 = boto3.client("s3", endpoint_url=endpoint)
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            s3.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})


def main(argv: list[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m ayci.infra", description="Deploy or remove the AYCI stack.")
    commands = parser.add_subparsers(dest="command")
    deploy = commands.add_parser("deploy", help="create or update the stack (AWS: images and template, shown and confirmed first)")
    deploy.add_argument("stack_positional", nargs="?", metavar="stack", help=argparse.SUPPRESS)
    deploy.add_argument("prefix", nargs="?", help=argparse.SUPPRESS)  # LocalStack: resource names' prefix (default: the stack's name)
    deploy.add_argument("--stack", help="the stack's name; its resources and bucket are named after it (lower case, at most 30)")
    deploy.add_argument("--region", help="AWS region (default: the configured one)")
    deploy.add_argument("--yes", action="store_true", help="apply the change set without asking")
    deploy.add_argument("--sender-email", help=f"the address run emails are sent from; SES mails it a link to verify (default {DEFAULT_SENDER}; kept on an update)")
    deploy.add_argument("--email-allowed", help='where run emails may go: addresses, "@domain", or "*" (default: none)')
    deploy.add_argument("--api-keys", help="KEY:OWNER,... of the HTTP API (kept as they are on an update when not given)")
    deploy.add_argument("--image-x86-64", help="an x86_64 image built elsewhere from infra/lambda.Dockerfile (ECR URI); then no Docker is needed")
    deploy.add_argument("--image-arm64", help="the arm64 image, likewise")
    destroy = commands.add_parser("destroy", help="delete the stack and its images; the data bucket stays unless --delete-data")
    destroy.add_argument("--stack", required=True)
    destroy.add_argument("--region")
    destroy.add_argument("--yes", action="store_true", help="delete without asking")
    destroy.add_argument("--delete-data", action="store_true", help="delete the data bucket too (models, artifacts, results)")
    delete = commands.add_parser("delete", help="delete a stack (LocalStack and tests; on AWS use destroy)")
    delete.add_argument("stack", nargs="?", default="ayci")
    args = parser.parse_args(argv or ["deploy"])

    if args.command == "delete":
        delete_stack(args.stack)
        return
    on_localstack = _endpoint(None) is not None
    if args.command == "deploy" and (on_localstack or args.stack is None):
        if not on_localstack:
            parser.error("deploy on AWS: pass --stack NAME (python -m ayci.infra deploy --stack NAME [--region R])")
        stack = args.stack or args.stack_positional or "ayci"
        print(json.dumps(asdict(deploy_stack(stack, args.prefix or stack, sender_email=args.sender_email or DEFAULT_SENDER)), indent=2))
        return
    from ayci import aws_deploy

    try:
        if args.command == "deploy":
            options = aws_deploy.DeployOptions(
                stack=args.stack, region=args.region, yes=args.yes, sender_email=args.sender_email, email_allowed=args.email_allowed,
                api_keys=args.api_keys, image_x86_64=args.image_x86_64, image_arm64=args.image_arm64,
            )
            aws_deploy.deploy(options, confirm=aws_deploy.ask)
        else:
            aws_deploy.destroy(args.stack, args.region, yes=args.yes, delete_data=args.delete_data, confirm=aws_deploy.ask)
    except aws_deploy.DeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
