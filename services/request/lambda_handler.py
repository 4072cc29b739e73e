"""AWS Lambda entrypoint of the request service: the same FastAPI app behind an API Gateway
REST API (`{proxy+}`, Lambda proxy integration), adapted by Mangum. Wired to S3, EventBridge
and presigned S3 uploads on the first invocation."""

from __future__ import annotations

from mangum import Mangum

from ayci.settings import Settings
from core.logs import configure_logging

_adapter: Mangum | None = None


def handler(event: dict, context) -> dict:
    global _adapter
    if _adapter is None:
        from ayci.bootstrap import aws_request_deps
        from services.request.app import create_app

        configure_logging("json")
        _adapter = Mangum(create_app(aws_request_deps(Settings())), lifespan="off")
    return _adapter(event, context)
