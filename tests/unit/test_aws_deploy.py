"""`python -m infra deploy|destroy` against moto (no AWS account here): the checks that stop a
deploy before anything is created, the change set shown and declined (nothing made) or applied
(the stack with its measuring functions wired to the inference ones), destroy keeping the data
bucket and saying so. moto's CloudFormation neither diffs updates nor rolls back: the rollback
report is checked on CloudFormation's answers (`execute`)."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import WaiterError
from moto import mock_aws

from infra import aws as aws_deploy
from infra.aws import DeployError, DeployOptions
from tests.lambda_emulation import fill_moto_cloudformation_gaps

# moto's CloudFormation skips what it cannot make (the queue policy, the SES identity, the API stage)
pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse:UserWarning")

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's
IMAGE = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/demo-images:{{}}"
API_KEYS = "key-of-alice-1:alice,key-of-bob-22:bob"


@pytest.fixture
def no_aws_environment(monkeypatch, tmp_path):
    for name in (
        "AWS_ENDPOINT_URL",
        "AWS_PROFILE",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def account(no_aws_environment, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    fill_moto_cloudformation_gaps(monkeypatch)
    with mock_aws():
        yield


def options(**changes) -> DeployOptions:
    return DeployOptions(
        **{
            "stack": "demo",
            "region": REGION,
            "image_x86_64": IMAGE.format("t1-x86_64"),
            "image_arm64": IMAGE.format("t1-arm64"),
            "api_keys": API_KEYS,
            **changes,
        }
    )


def stack_names() -> list[str]:
    return [
        s["StackName"]
        for s in boto3.client("cloudformation", region_name=REGION).list_stacks()["StackSummaries"]
        if s["StackStatus"] != "DELETE_COMPLETE"
    ]


def test_missing_credentials_and_region_are_clear_errors_before_anything(no_aws_environment):
    with pytest.raises(DeployError, match=r"no AWS region: pass --region"):
        aws_deploy.deploy(options(region=None), confirm=lambda prompt: True)
    with pytest.raises(DeployError, match=r"no AWS credentials .*aws configure.*AWS_PROFILE"):
        aws_deploy.deploy(options(), confirm=lambda prompt: True)


def test_bad_input_is_refused_before_anything_is_created(account):
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName="taken", TemplateBody='{"Resources": {"Q": {"Type": "AWS::SQS::Queue"}}}'
    )
    with pytest.raises(
        DeployError, match=r"--stack taken: a CloudFormation stack of that name already exists and is not an AYCI stack"
    ):
        aws_deploy.deploy(options(stack="taken"), confirm=lambda prompt: True)
    with pytest.raises(DeployError, match=r"--stack 'Demo_1': use 1 to 30 lower-case letters"):
        aws_deploy.deploy(options(stack="Demo_1"), confirm=lambda prompt: True)
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=f"kept-data-{ACCOUNT}")
    with pytest.raises(DeployError, match=rf"the data bucket kept-data-{ACCOUNT} already exists .*aws s3 rb"):
        aws_deploy.deploy(options(stack="kept"), confirm=lambda prompt: True)
    with pytest.raises(
        DeployError, match=r"--image-x86-64 .* must be in this account \(123456789012\) and region \(us-east-1\)"
    ):
        aws_deploy.deploy(
            options(image_x86_64=f"{ACCOUNT}.dkr.ecr.eu-west-1.amazonaws.com/demo-images:t1"),
            confirm=lambda prompt: True,
        )
    with pytest.raises(DeployError, match=r"a new stack needs --api-keys KEY:OWNER"):
        aws_deploy.deploy(options(api_keys=None), confirm=lambda prompt: True)
    with pytest.raises(DeployError, match=r"--api-keys: an API key entry must be KEY:OWNER"):
        aws_deploy.deploy(options(api_keys="short:me"), confirm=lambda prompt: True)
    with pytest.raises(DeployError, match=r"needs Docker with buildx .*--image-x86-64 and --image-arm64"):
        aws_deploy.deploy(
            options(image_x86_64=None, image_arm64=None), confirm=lambda prompt: True, docker=lambda command: 127
        )
    assert stack_names() == ["taken"]


def test_the_change_set_is_shown_and_declining_it_changes_nothing(account):
    shown, asked = [], []
    assert aws_deploy.deploy(options(), confirm=lambda prompt: asked.append(prompt) or False, say=shown.append) is None
    plan = "\n".join(shown)
    assert plan.startswith("Create stack demo in us-east-1:")
    assert (
        "+ Add     MeasureArmFunction  AWS::Lambda::Function" in plan
        and "+ Add     DataBucket  AWS::S3::Bucket" in plan
        and "+ Add     ApiKeysSecret  AWS::SecretsManager::Secret" in plan
        and "+ Add     MeasureFunctionRole  AWS::IAM::Role" in plan
    )
    assert f"= arm64 image {IMAGE.format('t1-arm64')}" in plan
    assert asked == ["Apply these changes to demo in us-east-1? [y/N] "] and shown[-1] == "nothing was changed"
    assert stack_names() == [] and boto3.client("s3", region_name=REGION).list_buckets()["Buckets"] == []


def test_yes_deploys_the_stack_and_destroy_keeps_the_data_bucket_and_says_so(account):
    shown = []
    aws_deploy.deploy(options(yes=True), confirm=lambda prompt: pytest.fail("asked despite --yes"), say=shown.append)
    assert shown[-1].startswith("deployed demo in us-east-1") or "deployed demo in us-east-1" in shown
    lam = boto3.client("lambda", region_name=REGION)
    inference = lam.get_function_configuration(FunctionName="demo-inference-intel")["Environment"]["Variables"]
    assert (
        inference["AYCI_MEASURE_FUNCTION_INTEL"] == "demo-measure-intel"
        and inference["AYCI_MEASURE_FUNCTION_ARM"] == "demo-measure-arm"
    )
    assert (
        lam.get_function_configuration(FunctionName="demo-measure-arm")["Environment"]["Variables"]["AYCI_BUCKET"]
        == f"demo-data-{ACCOUNT}"
    )
    # the API keys are in a secret the request function is told the name of, in no environment
    request = lam.get_function_configuration(FunctionName="demo-request")["Environment"]["Variables"]
    assert "AYCI_API_KEYS" not in request and API_KEYS not in str(request)
    # (moto's CloudFormation makes no secret, so it leaves AYCI_API_KEYS_SECRET out: test_iam_roles checks it)
    for name in ("demo-request", "demo-converter", "demo-inference-intel", "demo-measure-intel", "demo-notifier"):
        variables = lam.get_function_configuration(FunctionName=name)["Environment"]["Variables"]
        assert API_KEYS not in str(variables), name
    # one role per function
    roles = {
        f["FunctionName"]: f["Role"] for f in lam.list_functions()["Functions"] if f["FunctionName"].startswith("demo-")
    }
    assert roles["demo-measure-intel"] == roles["demo-measure-arm"]
    assert len(set(roles.values())) == len(roles) - 1, roles
    s3 = boto3.client("s3", region_name=REGION)
    s3.put_object(Bucket=f"demo-data-{ACCOUNT}", Key="results/k.json", Body=b"{}")
    said = []
    assert aws_deploy.destroy(
        "demo", REGION, yes=False, delete_data=False, confirm=lambda prompt: True, say=said.append
    )
    text = "\n".join(said)
    assert f"The data bucket demo-data-{ACCOUNT} stays (1 objects" in text and f"kept: s3://demo-data-{ACCOUNT}" in text
    assert stack_names() == []
    assert s3.get_object(Bucket=f"demo-data-{ACCOUNT}", Key="results/k.json")["Body"].read() == b"{}"


class _FailingCloudFormation:
    """CloudFormation's answers to a change set whose execution failed and rolled back."""

    def execute_change_set(self, **_):
        pass

    def get_waiter(self, name):
        class Waiter:
            def wait(self, **_):
                raise WaiterError(name, "Waiter encountered a terminal failure state", {})

        return Waiter()

    def describe_stacks(self, **_):
        return {"Stacks": [{"StackStatus": "UPDATE_ROLLBACK_COMPLETE"}]}

    def describe_stack_events(self, **_):
        return {
            "StackEvents": [
                {
                    "LogicalResourceId": "MeasureArmFunction",
                    "ResourceStatus": "UPDATE_FAILED",
                    "ResourceStatusReason": (
                        'Resource handler returned message: "Architecture arm64 is not supported in this region"'
                    ),
                },
                {
                    "LogicalResourceId": "DedupFunction",
                    "ResourceStatus": "UPDATE_FAILED",
                    "ResourceStatusReason": "Resource update cancelled",
                },
            ]
        }


