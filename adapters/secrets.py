"""Secrets kept out of the environment: on AWS the request service's API keys sit in a Secrets
Manager secret (`infra/template.yaml`'s `ApiKeysSecret`), named to the function by its ARN
(`AYCI_API_KEYS_SECRET`), read once when the function starts. The environment, which every
child process inherits and `lambda:GetFunctionConfiguration` shows, never holds the keys."""

from __future__ import annotations

from adapters.aws import client


def secret_text(secret_id: str, secretsmanager=None) -> str:
    """The text of the secret `secret_id` (a name or an ARN)."""
    sm = secretsmanager or client("secretsmanager")
    return sm.get_secret_value(SecretId=secret_id)["SecretString"]
