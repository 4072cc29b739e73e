"""The staging places of new models' uploads (the `Uploader` port): its owner's bytes wait at
`{owner}/{sha256}` until `services.request.uploads.verify_upload` trusts and stores them.

- `LocalUploader`: a folder, filled by the app's own `PUT /uploads/{sha256}` route (the
  embedded default);
- `S3PresignedUploader`: `uploads/{owner}/{sha256}` in the bucket, filled by the browser
  through a presigned POST whose policy pins the content length to the announced size.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from adapters.aws_calls import record_calls
from core.ports import UploadOffer, UploadRejected


class LocalUploader:
    """Staging in a local folder (outside the object store), filled by `receive`."""

    receives_uploads = True

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

    receives_uploads = False

    def __init__(self, bucket: str, s3=None, prefix: str = "uploads/", expires_s: int = 900) -> None:
        import boto3

        self.bucket = bucket
        self.s3 = s3 or boto3.session.Session().client("s3")
        record_calls(self.s3)
        self.prefix = prefix
        self.expires_s = expires_s

    def _key(self, owner: str, sha256: str) -> str:
        return f"{self.prefix}{owner}/{sha256}"

    def offer(self, owner: str, sha256: str, size_bytes: int) -> UploadOffer:
        post = self.s3.generate_presigned_post(
            Bucket=self.bucket,
            Key=self._key(owner, sha256),
            Conditions=[["content-length-range", size_bytes, size_bytes]],
            ExpiresIn=self.expires_s,
        )
        return UploadOffer(method="POST", url=post["url"], fields=post["fields"], max_bytes=size_bytes)

    async def receive(self, owner: str, sha256: str, size_bytes: int, chunks: AsyncIterator[bytes]) -> int:
        raise UploadRejected("uploads go straight to S3 with the presigned POST of the offer", status=404)

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