def test_a_failed_deploy_says_it_was_rolled_back_and_why():
    with pytest.raises(DeployError) as failed:
        aws_deploy.execute(_FailingCloudFormation(), "demo", "ayci-1", "UPDATE")
    message = str(failed.value)
    assert message.startswith(
        "the deploy failed and CloudFormation rolled it back (stack demo: UPDATE_ROLLBACK_COMPLETE)"
    )
    assert (
        'MeasureArmFunction: Resource handler returned message: "Architecture arm64 is not supported in this region"'
        in message
    )
    assert "DedupFunction" not in message  # cancelled because another failed: not a reason


def test_an_update_keeps_the_sender_keys_and_allowed_addresses_it_is_not_given():
    images = aws_deploy.Images(
        repository="demo-images", uris={"x86_64": IMAGE.format("t2-x86_64"), "arm64": IMAGE.format("t2-arm64")}
    )
    stack = {
        "StackStatus": "UPDATE_COMPLETE",
        "Parameters": [{"ParameterKey": k} for k in ("SenderEmail", "ApiKeys", "EmailAllowed", "Prefix")],
    }
    given = {p["ParameterKey"]: p for p in aws_deploy.parameters(options(api_keys="K:me"), images, stack)}
    assert given["SenderEmail"] == {"ParameterKey": "SenderEmail", "UsePreviousValue": True}
    assert given["EmailAllowed"] == {"ParameterKey": "EmailAllowed", "UsePreviousValue": True}
    assert given["ApiKeys"]["ParameterValue"] == "K:me" and given["ImageUri"]["ParameterValue"] == IMAGE.format(
        "t2-x86_64"
    )
    created = {p["ParameterKey"] for p in aws_deploy.parameters(options(), images, None)}
    assert "SenderEmail" not in created and {"Prefix", "DeployLambdas", "ImageUri", "ImageUriArm64"} <= created
