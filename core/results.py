"""Stored results, versioned: a measurement writes `results/{combo key}/{run id}.json` once
(never replaced: the summaries that used it keep naming exactly it) and points
`results/{combo key}.json` at the latest version (what later runs reuse). A forced
re-measurement adds a version; it never changes what another run's summary references."""

from __future__ import annotations

import structlog

from core.ports import NotFound, ObjectStore
from schemas import keys
from schemas.combos import MEASUREMENT_VERSION
from schemas.documents import CombinationProfile, MeasuredResult
from schemas.events import InferenceDone

log = structlog.get_logger()


def keep_result(store: ObjectStore, result: MeasuredResult) -> str:
    """Store a new measurement; the key of its version."""
    version = keys.result_version(result.combo_key, result.run_id)
    data = result.to_bytes(indent=1)
    store.put_bytes(version, data, if_absent=True)
    store.put_bytes(keys.result(result.combo_key), data)
    return version


def reused_result(store: ObjectStore, combo_key: str) -> InferenceDone | None:
    """The `InferenceDone` that reuses the latest stored result of `combo_key` (None if none),
    naming its exact version (the latest key itself for a result stored before versions).
    A stale result is never reused (None: measure again): one of another measurement version,
    one without the environment it was measured in, one that does not read."""
    if not store.exists(keys.result(combo_key)):
        return None
    try:
        latest = MeasuredResult.read(store.get_bytes(keys.result(combo_key)))
    except (ValueError, KeyError, TypeError) as exc:
        log.info("stored_result_stale", combo_key=combo_key, reason=f"unreadable: {type(exc).__name__}")
        return None
    if latest.measurement_version != MEASUREMENT_VERSION or latest.environment is None:
        log.info("stored_result_stale", combo_key=combo_key, measurement_version=latest.measurement_version)
        return None
    version = keys.result_version(combo_key, latest.run_id)
    return latest.inference_done(result_key=version if store.exists(version) else keys.result(combo_key), reused=True)


def stored_profile(store: ObjectStore, result: dict) -> CombinationProfile | None:
    """The stored profiled pass of a result (`results/{combo key}/{run id}.profile.json`), or None."""
    try:
        return CombinationProfile.read(store.get_bytes(keys.profile(result["combo_key"], result["run_id"])))
    except NotFound:
        return None
