"""Integration tests: AWS clients point at LocalStack (start it with `scripts/localstack.sh start`).

A test marked `localstack` is skipped when LocalStack does not answer, unless
`AYCI_REQUIRE_LOCALSTACK=1`, which turns the skip into a failure (CI sets it).
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from functools import cache

import pytest

from infra.localstack import LOCALSTACK_ENV
from tests.conftest import skip_unless_required


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "localstack: needs LocalStack (scripts/localstack.sh start)")


@pytest.fixture(scope="session", autouse=True)
def aws_env() -> Iterator[None]:
    """Every AWS client in these tests talks to LocalStack with its fake credentials. An
    `AWS_ENDPOINT_URL` already set (another port) is kept; real credentials never are."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in LOCALSTACK_ENV.items():
            if name != "AWS_ENDPOINT_URL" or not os.environ.get(name):
                patch.setenv(name, value)
        yield


@cache
def _localstack_problem(endpoint: str) -> str | None:
    """Why LocalStack at `endpoint` cannot be used, or None when it is ready."""
    try:
        with urllib.request.urlopen(f"{endpoint}/_localstack/init", timeout=3) as response:
            ready = json.load(response).get("completed", {}).get("READY")
    except (OSError, ValueError) as error:
        return f"LocalStack not reachable at {endpoint} ({error}); start it with scripts/localstack.sh start"
    return None if ready else f"LocalStack at {endpoint} is not ready yet"


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("localstack") is None:
        return
    problem = _localstack_problem(os.environ.get("AWS_ENDPOINT_URL") or LOCALSTACK_ENV["AWS_ENDPOINT_URL"])
    if problem is None:
        return
    skip_unless_required("AYCI_REQUIRE_LOCALSTACK", problem)
