"""Deploy AYCI to an AWS account, and remove it: `python -m infra deploy|destroy --stack NAME`.

`deploy` creates or updates the whole stack: the Lambda container images (built from
`infra/lambda.Dockerfile` for x86_64 and arm64 and pushed to the ECR repository `NAME-images`)
and `infra/template.yaml`. Before anything is changed it checks what it can (region,
credentials, the stack name, the data bucket's name, Docker), builds a CloudFormation change
set and prints it with the images it will push, and asks (or takes `--yes`). A deploy that fails
is rolled back by CloudFormation, and the resources' reasons are printed.

`destroy` deletes the stack and the images. The data bucket (models, artifacts, results) stays
unless `--delete-data`: it is named, with its size, and how to delete it.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError, WaiterError

from infra.stack import STACK_TIMEOUT_S, empty_bucket_objects, template_body

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "infra" / "template.yaml"
DOCKERFILE = ROOT / "infra" / "lambda.Dockerfile"
# what goes into the image: a change to any of them is a new image tag
IMAGE_INPUTS = (
    "infra/lambda.Dockerfile",
    "requirements.txt",
    "adapters",
    "ayci",
    "core",
    "data",
    "engines",
    "report",
    "schemas",
    "services",
    "workloads",
)
PLATFORMS = {"x86_64": "linux/amd64", "arm64": "linux/arm64"}
STACK_TAG = "ayci:stack"
TEMPLATE_DESCRIPTION = "AYCI event routing"  # how infra/template.yaml's Description starts
STACK_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,29}$")  # the template's Prefix: resource and bucket names derive from it
ECR_URI = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?/[a-z0-9._/-]+(:[\w.-]+|@sha256:[0-9a-f]{64})$"
)
S3_STANDARD_USD_PER_GB_MONTH = 0.023
ECR_USD_PER_GB_MONTH = 0.10


class DeployError(Exception):
    """Something to fix before (or instead of) deploying; nothing was changed unless it says so."""


@dataclass
class DeployOptions:
    stack: str
    region: str | None = None
    yes: bool = False
    sender_email: str | None = None  # kept as it is on an update when not given
    email_allowed: str | None = None
    api_keys: str | None = None
    image_x86_64: str | None = None  # images built elsewhere (then no Docker is needed here)
    image_arm64: str | None = None


@dataclass
class Images:
    repository: str
    uris: dict[str, str]  # architecture -> image URI
    to_build: list[str] = field(default_factory=list)  # architectures to build and push
    repository_exists: bool = True


@dataclass
class Account:
    session: Any
    region: str
    account_id: str


# ---------------------------------------------------------------- checks before anything changes


def account(region: str | None) -> Account:
    """The session for `region` (or the configured one); `DeployError` without a region or usable credentials."""
    try:
        session = boto3.session.Session(region_name=region) if region else boto3.session.Session()
    except BotoCoreError as exc:  # e.g. a named profile that does not exist
        raise DeployError(f"AWS configuration: {exc}") from exc
    if not session.region_name:
        raise DeployError("no AWS region: pass --region (e.g. --region us-east-1) or set AWS_REGION")
    try:
        identity = session.client("sts").get_caller_identity()
    except (NoCredentialsError, NoRegionError) as exc:
        raise DeployError(
            f"no AWS credentials ({exc}): run `aws configure` or `aws sso login`, or set AWS_PROFILE"
        ) from exc
    except ClientError as exc:
        raise DeployError(
            f"the AWS credentials do not work ({exc.response['Error'].get('Message', exc)}): renew them "
            "(`aws sso login`) or set AWS_PROFILE"
        ) from exc
    except BotoCoreError as exc:
        raise DeployError(f"AWS credentials: {exc}") from exc
    return Account(session=session, region=session.region_name, account_id=identity["Account"])


def check_stack_name(name: str) -> None:
    if not STACK_NAME.match(name):
        raise DeployError(
            f"--stack {name!r}: use 1 to 30 lower-case letters, digits and hyphens, starting with a letter or digit "
            "(resource and bucket names are made from it)"
        )


def existing_stack(cfn, name: str) -> dict | None:
    """The stack of that name if it exists (not deleted); `DeployError` if it is not an AYCI stack or is busy."""
    try:
        stack = cfn.describe_stacks(StackName=name)["Stacks"][0]
    except ClientError as exc:
        if "does not exist" in str(exc):
            return None
        raise
    if stack["StackStatus"] == "DELETE_COMPLETE":
        return None
    tags = {t["Key"]: t["Value"] for t in stack.get("Tags", [])}
    # tagged by this deploy, or made from the template by the older `deploy_stack` (untagged)
    if tags.get(STACK_TAG) != name and not stack.get("Description", "").startswith(TEMPLATE_DESCRIPTION):
        raise DeployError(
            f"--stack {name}: a CloudFormation stack of that name already exists and is not an AYCI stack "
            f"(no {STACK_TAG} tag; status {stack['StackStatus']}): choose another --stack"
        )
    if stack["StackStatus"].endswith("_IN_PROGRESS") and stack["StackStatus"] != "REVIEW_IN_PROGRESS":
        raise DeployError(f"stack {name} is busy ({stack['StackStatus']}): try again when it settles")
    return stack


def check_bucket_free(s3, bucket: str, stack: dict | None) -> None:
    """A new stack creates its data bucket: refuse now if that name is taken (a bucket kept by an
    earlier destroy, or anyone else's)."""
    if stack is not None and stack["StackStatus"] not in ("ROLLBACK_COMPLETE", "REVIEW_IN_PROGRESS"):
        return  # the stack has it already
    try:
        s3.head_bucket(Bucket=bucket)
    except ClientError as exc:
        code = exc.response["Error"].get("Code")
        if code in ("404", "NoSuchBucket", "NotFound"):
            return
        if code in ("403", "AccessDenied", "Forbidden"):
            raise DeployError(
                f"the data bucket name {bucket} belongs to another account: choose another --stack"
            ) from exc
        raise
    raise DeployError(
        f"the data bucket {bucket} already exists (kept by an earlier destroy of this stack?): delete it "
        f"(`aws s3 rb s3://{bucket} --force`, which deletes its data) or deploy under another --stack"
    )


def image_tag() -> str:
    """A hash of everything that goes into the image: the same code gives the same tag."""
    digest = hashlib.sha256()
    for item in IMAGE_INPUTS:
        path = ROOT / item
        files = (
            sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
            if path.is_dir()
            else [path]
        )
        for file in files:
            digest.update(str(file.relative_to(ROOT)).encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def plan_images(acct: Account, options: DeployOptions, docker: Callable[[list[str]], int] | None = None) -> Images:
    """The two images the stack will run: given (`--image-x86-64`, `--image-arm64`) or built here
    and pushed to `STACK-images`; `DeployError` if they cannot be."""
    repository = f"{options.stack}-images"
    given = {"x86_64": options.image_x86_64, "arm64": options.image_arm64}
    if any(given.values()):
        for arch, uri in given.items():
            flag = f"--image-{arch.replace('_', '-')}"
            if not uri:
                raise DeployError(f"{flag} is missing: give both images, or neither (then they are built here)")
            match = ECR_URI.match(uri)
            if not match:
                raise DeployError(
                    f"{flag} {uri}: Lambda runs images from a private ECR repository: "
                    "ACCOUNT.dkr.ecr.REGION.amazonaws.com/REPO:TAG"
                )
            if match["region"] != acct.region or match["account"] != acct.account_id:
                raise DeployError(
                    f"{flag} {uri}: the image must be in this account ({acct.account_id}) and region ({acct.region})"
                )
        return Images(repository=repository, uris={a: u for a, u in given.items() if u})
    run = docker or _run
    if shutil.which("docker") is None or run(["docker", "buildx", "version"]) != 0:
        raise DeployError(
            "building the Lambda images needs Docker with buildx (`docker buildx version` failed): install it, or pass "
            "--image-x86-64 and --image-arm64 with images built elsewhere from infra/lambda.Dockerfile"
        )
    ecr = acct.session.client("ecr")
    registry = f"{acct.account_id}.dkr.ecr.{acct.region}.amazonaws.com"
    tag = image_tag()
    uris = {arch: f"{registry}/{repository}:{tag}-{arch}" for arch in PLATFORMS}
    try:
        listed = ecr.describe_images(
            repositoryName=repository, imageIds=[{"imageTag": f"{tag}-{arch}"} for arch in PLATFORMS]
        )
        present = {t for image in listed.get("imageDetails", []) for t in image.get("imageTags", [])}
        exists = True
    except ClientError as exc:
        if exc.response["Error"].get("Code") == "RepositoryNotFoundException":
            present, exists = set(), False
        elif exc.response["Error"].get("Code") == "ImageNotFoundException":
            present, exists = set(), True
        else:
            raise
    return Images(
        repository=repository,
        uris=uris,
        to_build=[a for a in PLATFORMS if f"{tag}-{a}" not in present],
        repository_exists=exists,
    )


def check_api_keys(api_keys: str | None, stack: dict | None) -> None:
    """The request service's keys go into a Secrets Manager secret (never a function's
    environment): well formed when given, and given when the stack is made (an update keeps
    the stored ones)."""
    from services.request.auth import parse_api_keys

    if api_keys is not None:
        try:
            parsed = parse_api_keys(api_keys)
        except ValueError as exc:
            raise DeployError(f"--api-keys: {exc}") from None
        if not parsed:
            raise DeployError("--api-keys is empty: give at least one KEY:OWNER")
    elif stack is None or stack["StackStatus"] in ("ROLLBACK_COMPLETE", "REVIEW_IN_PROGRESS"):
        raise DeployError(
            "a new stack needs --api-keys KEY:OWNER[,KEY:OWNER...] (keys of 8+ characters): every route but the page "
            "asks for one; they are kept in the Secrets Manager secret <stack>/api-keys"
        )


# ---------------------------------------------------------------- the change set


def parameters(options: DeployOptions, images: Images, stack: dict | None) -> list[dict]:
    """The template's parameters; on an update, those not given keep their values."""
    values = {
        "Prefix": options.stack,
        "Platform": "aws",
        "DeployLambdas": "true",
        "ImageUri": images.uris["x86_64"],
        "ImageUriArm64": images.uris["arm64"],
    }
    chosen = {"SenderEmail": options.sender_email, "EmailAllowed": options.email_allowed, "ApiKeys": options.api_keys}
    values.update({k: v for k, v in chosen.items() if v is not None})
    previous = (
        {p["ParameterKey"] for p in (stack or {}).get("Parameters", [])}
        if stack and stack["StackStatus"] != "REVIEW_IN_PROGRESS"
        else set()
    )
    result = [{"ParameterKey": k, "ParameterValue": v} for k, v in values.items()]
    result += [{"ParameterKey": k, "UsePreviousValue": True} for k in chosen if k not in values and k in previous]
    return result


def create_change_set(cfn, options: DeployOptions, images: Images, stack: dict | None) -> tuple[str, str, list[dict]]:
    """Create the change set and wait for it; (its name, CREATE|UPDATE, its changes). No changes: []."""
    kind = "UPDATE" if stack is not None and stack["StackStatus"] not in ("REVIEW_IN_PROGRESS",) else "CREATE"
    name = f"ayci-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    cfn.create_change_set(
        StackName=options.stack,
        ChangeSetName=name,
        ChangeSetType=kind,
        TemplateBody=template_body(),
        Parameters=parameters(options, images, stack),
        Capabilities=["CAPABILITY_IAM"],
        Tags=[{"Key": STACK_TAG, "Value": options.stack}],
        Description="python -m infra deploy",
    )
    try:
        cfn.get_waiter("change_set_create_complete").wait(
            StackName=options.stack, ChangeSetName=name, WaiterConfig={"Delay": 3, "MaxAttempts": 200}
        )
    except WaiterError:
        described = cfn.describe_change_set(StackName=options.stack, ChangeSetName=name)
        reason = described.get("StatusReason", "")
        if "didn't contain changes" in reason or "No updates are to be performed" in reason:
            cfn.delete_change_set(StackName=options.stack, ChangeSetName=name)
            return name, kind, []
        raise DeployError(f"CloudFormation refused the change set, nothing was changed: {reason}") from None
    changes, token = [], None
    while True:
        page = cfn.describe_change_set(
            StackName=options.stack, ChangeSetName=name, **({"NextToken": token} if token else {})
        )
        changes += [c["ResourceChange"] for c in page.get("Changes", []) if "ResourceChange" in c]
        token = page.get("NextToken")
        if not token:
            return name, kind, changes


def describe_changes(stack: str, region: str, kind: str, changes: list[dict], images: Images) -> str:
    """What the deploy will do, as the user reads it before confirming."""
    marks = {"Add": "+", "Modify": "~", "Remove": "-", "Import": ">", "Dynamic": "?"}
    lines = [f"{'Create' if kind == 'CREATE' else 'Update'} stack {stack} in {region}:"]
    for change in sorted(changes, key=lambda c: (c.get("Action", ""), c.get("LogicalResourceId", ""))):
        replace = change.get("Replacement")
        note = "  (replaced)" if replace == "True" else "  (may be replaced)" if replace == "Conditional" else ""
        lines.append(
            f"  {marks.get(change.get('Action'), '?')} {change.get('Action', ''):<7} "
            f"{change.get('LogicalResourceId', '')}"
            f"  {change.get('ResourceType', '')}{note}"
        )
    if not changes:
        lines.append("  (no change to the stack's resources)")
    if images.to_build:
        where = f"ECR repository {images.repository}" + ("" if images.repository_exists else " (created)")
        for arch in images.to_build:
            lines.append(f"  + build and push the {arch} image {images.uris[arch]} to {where}")
    else:
        lines.extend(f"  = {arch} image {uri}" for arch, uri in images.uris.items())
    return "\n".join(lines)


# ---------------------------------------------------------------- doing it


def push_images(acct: Account, images: Images, run: Callable[[list[str]], int] | None = None) -> None:
    """Create the repository if needed (Lambda may pull from it), log Docker in, build and push each image."""
    run = run or _run
    ecr = acct.session.client("ecr")
    if not images.repository_exists:
        ecr.create_repository(
            repositoryName=images.repository,
            imageScanningConfiguration={"scanOnPush": False},
            tags=[{"Key": STACK_TAG, "Value": images.repository.removesuffix("-images")}],
        )
        ecr.set_repository_policy(
            repositoryName=images.repository,
            policyText=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Sid": "LambdaPulls",
                            "Effect": "Allow",
                            "Principal": {"Service": "lambda.amazonaws.com"},
                            "Action": ["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"],
                            "Condition": {
                                "StringLike": {
                                    "aws:sourceArn": f"arn:aws:lambda:{acct.region}:{acct.account_id}:function:*"
                                }
                            },
                        }
                    ],
                }
            ),
        )
        # keep the images of the last few deploys (a rollback needs the previous ones)
        ecr.put_lifecycle_policy(
            repositoryName=images.repository,
            lifecyclePolicyText=json.dumps(
                {
                    "rules": [
                        {
                            "rulePriority": 1,
                            "description": "the last 10 images",
                            "selection": {"tagStatus": "any", "countType": "imageCountMoreThan", "countNumber": 10},
                            "action": {"type": "expire"},
                        }
                    ]
                }
            ),
        )
    if not images.to_build:
        return
    import base64

    auth = ecr.get_authorization_token()["authorizationData"][0]
    user, password = base64.b64decode(auth["authorizationToken"]).decode().split(":", 1)
    login = subprocess.run(
        ["docker", "login", "--username", user, "--password-stdin", auth["proxyEndpoint"]], input=password, text=True
    )
    if login.returncode != 0:
        raise DeployError(f"docker login to {auth['proxyEndpoint']} failed; the stack was not changed")
    for arch in images.to_build:
        # --provenance=false: one image manifest, not an index with attestations (Lambda refuses those)
        command = [
            "docker",
            "buildx",
            "build",
            "--platform",
            PLATFORMS[arch],
            "--provenance=false",
            "-f",
            str(DOCKERFILE),
            "-t",
            images.uris[arch],
            "--push",
            str(ROOT),
        ]
        print(f"building the {arch} image ({' '.join(command)})", file=sys.stderr)
        if run(command) != 0:
            raise DeployError(
                f"building or pushing the {arch} image failed (see Docker's output above); the stack was not changed"
            )


