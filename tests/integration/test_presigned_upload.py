"""Model uploads on the real path: a presigned S3 POST (LocalStack) limited to the announced
size, then the server's check of SHA-256, size and format before `models/{sha256}`."""

from __future__ import annotations

import hashlib
import uuid

import boto3
import httpx
import pytest

from adapters.local_store import LocalFolderStore
from adapters.uploads import S3PresignedUploader
from core.ports import UploadRejected
from services.request.uploads import verify_upload
from tests.fakes import tiny_onnx_model

pytestmark = pytest.mark.localstack


@pytest.fixture
def uploader():
    bucket = f"ayci-uploads-{uuid.uuid4().hex[:8]}"
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=bucket)
    yield S3PresignedUploader(bucket, s3=s3)
    for item in s3.list_objects_v2(Bucket=bucket).get("Contents", []):
        s3.delete_object(Bucket=bucket, Key=item["Key"])
    s3.delete_bucket(Bucket=bucket)


def post(offer, data: bytes) -> httpx.Response:
    return httpx.post(offer.url, data=offer.fields, files={"file": ("model", data)}, timeout=30)


def staged_keys(uploader) -> list[str]:
    return [o["Key"] for o in uploader.s3.list_objects_v2(Bucket=uploader.bucket).get("Contents", [])]


def test_presigned_post_upload_then_verified_and_stored(tmp_path, uploader):
    store = LocalFolderStore(tmp_path)
    data = tiny_onnx_model()
    sha = hashlib.sha256(data).hexdigest()
    offer = uploader.offer("alice", sha, len(data))
    assert offer.method == "POST" and offer.fields["key"] == f"uploads/alice/{sha}"
    assert post(offer, data).status_code in (200, 201, 204)
    info = verify_upload(store, uploader, "alice", sha, len(data))
    assert {k: info[k] for k in ("sha256", "size_bytes", "format")} == {
        "sha256": sha,
        "size_bytes": len(data),
        "format": "onnx",
    }
    assert [spec["name"] for spec in info["signature"]["inputs"]] == ["x"]
    assert store.get_bytes(f"models/{sha}") == data
    assert staged_keys(uploader) == []  # the staged copy is gone


def test_s3_refuses_a_body_larger_than_announced(uploader):
    data = tiny_onnx_model()
    offer = uploader.offer("alice", hashlib.sha256(data).hexdigest(), len(data) - 1)
    response = post(offer, data)
    assert response.status_code == 400 and "EntityTooLarge" in response.text
    assert staged_keys(uploader) == []


def test_a_mismatched_upload_is_discarded_and_nothing_stored(tmp_path, uploader):
    store = LocalFolderStore(tmp_path)
    data = tiny_onnx_model()
    claimed = hashlib.sha256(b"another model").hexdigest()
    assert post(uploader.offer("alice", claimed, len(data)), data).status_code in (200, 201, 204)
    with pytest.raises(UploadRejected, match="SHA-256"):
        verify_upload(store, uploader, "alice", claimed, len(data))
    assert not store.exists(f"models/{claimed}") and staged_keys(uploader) == []
    with pytest.raises(UploadRejected) as nothing:
        verify_upload(store, uploader, "alice", claimed, len(data))
    assert nothing.value.status == 409
