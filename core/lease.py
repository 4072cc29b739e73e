"""One holder at a time for work shared by processes that may die: a lease in the object store.

The lease is a small document (`{"holder", "expires_at"}`) under a key, and every write of it is
a compare-and-put on the store (`ObjectStore.compare_and_put`: S3's `If-None-Match: *` to create it,
`If-Match` on its ETag to change it). So of two workers that both find a lease expired (its holder
died) and take it over, exactly one wins; a holder renews it and releases it only while it is still
its own. The converter holds one per artifact while it converts (`services/converter/handlers.py`),
the measuring functions one per Lambda function while they reconfigure it (`adapters/lambda_sizes.py`).

Not a lease: the machine's measurement lock (`core/measurement_lock.py`), an `flock` the kernel
releases when its holder dies, with shared holders and a turnstile.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import structlog

from core.ports import NotFound, ObjectStore

log = structlog.get_logger()


def _parse(document: bytes) -> tuple[str | None, datetime]:
    """(holder, expiry) of a stored lease; one that cannot be read has no holder (it can be taken)."""
    try:
        body = json.loads(document)
        expires = body["expires_at"]
        if isinstance(expires, int | float):  # leases written before this module: seconds since the epoch
            return body["holder"], datetime.fromtimestamp(expires, UTC)
        return body["holder"], datetime.fromisoformat(expires)
    except (ValueError, KeyError, TypeError):
        return None, datetime.min.replace(tzinfo=UTC)


class Lease:
    """The lease under `key` in `store`, as `holder` sees it: `take()`, `renew()` while working,
    `release()` when done. `now` is the clock (timezone-aware)."""

    def __init__(
        self,
        store: ObjectStore,
        key: str,
        holder: str,
        duration_s: float,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.store, self.key, self.holder = store, key, holder
        self.duration_s, self.now = duration_s, now
        self._version: str | None = None  # the version this holder last wrote; None when it holds nothing

    @property
    def held(self) -> bool:
        return self._version is not None

    def _document(self, holder: str | None, expires_at: datetime) -> bytes:
        return json.dumps({"holder": holder, "expires_at": expires_at.isoformat()}).encode()

    def take(self) -> bool:
        """True if `holder` holds the lease now: created, taken after a release or an expiry (its
        holder died), or already its own (a redelivered message: renewed). False while another
        holder's lease runs, or when another taker won the same expired lease."""
        version: str | None = None  # first: create it, if there is none
        for _ in range(2):  # twice: the lease may be deleted between reading it and writing it
            written = self.store.compare_and_put(
                self.key, self._document(self.holder, self.now() + timedelta(seconds=self.duration_s)), version=version
            )
            if written is not None:
                self._version = written
                return True
            try:
                document, version = self.store.get_versioned(self.key)
            except NotFound:
                version = None
                continue
            holder, expires_at = _parse(document)
            if holder is not None and holder != self.holder and expires_at > self.now():
                return False
        return False

    def renew(self) -> bool:
        """Push the expiry on (the work goes on). False if this holder does not hold the lease: it
        never took it, or it expired and another took it over (the work then runs twice; its
        result is the same)."""
        if self._version is None:
            return False
        written = self.store.compare_and_put(
            self.key,
            self._document(self.holder, self.now() + timedelta(seconds=self.duration_s)),
            version=self._version,
        )
        self._version = written
        if written is None:
            log.warning("lease_lost", key=self.key, holder=self.holder)
            return False
        return True

    def release(self) -> None:
        """Give the lease up now (the next taker need not wait for it to expire), if it is still ours."""
        if self._version is None:
            return
        self.store.compare_and_put(self.key, self._document(None, self.now()), version=self._version)
        self._version = None
