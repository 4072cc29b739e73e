"""Hosts of the request service's app, each started with what `ayci/bootstrap.py` built:

- `serve_embedded(settings, host, port)`: `python -m ayci serve`, the page and the API with
  every service in this process;
- `serve_aws(settings, host, port)`: `python -m services.request`, the app on the real path
  (S3, EventBridge, presigned uploads; LocalStack when AWS_ENDPOINT_URL points at it).

The Lambda behind API Gateway adapts the same app with Mangum (`services/request/lambda_handler.py`).
"""

from __future__ import annotations

import uvicorn
from rich.console import Console

from ayci.bootstrap import aws_request_deps, embedded_server
from ayci.settings import Settings
from services.request.app import create_app


def serve_embedded(settings: Settings, host: str, port: int) -> int:
    """The page and the API on the embedded default, until Ctrl-C."""
    server = embedded_server(settings)
    url = f"http://{host}:{port}"
    hint = (
        f"/#key={server.new_key}   (a new API key for owner 'local'; set AYCI_API_KEYS=KEY:OWNER to keep one)"
        if server.new_key
        else "/"
    )
    Console(stderr=True).print(f"AYCI serving {url}{hint}", highlight=False, soft_wrap=True)
    try:
        uvicorn.run(server.app, host=host, port=port, log_level="warning")
    finally:
        server.stop()
    return 0


def serve_aws(settings: Settings, host: str, port: int) -> None:
    """The request service's app on the real path, until Ctrl-C."""
    uvicorn.run(create_app(aws_request_deps(settings)), host=host, port=port, log_level="warning")
