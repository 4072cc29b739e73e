"""On AWS the request function's API keys come from a Secrets Manager secret the template makes
(`ApiKeysSecret`), named by `AYCI_API_KEYS_SECRET`: never from its environment, which child
processes inherit. The read is a call the request function's own role grants."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws

from adapters.aws_calls import CALLER_ENV, ENV, recorded
from ayci.bootstrap import aws_request_deps
from ayci.settings import Settings
from tests.iam_roles import Deployment, not_granted

KEYS = "key-of-alice-1:alice,key-of-bob-22:bob"


@pytest.fixture
def account(monkeypatch, tmp_path):
    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AYCI_API_KEYS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv(ENV, str(tmp_path))
    monkeypatch.setenv(CALLER_ENV, "request")
    with mock_aws():
        yield tmp_path


def test_the_request_service_reads_its_keys_from_the_secret_its_role_grants(account):
    secret = boto3.client("secretsmanager").create_secret(Name="demo/api-keys", SecretString=KEYS)
    deps = aws_request_deps(Settings(api_keys_secret=secret["ARN"], bucket="demo-data-123456789012"))
    assert deps.api_keys == {"key-of-alice-1": "alice", "key-of-bob-22": "bob"}
    calls = recorded(account)
    assert {(c.caller, c.action) for c in calls} == {("request", "secretsmanager:GetSecretValue")}
    # the call, on the secret the template makes (its ARN as Secrets Manager made it), is one the
    # request function's role grants, and no other function's
    (call,) = calls
    assert call.resource == secret["ARN"] and ":secret:demo/api-keys-" in call.resource
    made = Deployment("demo", "us-east-1", "123456789012", made={"ApiKeysSecret": (secret["ARN"], secret["ARN"])})
    assert not_granted(made, calls) == []
    assert not_granted(made, {call._replace(caller="converter")}) != []
    assert not_granted(Deployment("other", "us-east-1", "123456789012"), calls) != []


def test_an_empty_secret_is_refused_with_the_reason(account):
    secret = boto3.client("secretsmanager").create_secret(Name="demo/api-keys", SecretString=" ")
    with pytest.raises(ValueError, match=r"AYCI_API_KEYS_SECRET names\) is empty"):
        aws_request_deps(Settings(api_keys_secret=secret["ARN"], bucket="demo-data-123456789012"))
