"""The ports every handler talks through. Adapters (local folder, in-process bus, S3,
EventBridge + SQS, SES) implement them and are chosen in `ayci.bootstrap`."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Protocol

from schemas.events import Envelope


class NotFound(KeyError):
    """No object under that key."""


def content_version(data: bytes) -> str:
    """The version of an object in a store that keeps none of its own (a folder, memory): the MD5
    of its bytes, as S3's ETag of a single-part upload."""
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


class ObjectStore(Protocol):
    """Bytes by key: `models/`, `artifacts/`, `references/`, `results/`, `runs/` (see docs/architecture.md)."""

    def exists(self, key: str) -> bool: ...

    def get_bytes(self, key: str) -> bytes:
        """The object's bytes; `NotFound` if absent."""
        ...

    def put_bytes(self, key: str, data: bytes, *, if_absent: bool = False) -> bool:
        """Store `data`. With `if_absent`, store only if nothing is there yet and say whether
        this call stored it (the at-most-once write)."""
        ...

    def get_versioned(self, key: str) -> tuple[bytes, str]:
        """The object's bytes and its version (S3: its ETag), for `compare_and_put`; `NotFound` if absent."""
        ...

    def compare_and_put(self, key: str, data: bytes, *, version: str | None) -> str | None:
        """Store `data` only if the object is still at `version` (S3: `If-Match`), or, with `version`
        None, only if there is no object (`If-None-Match: *`). The new version; None if the condition
        failed (another writer got there first), so of two writers from the same version one wins."""
        ...

    def get_file(self, key: str, path: Path) -> None: ...

    def put_file(self, key: str, path: Path) -> None: ...

    def list_keys(self, prefix: str) -> list[str]:
        """Keys under a prefix, sorted. Only replay reads a run's event log this way;
        results and artifacts are always found by key."""
        ...


class EventPublisher(Protocol):
    def publish(self, envelopes: list[Envelope]) -> None: ...

    def publish_at(self, envelope: Envelope, when: datetime) -> None:
        """Deliver `envelope` to its consumers no earlier than `when` (a delayed message)."""
        ...


class Mailer(Protocol):
    def send(self, *, to: str, subject: str, text: str, html: str) -> str:
        """Send one email; returns the provider's message id."""
        ...


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
    """Where a new model's bytes wait before they are trusted (`{owner}/{sha256}`)."""

    # True if the client sends the bytes to this app (`PUT /uploads/{sha256}`, then `receive`);
    # False if it sends them elsewhere (a presigned S3 POST)
    receives_uploads: bool

    def offer(self, owner: str, sha256: str, size_bytes: int) -> UploadOffer: ...

    async def receive(self, owner: str, sha256: str, size_bytes: int, chunks: AsyncIterator[bytes]) -> int:
        """Stage a streamed body (only where `receives_uploads`); `UploadRejected` past `size_bytes`."""
        ...

    def fetch(self, owner: str, sha256: str, path: Path) -> bool:
        """Copy the staged upload to `path`; False if nothing is staged."""
        ...

    def discard(self, owner: str, sha256: str) -> None: ...


class MeasurementRefused(Exception):
    """A measuring function could not or did not measure a combination; `reason` says why
    (an artifact too large for its ephemeral storage, a memory size the account is not
    offered, out of memory, a timeout). The combination fails with it; the run goes on."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class MeasuringFunctions(Protocol):
    """Functions of the memory size and architecture a combination needs, made on demand
    (AWS Lambda: `adapters/lambda_sizes.py`). Each call measures in a function configured
    exactly so; concurrent calls for other sizes never reconfigure it under each other."""

    def serves(self, hardware: str) -> bool:
        """Whether a measuring function is deployed for `hardware` (intel, arm)."""
        ...

    def measure(self, *, hardware: str, memory_mb: int, request: dict, staged_keys: list[str]) -> dict:
        """Invoke the `hardware` function at `memory_mb` with `request`, its ephemeral storage
        sized for the objects `staged_keys` it downloads; the report it returns.
        `MeasurementRefused` with the reason when it cannot or did not measure."""
        ...
