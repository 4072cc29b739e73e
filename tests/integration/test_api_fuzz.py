"""Schemathesis against the request service's own OpenAPI document: whatever it sends, within
the schema or not, with a valid key, a wrong one or none, the answer is never a 5xx.

In process (ASGI), over a real local-folder store and uploader; the publisher only records,
so no run is measured. Examples per operation are bounded to keep this to about a minute."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck

from adapters.local_store import LocalFolderStore
from adapters.uploads import LocalUploader
from ayci.bootstrap import request_limits
from ayci.settings import Settings
from schemas import keys
from services.request.app import RequestDeps, create_app, parse_api_keys
from tests.fakes import RecordingPublisher, tiny_onnx_model

KEY = "fuzz-key-123456"
MAX_EXAMPLES = 60


def fuzzed_app():
    root = Path(tempfile.mkdtemp(prefix="ayci-fuzz-"))
    settings = Settings(data_dir=root / "data", max_body_bytes=16 * 1024, max_model_bytes=1_000_000)
    store = LocalFolderStore(settings.data_dir)
    model = tiny_onnx_model()  # one stored model, so that some runs get past the model check
    sha = hashlib.sha256(model).hexdigest()
    store.put_bytes(keys.model(sha), model)
    store.put_bytes(
        keys.model_info(sha), f'{{"sha256": "{sha}", "size_bytes": {len(model)}, "format": "onnx"}}'.encode()
    )
    store.put_bytes(keys.model_owner(sha, "fuzzer"), b"")  # the fuzzer's own model
    deps = RequestDeps(
        store=store,
        publisher=RecordingPublisher(),
        api_keys=parse_api_keys(f"{KEY}:fuzzer"),
        uploader=LocalUploader(root / "uploads"),
        limits=request_limits(settings),
    )
    return create_app(deps)


schema = schemathesis.openapi.from_asgi("/openapi.json", fuzzed_app())


@schema.parametrize()
@hypothesis.settings(
    max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)
@pytest.mark.parametrize("key", [KEY, "wrong-key-000000", None], ids=["valid-key", "wrong-key", "no-key"])
def test_no_server_errors(case, key):
    headers = dict(case.headers or {})
    headers.pop("X-API-Key", None)
    if key:
        headers["X-API-Key"] = key
    response = case.call(headers=headers)
    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:500]}"
    )
    sent = response.request.headers.get("X-API-Key")  # schemathesis drops it itself in some cases
    if sent != KEY:
        assert response.status_code == (401 if not sent else 403), response.text[:300]
