"""The base of the stored documents' parts (`schemas/documents.py`, `schemas/cost.py`,
`schemas/recommendation.py`): fields they do not know are kept (a newer writer's additions
survive a round trip through an older reader), NaN and infinities written as Python's `json`
writes them."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Flexible(BaseModel):
    model_config = ConfigDict(extra="allow", ser_json_inf_nan="constants")
