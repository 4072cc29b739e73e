"""The mailer on Amazon SES (v1 `SendEmail`: LocalStack has no SES v2). The endpoint comes
from `AWS_ENDPOINT_URL` (LocalStack here, unset on AWS); boto3 reads it itself."""

from __future__ import annotations

from adapters.aws import client


class SesMailer:
    """Sends from `sender`, which SES must have verified (`verify_email_identity`)."""

    def __init__(self, sender: str, ses=None) -> None:
        self.sender = sender
        self.ses = ses or client("ses")

    def send(self, *, to: str, subject: str, text: str, html: str) -> str:
        """One email with a plain-text and an HTML part; returns SES's message id."""
        response = self.ses.send_email(
            Source=self.sender,
            Destination={"ToAddresses": [to]},
            Message={
                "Subject": {"Data": subject, "Charset": "UTF-8"},
                "Body": {"Text": {"Data": text, "Charset": "UTF-8"}, "Html": {"Data": html, "Charset": "UTF-8"}},
            },
        )
        return response["MessageId"]