def execute(cfn, stack: str, change_set: str, kind: str) -> None:
    """Run the change set; on failure CloudFormation rolls back, and `DeployError` says why."""
    cfn.execute_change_set(StackName=stack, ChangeSetName=change_set)
    waiter = "stack_create_complete" if kind == "CREATE" else "stack_update_complete"
    try:
        cfn.get_waiter(waiter).wait(StackName=stack, WaiterConfig={"Delay": 10, "MaxAttempts": STACK_TIMEOUT_S // 10})
    except WaiterError:
        status = cfn.describe_stacks(StackName=stack)["Stacks"][0]["StackStatus"]
        reasons = failure_reasons(cfn, stack)
        raise DeployError(
            f"the deploy failed and CloudFormation rolled it back (stack {stack}: {status}). Why:\n  "
            + "\n  ".join(reasons)
            + ("\nThe failed stack holds nothing; the next deploy replaces it." if kind == "CREATE" else "")
        ) from None


def failure_reasons(cfn, stack: str) -> list[str]:
    events = cfn.describe_stack_events(StackName=stack)["StackEvents"]
    reasons = [
        f"{e['LogicalResourceId']}: {e.get('ResourceStatusReason', '')}"
        for e in events
        if e["ResourceStatus"].endswith("FAILED") and "cancelled" not in e.get("ResourceStatusReason", "").lower()
    ]
    return list(dict.fromkeys(reasons))[:10] or [
        "(CloudFormation gave no reason; see the stack's events in the console)"
    ]


def outputs_of(cfn, stack: str) -> dict[str, str]:
    described = cfn.describe_stacks(StackName=stack)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])}


