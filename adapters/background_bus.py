"""The in-process bus driven by one worker thread, for a server on the embedded default.

The bus is not thread-safe, so only the worker thread touches it. Request threads publish into
a thread-safe inbox; the worker moves the inbox onto the bus before every delivery (as a bus
observer, so in its own thread), which lets a run submitted while another is being measured
join the queue at once, and runs `run_until_idle` whenever there is work.
"""

from __future__ import annotations

import queue
import threading
from datetime import datetime

import structlog

from adapters.inprocess_bus import InProcessBus
from schemas.events import Envelope

log = structlog.get_logger()


class BackgroundBus:
    """A transport (`publish`, `publish_at`) any thread may call; deliveries happen in the
    worker thread started by `start`."""

    def __init__(self, bus: InProcessBus) -> None:
        self.bus = bus
        self._inbox: queue.SimpleQueue[tuple[Envelope, datetime | None]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stopping = False
        self._busy = threading.Lock()  # held while the worker delivers
        self._thread = threading.Thread(target=self._work, name="ayci-bus", daemon=True)
        bus.observers.append(lambda _queue, _event: self._drain())

    def publish(self, envelopes: list[Envelope]) -> None:
        for envelope in envelopes:
            self._inbox.put((envelope, None))
        self._wake.set()

    def publish_at(self, envelope: Envelope, when: datetime) -> None:
        self._inbox.put((envelope, when))
        self._wake.set()

    def start(self) -> BackgroundBus:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5) -> None:
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout)

    def idle(self) -> bool:
        """Nothing waiting and nothing being delivered (for tests)."""
        return self._inbox.empty() and not self._busy.locked() and not self.bus.queue and not self.bus.delayed

    def _drain(self) -> None:
        while True:
            try:
                envelope, when = self._inbox.get_nowait()
            except queue.Empty:
                return
            if when is None:
                self.bus.publish([envelope])
            else:
                self.bus.publish_at(envelope, when)

    def _work(self) -> None:
        while not self._stopping:
            self._wake.wait()
            self._wake.clear()
            if self._stopping:
                return
            with self._busy:
                try:
                    self._drain()
                    self.bus.run_until_idle()
                except Exception:  # the bus catches handler errors; this is a bug: keep serving
                    log.exception("bus_worker_failed")
