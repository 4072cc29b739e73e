"""Least privilege on AWS, read from `infra/template.yaml`: one role per function, each granting
exactly the reviewed actions (no wildcard action, no resource `*`), nothing that deletes data
but the staged uploads, no way to delete a function, the API
keys out of every environment. The calls each function makes are checked against its own role
in `test_measuring_function.py` (moto) and `tests/integration/test_aws_pipeline.py`
(LocalStack); here, what the roles refuse."""

from __future__ import annotations

import pytest

from adapters.aws_calls import Call
from tests.iam_roles import Deployment, function_roles, template

# The reviewed grants: role -> every action it allows. A new action is a decision: add it here.
QUEUE_WORKER = {
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibility",
    "sqs:GetQueueAttributes",
    "sqs:GetQueueUrl",
    "sqs:SendMessage",
    "events:PutEvents",
    "s3:ListBucket",
    "s3:GetObject",
    "s3:PutObject",
}
MEASURE_CONTROL = {
    "lambda:GetFunctionConfiguration",
    "lambda:UpdateFunctionConfiguration",
    "lambda:PublishVersion",
    "lambda:GetAlias",
    "lambda:CreateAlias",
    "lambda:UpdateAlias",
    "lambda:DeleteAlias",
    "lambda:ListAliases",
    "lambda:DeleteFunction",
    "lambda:InvokeFunction",
}
REVIEWED = {
    "RequestFunctionRole": {
        "events:PutEvents",
        "s3:ListBucket",
        "s3:GetObject",
        "s3:PutObject",
        "s3:AbortMultipartUpload",
        "s3:DeleteObject",
        "secretsmanager:GetSecretValue",
    },
    "DedupFunctionRole": QUEUE_WORKER,
    "ConverterFunctionRole": QUEUE_WORKER | {"s3:AbortMultipartUpload"},
    "InferenceIntelFunctionRole": QUEUE_WORKER | MEASURE_CONTROL,
    "InferenceArmFunctionRole": QUEUE_WORKER | MEASURE_CONTROL,
    "MeasureFunctionRole": {"s3:GetObject", "s3:PutObject"},
    "ArchiverFunctionRole": QUEUE_WORKER,
    "NotifierFunctionRole": QUEUE_WORKER | {"ses:SendEmail"},
    "DeadLetterFunctionRole": QUEUE_WORKER - {"sqs:SendMessage"},
}

REGION, ACCOUNT = "eu-west-1", "111122223333"
D = Deployment("demo", REGION, ACCOUNT)
BUCKET = D.bucket


def actions(statement: dict) -> list[str]:
    value = statement["Action"]
    return [value] if isinstance(value, str) else value


def resources(statement: dict) -> list[str]:
    value = statement["Resource"]
    return [value] if isinstance(value, str) else value


def s3(caller: str, operation: str, key: str | None = None) -> Call:
    return Call(caller, "s3", operation, f"{BUCKET}/{key}" if key is not None else BUCKET)


def test_every_function_has_a_role_of_its_own():
    roles = function_roles()
    assert set(roles) == {
        "request",
        "dedup",
        "converter",
        "inference-intel",
        "inference-arm",
        "measure-intel",
        "measure-arm",
        "archiver",
        "notifier",
        "dead-letters",
    }
    # the two measuring functions do the same (read an artifact, measure, write a profile): one role
    assert roles["measure-intel"] == roles["measure-arm"] == "MeasureFunctionRole"
    others = [role for name, role in roles.items() if not name.startswith("measure-")]
    assert len(set(others)) == len(others), roles
    assert "ServiceFunctionRole" not in template()["Resources"]
    iam_roles = {k for k, r in template()["Resources"].items() if r["Type"] == "AWS::IAM::Role"}
    assert iam_roles == set(REVIEWED) == set(roles.values())


