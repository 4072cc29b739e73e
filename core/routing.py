"""Which service consumes which event: the one routing table. The CloudFormation template
(`infra/template.yaml`) declares the same routes as EventBridge rules."""

from __future__ import annotations

from schemas.events import Envelope

ROUTES: dict[str, tuple[str, ...]] = {
    "RequestSubmitted": ("dedup",),
    "RunPlanned": ("archiver",),
    "ComboPending": ("converter",),
    "ModelConverted": ("inference-{hardware}",),
    "InferenceDone": ("archiver",),
    "ComboFailed": ("archiver",),
    "RunDeadlineReached": ("archiver",),
    "RunArchived": ("notifier",),
}


def consumers(envelope: Envelope) -> list[str]:
    """The queue names (service names) that receive `envelope`."""
    hardware = getattr(getattr(envelope.payload, "combo", None), "hardware", None)
    names = ROUTES.get(envelope.type, ())
    return [n.format(hardware=hardware.value if hardware else "") for n in names]
