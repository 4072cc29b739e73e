"""`python -m services.request`: the request service's app on the real path (S3, EventBridge,
presigned S3 uploads; LocalStack when AWS_ENDPOINT_URL points at it), served by uvicorn.
The other services run as their own processes. For everything in one process, use
`python -m ayci serve`."""

from __future__ import annotations

import argparse
import logging

from ayci.serve import serve_aws
from ayci.settings import Settings
from core.logs import configure_logging

parser = argparse.ArgumentParser(prog="python -m services.request")
parser.add_argument("--host", default="127.0.0.1")
parser.add_argument("--port", type=int, default=8000)
args = parser.parse_args()
settings = Settings()
configure_logging(settings.log_format, logging.INFO)
serve_aws(settings, args.host, args.port)
