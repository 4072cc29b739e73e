"""Uploading a new model: where its bytes go before they are trusted, and how they are checked.

A model is uploaded to a staging place of its owner (`{owner}/{sha256}`), never straight to
`models/`. Only `verify_upload` moves it there, after checking that its size and SHA-256 are
the ones the user announced and that it is an accepted model file; on any mismatch the staged
bytes are discarded and nothing is stored. Two staging places, one interface:

- `LocalUploader`: a folder, filled by the app's own `PUT /uploads/{sha256}` route (the
  embedded default);
- `S3PresignedUploader`: `uploads/{owner}/{sha256}` in the bucket, filled by the browser
  through a presigned POST whose policy pins the content length to the announced size.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from core.ports import ObjectStore
from schemas.documents import ModelInfo
from engines.model_files import NotAModelError, sniff_format
from services.request.submission import keep_model, model_info


@dataclass(frozen=True)
class UploadOffer:
    """How to upload: `PUT` the raw bytes to `url` (a path of this app) with the API key, or
    `POST` a multipart form of `fields` plus the file (last, as `file`) to `url` (S3)."""

    method: str
    url: str
    fields: dict[str, str] = field(default_factory=dict)
    max_bytes: int = 0


class UploadRejected(ValueError):
    """The staged upload is not the announced model; `status` is the HTTP status to answer."""

    def __init__(self, reason: str, status: int = 422) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


class Uploader(Protocol):
    def offer(self, owner: str, sha256: str, size_bytes: int) -> UploadOffer: ...

    def fetch(self, owner: str, sha256: str, path: Path) -> bool:
        """Copy the staged upload to `path`; False if nothing is staged."""
        ...

    def discard(self, owner: str, sha256: str) -> None: ...


class LocalUploader:
    """Staging in a local folder (outside the object store), filled by `receive`."""

    def __init__(self, staging_dir: Path) -> None:
        self.staging_dir = Path(staging_dir)

    def _path(self, owner: str, sha256: str) -> Path:
        return self.staging_dir / owner / sha256

    def offer(self, owner: str, sha256: str, size_bytes: int) -> UploadOffer:
        return UploadOffer(method="PUT", url=f"uploads/{sha256}?size_bytes={size_bytes}", max_bytes=size_bytes)

    async def receive(self, owner: str, sha256: str, size_bytes: int, chunks: AsyncIterator[bytes]) -> int:
        """Stage the streamed body; `UploadRejected(413)` as soon as it exceeds `size_bytes`
        (nothing is kept then). Returns the number of bytes staged."""
        target = self._path(owner, sha256)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".part-")
        received = 0
        try:
            with os.fdopen(fd, "wb") as handle:
                async for chunk in chunks:
                    received += len(chunk)
                    if received > size_bytes:
                        raise UploadRejected(f"the upload is larger than the announced {size_bytes} bytes", status=413)
                    handle.write(chunk)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return received

    def fetch(self, owner: str, sha256: str, path: Path) -> bool:
        source = self._path(owner, sha256)
        if not source.is_file():
            return False
        os.replace(source, path)  # the staged file is consumed either way
        return True

    def discard(self, owner: str, sha256: str) -> None:
        self._path(owner, sha256).unlink(missing_ok=True)


class S3PresignedUploader:
    """Staging under `uploads/{owner}/{sha256}` in `bucket`, uploaded with a presigned POST.
    The POST policy's `content-length-range` is exactly the announced size, so S3 itself
    refuses a larger (or smaller) body (400 EntityTooLarge / EntityTooSmall)."""

    def __init__(self, bucket: str, s3=None, prefix: str = "uploads/", expires_s: int = 900) -> None:
        import boto3

        self.bucket = bucket
        self.s3 = s3 or boto3.session.Session().client("s3")
        self.prefix = prefix
        self.expires_s = expires_s

    def _key(self, owner: str, sha256: str) -> str:
        return f"{self.prefix}{owner}/{sha256}"

    def offer(self, owner: str, sha256: str, size_bytes: int) -> UploadOffer:
        post = self.s3.generate_presigned_post(
            Bucket=self.bucket, Key=self._key(owner, sha256),
            Conditions=[["content-length-range", size_bytes, size_bytes]], ExpiresIn=self.expires_s,
        )
        return UploadOffer(method="POST", url=post["url"], fields=post["fields"], max_bytes=size_bytes)

    def fetch(self, owner: str, sha256: str, path: Path) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.s3.download_file(self.bucket, self._key(owner, sha256), str(path))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True

    def discard(self, owner: str, sha256: str) -> None:
        self.s3.delete_object(Bucket=self.bucket, Key=self._key(owner, sha256))


def _sha256_and_size(path: Path) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def verify_upload(store: ObjectStore, uploader: Uploader, owner: str, sha256: str, size_bytes: int) -> dict:
    """Check the staged upload against the announced SHA-256 and size and that it is a model,
    then store it as `models/{sha256}` (with its facts in `models/{sha256}.json`). Returns
    those facts; `UploadRejected` (and nothing stored, the staged bytes discarded) otherwise."""
    known = model_info(store, sha256)
    if known is not None:  # stored meanwhile (by this or another user): nothing to do
        uploader.discard(owner, sha256)
        return known
    with tempfile.TemporaryDirectory(prefix="ayci-upload-") as tmp:
        path = Path(tmp) / "model"
        if not uploader.fetch(owner, sha256, path):
            raise UploadRejected(f"nothing was uploaded for model {sha256}: upload it first", status=409)
        try:
            actual_sha, actual_size = _sha256_and_size(path)
            if actual_size != size_bytes:
                raise UploadRejected(f"the upload has {actual_size} bytes, not the announced {size_bytes}")
            if actual_sha != sha256:
                raise UploadRejected(f"the upload's SHA-256 is {actual_sha}, not the announced {sha256}")
            try:
                model_format = sniff_format(path)
            except NotAModelError as exc:
                raise UploadRejected(f"not an accepted model (a torch.export .pt2 or ONNX file): {exc}") from None
        finally:
            uploader.discard(owner, sha256)
        info = ModelInfo(sha256=sha256, size_bytes=size_bytes, format=model_format.value)
        keep_model(store, path, info)
    return info.public()

