"""What the request service's routes work with, wired in `ayci/bootstrap.py` for each host."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request

from core.ports import ObjectStore, Uploader


@dataclass(frozen=True)
class RequestLimits:
    max_body_bytes: int = 64 * 1024  # a JSON request body
    max_model_bytes: int = 1 << 30  # an uploaded model
    max_combinations: int = 512  # per run
    results_url: str = "http://127.0.0.1:8000"  # where the results are shown (links in answers)
    max_runs_in_flight: int = 20  # per owner
    max_combinations_per_day: int = 5000  # per owner, per UTC day
    email_allowed: tuple[str, ...] = ("*",)  # addresses, "@domain" entries, or "*"

    def email_allowed_to(self, address: str) -> bool:
        address = address.lower()
        return any(
            rule == "*" or rule.lower() == address or (rule.startswith("@") and address.endswith(rule.lower()))
            for rule in self.email_allowed
        )


@dataclass
class RequestDeps:
    store: ObjectStore
    publisher: Any  # `publish(list[Envelope])`: a LoggedPublisher on any transport
    api_keys: dict[str, str]  # API key -> owner
    uploader: Uploader
    limits: RequestLimits


def deps_of(request: Request) -> RequestDeps:
    return request.app.state.deps


Deps = Annotated[RequestDeps, Depends(deps_of)]
