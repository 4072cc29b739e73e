"""The ports every handler talks through. Adapters (local folder, in-process bus, S3,
EventBridge + SQS, SES) implement them and are chosen in `ayci.bootstrap`."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Protocol

from schemas.events import Envelope


class NotFound(KeyError):
    """No object under that key."""


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