@pytest.mark.parametrize("role", sorted(REVIEWED))
def test_each_role_grants_exactly_the_reviewed_actions_and_no_wildcard(role):
    properties = template()["Resources"][role]["Properties"]
    trust = properties["AssumeRolePolicyDocument"]["Statement"]
    assert trust == [{"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}]
    statements = D.statements(role)
    granted = {action for statement in statements for action in actions(statement)}
    assert granted == REVIEWED[role]
    for statement in statements:
        assert statement["Effect"] == "Allow" and "NotAction" not in statement and "NotResource" not in statement
        assert not any("*" in action for action in actions(statement)), statement
        for resource in resources(statement):
            assert resource != "*" and not resource.endswith(":*:*"), statement
            assert resource != f"arn:aws:s3:::{BUCKET}/*", f"{role} on all the data: {statement}"


def test_nothing_deletes_data_but_staged_uploads_and_no_role_can_delete_a_function():
    deletes = {
        (role, resource)
        for role in REVIEWED
        for statement in D.statements(role)
        if "s3:DeleteObject" in actions(statement)
        for resource in resources(statement)
    }
    assert deletes == {("RequestFunctionRole", f"arn:aws:s3:::{BUCKET}/uploads/*")}
    function = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:demo-measure-intel"
    for role in REVIEWED:
        for statement in D.statements(role):
            if "lambda:DeleteFunction" in actions(statement):
                # a version only: `name:*` never matches the function's own ARN
                assert all(r.endswith(":*") for r in resources(statement)), statement
    for caller in function_roles():
        refused = Call(caller, "lambda", "DeleteFunction", "demo-measure-intel")
        assert not D.allows([function_roles()[caller]], refused), caller
    inference = ["InferenceIntelFunctionRole"]
    assert D.allows(inference, Call("inference-intel", "lambda", "DeleteFunction", "demo-measure-intel:7"))
    assert function.endswith("demo-measure-intel")


@pytest.mark.parametrize(
    ("role", "call", "allowed"),
    [
        # the request function: its prefixes, and the staged uploads it signs, checks and deletes
        ("RequestFunctionRole", s3("request", "PutObject", "models/abc"), True),
        ("RequestFunctionRole", s3("request", "AbortMultipartUpload", "models/abc"), True),
        ("RequestFunctionRole", s3("request", "PutObject", "uploads/alice/abc"), True),
        ("RequestFunctionRole", s3("request", "DeleteObject", "uploads/alice/abc"), True),
        ("RequestFunctionRole", s3("request", "GetObject", "artifacts/k/model.onnx"), False),
        ("RequestFunctionRole", s3("request", "PutObject", "results/k.json"), False),
        ("RequestFunctionRole", s3("request", "DeleteObject", "models/abc"), False),
        ("RequestFunctionRole", Call("request", "sqs", "SendMessage", "demo-dedup"), False),
        ("RequestFunctionRole", Call("request", "events", "PutEvents", "demo-bus"), True),
        ("RequestFunctionRole", Call("request", "events", "PutEvents", "default"), False),
        # the converter reads models, writes artifacts; deletes nothing, never a model
        ("ConverterFunctionRole", s3("converter", "GetObject", "models/abc"), True),
        ("ConverterFunctionRole", s3("converter", "PutObject", "artifacts/k/model.onnx"), True),
        ("ConverterFunctionRole", s3("converter", "AbortMultipartUpload", "artifacts/k/model.onnx"), True),
        ("ConverterFunctionRole", s3("converter", "PutObject", "models/abc"), False),
        ("ConverterFunctionRole", s3("converter", "PutObject", "results/k.json"), False),
        ("ConverterFunctionRole", s3("converter", "PutObject", "runs/r/summary.json"), False),
        ("ConverterFunctionRole", s3("converter", "DeleteObject", "artifacts/k/model.onnx"), False),
        ("ConverterFunctionRole", Call("converter", "sqs", "ReceiveMessage", "demo-converter"), True),
        ("ConverterFunctionRole", Call("converter", "sqs", "ReceiveMessage", "demo-dedup"), False),
        ("ConverterFunctionRole", Call("converter", "lambda", "InvokeFunction", "demo-measure-intel:mem-1769"), False),
        # the measuring functions read an artifact and write a profile; no queue, no bus
        ("MeasureFunctionRole", s3("measure-intel", "GetObject", "artifacts/k/model.onnx"), True),
        ("MeasureFunctionRole", s3("measure-intel", "GetObject", "references/r.npz"), True),
        ("MeasureFunctionRole", s3("measure-intel", "PutObject", "results/k/r1.profile.json"), True),
        ("MeasureFunctionRole", s3("measure-intel", "PutObject", "results/k/r1.trace.json"), True),
        ("MeasureFunctionRole", s3("measure-intel", "PutObject", "results/k/r1.json"), False),
        ("MeasureFunctionRole", s3("measure-intel", "GetObject", "models/abc"), False),
        ("MeasureFunctionRole", s3("measure-intel", "GetObject", "inputs/abc.npz"), False),
        ("MeasureFunctionRole", Call("measure-intel", "events", "PutEvents", "demo-bus"), False),
        # the inference functions: their own measuring function, through a size alias only
        ("InferenceIntelFunctionRole", Call("i", "lambda", "InvokeFunction", "demo-measure-intel:mem-1769"), True),
        ("InferenceIntelFunctionRole", Call("i", "lambda", "InvokeFunction", "demo-measure-intel"), False),
        ("InferenceIntelFunctionRole", Call("i", "lambda", "InvokeFunction", "demo-measure-intel:$LATEST"), False),
        ("InferenceIntelFunctionRole", Call("i", "lambda", "InvokeFunction", "demo-measure-arm:mem-1769"), False),
        ("InferenceIntelFunctionRole", Call("i", "lambda", "UpdateFunctionConfiguration", "demo-measure-intel"), True),
        ("InferenceIntelFunctionRole", Call("i", "lambda", "UpdateFunctionConfiguration", "demo-measure-arm"), False),
        ("InferenceIntelFunctionRole", Call("i", "lambda", "UpdateFunctionConfiguration", "demo-converter"), False),
        ("InferenceArmFunctionRole", Call("i", "lambda", "PublishVersion", "demo-measure-arm"), True),
        ("InferenceArmFunctionRole", Call("i", "lambda", "PublishVersion", "demo-measure-intel"), False),
        ("InferenceIntelFunctionRole", s3("i", "PutObject", "lambda-sizes/demo-measure-intel/lock.json"), True),
        ("InferenceIntelFunctionRole", s3("i", "PutObject", "lambda-sizes/demo-measure-arm/lock.json"), False),
        ("InferenceIntelFunctionRole", s3("i", "DeleteObject", "lambda-sizes/demo-measure-intel/lock.json"), False),
        ("InferenceIntelFunctionRole", s3("i", "DeleteObject", "results/k.json"), False),
        ("InferenceIntelFunctionRole", s3("i", "PutObject", "results/k/r1.json"), True),
        ("InferenceIntelFunctionRole", s3("i", "PutObject", "artifacts/k/model.onnx"), False),
        ("InferenceIntelFunctionRole", s3("i", "GetObject", "models/abc"), False),
        # the archiver writes runs and result packs; the notifier mails from the sender only
        ("ArchiverFunctionRole", s3("archiver", "PutObject", "runs/r/summary.json"), True),
        ("ArchiverFunctionRole", s3("archiver", "PutObject", "results/k.json"), False),
        ("ArchiverFunctionRole", Call("archiver", "sqs", "SendMessage", "demo-archiver"), True),
        ("ArchiverFunctionRole", Call("archiver", "sqs", "SendMessage", "demo-converter"), False),
        ("NotifierFunctionRole", Call("notifier", "ses", "SendEmail", "ayci@example.com"), True),
        ("NotifierFunctionRole", Call("notifier", "ses", "SendEmail", "someone@else.example"), False),
        ("NotifierFunctionRole", s3("notifier", "PutObject", "runs/r/email.json"), True),
        ("NotifierFunctionRole", s3("notifier", "PutObject", "runs/r/summary.json"), False),
        ("DeadLetterFunctionRole", s3("dead-letters", "PutObject", "dead-letters/dedup/m1.json"), True),
        ("DeadLetterFunctionRole", Call("dead-letters", "sqs", "ReceiveMessage", "demo-converter-dlq"), True),
        ("DeadLetterFunctionRole", Call("dead-letters", "sqs", "ReceiveMessage", "demo-converter"), False),
        ("DeadLetterFunctionRole", Call("dead-letters", "ses", "SendEmail", "ayci@example.com"), False),
    ],
)
def test_what_each_role_allows_and_refuses(role, call, allowed):
    assert D.allows([role], call) is allowed


def test_the_api_keys_live_in_a_secret_only_the_request_function_reads():
    resources = template()["Resources"]
    for name, resource in resources.items():
        if resource["Type"] == "AWS::Lambda::Function":
            variables = resource["Properties"].get("Environment", {}).get("Variables", {})
            assert "AYCI_API_KEYS" not in variables, name
            assert {"Ref": "ApiKeys"} not in variables.values(), name
    request = resources["RequestFunction"]["Properties"]["Environment"]["Variables"]
    assert request["AYCI_API_KEYS_SECRET"] == {"Ref": "ApiKeysSecret"}
    secret = resources["ApiKeysSecret"]
    assert secret["Type"] == "AWS::SecretsManager::Secret"
    assert "ApiKeys" in str(secret["Properties"]["SecretString"])
    read = Call("request", "secretsmanager", "GetSecretValue", D.resolve({"Ref": "ApiKeysSecret"}))
    assert D.allows(["RequestFunctionRole"], read)
    assert [role for role in REVIEWED if D.allows([role], read)] == ["RequestFunctionRole"]
    assert template()["Parameters"]["ApiKeys"]["NoEcho"] is True
    assert "LambdasNeedApiKeys" in template()["Rules"]


def test_incomplete_multipart_uploads_are_aborted_by_a_lifecycle_rule():
    rules = template()["Resources"]["DataBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    (abort,) = [r for r in rules if "AbortIncompleteMultipartUpload" in r]
    assert abort["Status"] == "Enabled" and abort.get("Prefix", "") == ""  # the whole bucket
    assert abort["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"] == 1
    # whoever uploads in parts (boto3's upload_file above 8 MB) may abort its own upload
    for role, key in (("RequestFunctionRole", "models/abc"), ("ConverterFunctionRole", "tuning/x86_64/abc.tar.gz")):
        assert D.allows([role], s3("x", "AbortMultipartUpload", key)), role


def test_a_presigned_post_is_recorded_as_the_put_its_signer_grants(monkeypatch, tmp_path):
    """The browser's upload is authorized by the request function's role, which signs it: the
    recorder keeps it as a PutObject on the staged key (botocore presigns a POST with
    CreateBucket's model, which is no call at all)."""
    import boto3
    from moto import mock_aws

    from adapters.aws_calls import CALLER_ENV, ENV, recorded
    from adapters.uploads import S3PresignedUploader

    for name, value in {ENV: str(tmp_path), CALLER_ENV: "request", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        boto3.client("s3").create_bucket(Bucket=BUCKET)
        S3PresignedUploader(BUCKET).offer("alice", "ab" * 32, 1234)
    (call,) = recorded(tmp_path)
    assert call == Call("request", "s3", "PutObject", f"{BUCKET}/uploads/alice/{'ab' * 32}")
    assert D.allows(["RequestFunctionRole"], call) and not D.allows(["ConverterFunctionRole"], call)
