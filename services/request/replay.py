"""Replay: re-run a stored run from one stage, as a new run linked to the original.

The original's event log (`runs/{run id}/events/`) is read back (upcast to the current
schema versions); its events of the chosen type are re-published under a new run id, with a
fresh `RunPlanned` naming just those combinations. Without `force`, a combination whose result
is stored is reused (`InferenceDone`, `reused: true`); with it, it is measured again.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from core.deadlines import run_deadline_s
from core.ports import ObjectStore
from core.results import latest_quick_results, reused_result
from schemas import keys
from schemas.events import Envelope, Payload, RequestSubmitted, RunPlanned

REPLAYABLE = ("RequestSubmitted", "ComboPending", "ModelConverted")


class ReplayError(ValueError):
    pass


def stored_events(store: ObjectStore, run_id: str) -> list[Envelope]:
    """A run's event log, in order."""
    return [Envelope.parse(store.get_bytes(key)) for key in store.list_keys(keys.event_log_prefix(run_id))]


def replay(
    store: ObjectStore,
    run_id: str,
    from_type: str,
    *,
    force: bool = False,
    new_run_id: str | None = None,
    only: set[str] | None = None,
) -> list[Envelope]:
    """The envelopes that start the replay (publish them); the new run id is theirs. `only`:
    just these combination keys (`ayci gate --confirm` re-measures the regressed ones)."""
    if from_type not in REPLAYABLE:
        raise ReplayError(f"--from must be one of {', '.join(REPLAYABLE)}, got {from_type!r}")
    log = stored_events(store, run_id)
    if not log:
        raise ReplayError(f"run {run_id} has no stored events")
    new_run_id = new_run_id or str(uuid.uuid4())
    start = Envelope.wrap(
        _request_of(log).model_copy(update={"force": force, "replay_of": run_id}), run_id=new_run_id, producer="replay"
    )
    if from_type == "RequestSubmitted":
        return [start]
    # a combination's last event: a racing run's refinement where it has one (replayed, it measures in full)
    chosen = {
        e.payload.combo_key: e for e in log if e.type == from_type and (only is None or e.payload.combo_key in only)
    }
    if not chosen:
        raise ReplayError(f"run {run_id} has no {from_type} events to replay")
    original_plan = next(e.payload for e in log if e.type == "RunPlanned")
    request = start.payload
    plan = RunPlanned(
        model=original_plan.model,
        combos={k: original_plan.combos[k] for k in chosen},
        deadline=datetime.now(UTC) + timedelta(seconds=run_deadline_s(request)),
        request=request,
    )
    out: list[Payload] = [plan]
    for key, event in chosen.items():
        reused = None if force else reused_result(store, key)
        if reused is None and not force and request.precision == "quick":
            # as at submission (services/dedup): a quick run takes a stored quick measurement as its quick pass
            quick = latest_quick_results(store, [key]).get(key)
            reused = None if quick is None else quick.inference_done().model_copy(update={"precision": "quick"})
        if reused is not None:
            out.append(reused)
        else:
            out.append(event.payload)
    return [start.caused(p, producer="replay", index=i) for i, p in enumerate(out)]


def _request_of(log: list[Envelope]) -> RequestSubmitted:
    for event in log:
        if event.type == "RequestSubmitted":
            return event.payload
        if event.type == "RunPlanned":
            return event.payload.request
    raise ReplayError("the stored run has no request")
