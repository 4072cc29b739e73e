"""The topology, declared once: each service, the events it consumes, its queues, how many
messages its worker takes at a time and the processes that run it.

Derived from this table: the routing (`core.routing.ROUTES`, which `infra/template.yaml`'s
EventBridge rules must match: `tests/unit/test_topology.py`), the embedded bus's
subscriptions (`ayci.bootstrap`), the queue workers (`ayci.worker`) and the processes of the
real path on this machine (`infra.localstack.ServiceProcesses.start_all`).
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.events import (
    ComboFailed,
    ComboPending,
    CombosReused,
    InferenceDone,
    ModelConverted,
    Payload,
    ProfileRequested,
    RequestSubmitted,
    RunArchived,
    RunDeadlineReached,
    RunPlanned,
)

HARDWARE = ("intel", "arm")


@dataclass(frozen=True)
class ServiceSpec:
    name: str
    consumes: tuple[type[Payload], ...]
    per_hardware: bool = False  # one queue (and worker) per hardware: `<name>-<hardware>`
    batch_size: int = 10  # messages a worker receives at a time (long work: 1, so none waits behind it)

    @property
    def queues(self) -> tuple[str, ...]:
        return tuple(f"{self.name}-{hw}" for hw in HARDWARE) if self.per_hardware else (self.name,)

    def processes(self, hardware: tuple[str, ...] = HARDWARE) -> list[tuple[str, list[str]]]:
        """(process name, arguments of `python -m services.<name>`) for each process to run."""
        if self.per_hardware:
            return [(f"{self.name}-{hw}", ["--hardware", hw]) for hw in hardware]
        return [(self.name, [])]


SERVICES: tuple[ServiceSpec, ...] = (
    ServiceSpec("dedup", (RequestSubmitted,)),
    ServiceSpec("converter", (ComboPending,), batch_size=1),
    ServiceSpec("inference", (ModelConverted, ProfileRequested), per_hardware=True, batch_size=1),
    ServiceSpec("archiver", (RunPlanned, InferenceDone, CombosReused, ComboFailed, RunDeadlineReached)),
    ServiceSpec("notifier", (RunArchived,)),
)
BY_NAME = {spec.name: spec for spec in SERVICES}


def every_queue() -> list[str]:
    return [queue for spec in SERVICES for queue in spec.queues]