def deploy(
    options: DeployOptions,
    *,
    confirm: Callable[[str], bool],
    docker: Callable[[list[str]], int] | None = None,
    say: Callable[[str], None] = print,
) -> dict[str, str] | None:
    """Create or update the stack; its outputs, or None if the user declined or nothing changed."""
    check_stack_name(options.stack)
    acct = account(options.region)
    cfn = acct.session.client("cloudformation")
    stack = existing_stack(cfn, options.stack)
    check_bucket_free(acct.session.client("s3"), f"{options.stack}-data-{acct.account_id}", stack)
    check_api_keys(options.api_keys, stack)
    images = plan_images(acct, options, docker)
    if stack is not None and stack["StackStatus"] == "ROLLBACK_COMPLETE":
        # a failed first create cannot be updated; it holds nothing
        if not (
            options.yes
            or confirm(
                f"stack {options.stack} is ROLLBACK_COMPLETE (a failed first deploy; it holds nothing). "
                "Delete it and go on? [y/N] "
            )
        ):
            say("nothing was changed")
            return None
        cfn.delete_stack(StackName=options.stack)
        cfn.get_waiter("stack_delete_complete").wait(
            StackName=options.stack, WaiterConfig={"Delay": 10, "MaxAttempts": STACK_TIMEOUT_S // 10}
        )
        stack = None
    change_set, kind, changes = create_change_set(cfn, options, images, stack)
    say(describe_changes(options.stack, acct.region, kind, changes, images))
    if not changes and not images.to_build:
        say("nothing to change")
        return outputs_of(cfn, options.stack) if stack is not None else None
    try:
        applying = options.yes or confirm(f"Apply these changes to {options.stack} in {acct.region}? [y/N] ")
    except BaseException:
        _discard(cfn, options.stack, change_set, kind)
        raise
    if not applying:
        _discard(cfn, options.stack, change_set, kind)
        say("nothing was changed")
        return None
    try:
        push_images(acct, images, docker)
    except DeployError:
        _discard(cfn, options.stack, change_set, kind)
        raise
    if changes:
        execute(cfn, options.stack, change_set, kind)
    else:
        _discard(cfn, options.stack, change_set, kind)
    outputs = outputs_of(cfn, options.stack)
    say(f"deployed {options.stack} in {acct.region}")
    for key in ("ApiUrl", "BucketName", "BusName", "MeasureIntelFunctionName", "MeasureArmFunctionName"):
        if key in outputs:
            say(f"  {key}: {outputs[key]}")
    return outputs


def _discard(cfn, stack: str, change_set: str, kind: str) -> None:
    cfn.delete_change_set(StackName=stack, ChangeSetName=change_set)
    if kind == "CREATE":  # the stack a CREATE change set made (REVIEW_IN_PROGRESS) holds nothing
        cfn.delete_stack(StackName=stack)


# ---------------------------------------------------------------- destroy


def bucket_usage(s3, bucket: str) -> tuple[int, int]:
    """(objects, bytes) in `bucket`."""
    count = size = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            count += 1
            size += item["Size"]
    return count, size


def destroy(
    stack_name: str,
    region: str | None,
    *,
    yes: bool,
    delete_data: bool,
    confirm: Callable[[str], bool],
    say: Callable[[str], None] = print,
) -> bool:
    """Delete the stack and its images; the bucket stays unless `delete_data`. True if deleted."""
    check_stack_name(stack_name)
    acct = account(region)
    cfn, s3 = acct.session.client("cloudformation"), acct.session.client("s3")
    stack = existing_stack(cfn, stack_name)
    if stack is None:
        say(f"no stack {stack_name} in {acct.region}: nothing to delete")
        return False
    resources = cfn.describe_stack_resources(StackName=stack_name)["StackResources"]
    bucket = next((r.get("PhysicalResourceId") for r in resources if r["LogicalResourceId"] == "DataBucket"), None)
    objects, size = bucket_usage(s3, bucket) if bucket else (0, 0)
    say(
        f"Delete stack {stack_name} in {acct.region}: {len(resources)} resources (functions, queues, bus, API, roles) "
        f"and the ECR repository {stack_name}-images."
    )
    if bucket and delete_data:
        say(
            f"  and the data bucket {bucket} with its {objects:,} objects ({size / 1e9:.2f} GB): "
            "models, artifacts, results"
        )
    elif bucket:
        say(
            f"  The data bucket {bucket} stays ({objects:,} objects, {size / 1e9:.2f} GB: models, artifacts, results; "
            f"~${size / 1e9 * S3_STANDARD_USD_PER_GB_MONTH:.2f}/month). --delete-data deletes it too."
        )
    if not (yes or confirm(f"Delete {stack_name}? [y/N] ")):
        say("nothing was deleted")
        return False
    if bucket and delete_data:
        empty_bucket_objects(s3, bucket)
    cfn.delete_stack(StackName=stack_name)
    try:
        cfn.get_waiter("stack_delete_complete").wait(
            StackName=stack_name, WaiterConfig={"Delay": 10, "MaxAttempts": STACK_TIMEOUT_S // 10}
        )
    except WaiterError:
        # a bucket that holds objects cannot be deleted: keep it, delete the rest
        cfn.delete_stack(StackName=stack_name, RetainResources=["DataBucket"])
        try:
            cfn.get_waiter("stack_delete_complete").wait(
                StackName=stack_name, WaiterConfig={"Delay": 10, "MaxAttempts": STACK_TIMEOUT_S // 10}
            )
        except WaiterError:
            raise DeployError(
                f"deleting {stack_name} failed:\n  " + "\n  ".join(failure_reasons(cfn, stack_name))
            ) from None
    try:
        acct.session.client("ecr").delete_repository(repositoryName=f"{stack_name}-images", force=True)
    except ClientError as exc:
        if exc.response["Error"].get("Code") != "RepositoryNotFoundException":
            raise
    say(f"deleted {stack_name}")
    if bucket and not delete_data and objects:
        say(
            f"kept: s3://{bucket} ({objects:,} objects). "
            f"Delete it with `aws s3 rb s3://{bucket} --force` when you no longer need the results."
        )
    return True


def _run(command: list[str]) -> int:
    try:
        return subprocess.run(command).returncode
    except FileNotFoundError:
        return 127


def ask(prompt: str) -> bool:
    """The user's yes; without a terminal to ask on, no (the caller says to pass --yes)."""
    if not sys.stdin.isatty():
        print(f"{prompt}no terminal to answer on: pass --yes to apply without a prompt", file=sys.stderr)
        return False
    return input(prompt).strip().lower() in ("y", "yes")
