"""Which queue receives which event, derived from the topology (`core/topology.py`). The
CloudFormation template (`infra/template.yaml`) declares the same routes as EventBridge rules."""

from __future__ import annotations

from core.topology import SERVICES
from schemas.events import Envelope


def _routes() -> dict[str, tuple[str, ...]]:
    routes: dict[str, tuple[str, ...]] = {}
    for spec in SERVICES:
        for event in spec.consumes:
            queue = f"{spec.name}-{{hardware}}" if spec.per_hardware else spec.name
            routes[event.TYPE] = (*routes.get(event.TYPE, ()), queue)
    return routes


# event type -> the queues that receive it ("inference-{hardware}": by the combination's hardware)
ROUTES: dict[str, tuple[str, ...]] = _routes()


def consumers(envelope: Envelope) -> list[str]:
    """The queue names (service names) that receive `envelope`."""
    hardware = getattr(getattr(envelope.payload, "combo", None), "hardware", None)
    names = ROUTES.get(envelope.type, ())
    return [n.format(hardware=hardware.value if hardware else "") for n in names]
