"""Stored results, versioned: a measurement writes `results/{combo key}/{run id}.json` once
(never replaced: the summaries that used it keep naming exactly it) and points
`results/{combo key}.json` at the latest version (what later runs reuse). A forced
re-measurement adds a version; it never changes what another run's summary references."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, NamedTuple

import structlog

from core.ports import NotFound, ObjectStore
from schemas import keys
from schemas.combos import MEASUREMENT_VERSION
from schemas.cost import UnknownPriceRegion, cost_block
from schemas.documents import CombinationProfile, MeasuredResult, ResultBundle, SummaryResult, json_object
from schemas.events import STORED, InferenceDone, RunPlanned, SchemaError

log = structlog.get_logger()


def keep_result(store: ObjectStore, result: MeasuredResult) -> str:
    """Store a new measurement; the key of its version. A quick one (`precision: quick`, the first
    pass of a racing run, `core/racing.py`) is kept beside the run's versions
    (`results/{combo key}/{run id}.quick.json`) and never pointed at as the latest: no later run
    reuses it, and the run's refined measurement, if it gets one, is stored as any other."""
    if is_quick(result):
        version = keys.result_version(result.combo_key, f"{result.run_id}{QUICK_SUFFIX}")
        data = result.to_bytes(indent=1)
        store.put_bytes(version, data, if_absent=True)
        store.put_bytes(keys.quick_result(result.combo_key), data)  # a later quick run's quick pass
        return version
    version = keys.result_version(result.combo_key, result.run_id)
    data = result.to_bytes(indent=1)
    store.put_bytes(version, data, if_absent=True)
    store.put_bytes(keys.result(result.combo_key), data)
    return version


QUICK_SUFFIX = ".quick"


def is_quick(result: MeasuredResult | dict[str, Any]) -> bool:
    """Whether a result holds the rough figures of a racing run's quick pass."""
    precision = result.get("precision") if isinstance(result, dict) else getattr(result, "precision", None)
    return precision == "quick"


class StoredResult(NamedTuple):
    """A stored result a run may reuse: the key of its exact version and its document as
    stored, validated when found. Kept as read, not as a model: a reuse writes the documents
    again as they are, and 1,536 models would more than double what a resubmission keeps
    alive (and the garbage collector scans)."""

    version: str
    document: dict[str, Any]

    def inference_done(self) -> InferenceDone:
        """The `InferenceDone` that reuses this result, naming its exact version."""
        return MeasuredResult.read(self.document).inference_done(result_key=self.version, reused=True)


def latest_result(store: ObjectStore, combo_key: str) -> StoredResult | None:
    """The latest stored result of `combo_key`, or None if there is none or it is stale: of
    another measurement version, without the environment it was measured in, unreadable, or
    disturbed or unconfined (`untrusted_reason`): measure again. One read: a result of the current
    measurement version was written by `keep_result`, so its version exists."""
    try:
        return _fresh(combo_key, store.get_bytes(keys.result(combo_key)))
    except NotFound:
        return None


def _fresh(combo_key: str, stored: bytes | dict[str, Any], *, quick: bool = False) -> StoredResult | None:
    """The stored result if a run may reuse it; `quick`: a quick measurement, for a quick run's first pass."""
    try:
        document = stored if isinstance(stored, dict) else json_object(stored, "MeasuredResult")
        latest = MeasuredResult.read(document)
    except (ValueError, KeyError, TypeError) as exc:
        log.info("stored_result_stale", combo_key=combo_key, reason=f"unreadable: {type(exc).__name__}")
        return None
    if is_quick(latest) != quick:  # rough figures are never reused as a full measurement
        log.info("stored_result_not_reused", combo_key=combo_key, run_id=latest.run_id, reason="quick pass")
        return None
    if latest.measurement_version != MEASUREMENT_VERSION or latest.environment is None:
        log.info("stored_result_stale", combo_key=combo_key, measurement_version=latest.measurement_version)
        return None
    if untrusted := untrusted_reason(latest):
        log.info("stored_result_not_reused", combo_key=combo_key, run_id=latest.run_id, reason=untrusted)
        return None
    run = f"{latest.run_id}{QUICK_SUFFIX}" if quick else latest.run_id
    return StoredResult(keys.result_version(combo_key, run), document)


def untrusted_reason(result: MeasuredResult) -> str | None:
    """Why a stored result is no measurement another request may take as its own (None: it is one):
    other work disturbed it, or it ran unconfined (not as the memory size's CPU share and memory
    cap). Every request expects a confined, undisturbed measurement: such a result is measured again.
    How it was built (a tvm artifact's tuning budget) is in its key (`schemas/combos.combo_key`)."""
    if result.load is not None and result.load.disturbed:
        return f"disturbed: {result.load.disturbance}"
    if not result.confined:
        return f"unconfined: {result.confinement_reason or 'not confined to its memory size'}"
    return None


LOOKUPS = 16  # concurrent reads of stored results
PACKS_READ = 8  # at most this many of a model's newest packs, then one read per combination left


def latest_results(store: ObjectStore, model_sha256: str, combo_keys: list[str]) -> dict[str, StoredResult]:
    """`latest_result` of many combinations of one model: first from the model's result packs,
    newest first (the latest result of a finished run: a handful of reads for a resubmitted
    matrix), then one read per combination no pack holds, concurrently."""
    found: dict[str, StoredResult] = {}
    wanted = set(combo_keys)
    for pack_key in sorted(store.list_keys(keys.result_packs_prefix(model_sha256)), reverse=True)[:PACKS_READ]:
        if not wanted - found.keys():
            break
        try:
            pack = ResultBundle.read(store.get_bytes(pack_key))
        except (NotFound, SchemaError) as exc:
            log.warning("result_pack_unreadable", pack=pack_key, reason=str(exc)[:200])
            continue
        for document in pack.results.values():
            key = document.get("combo_key")
            if key in wanted and key not in found and (fresh := _fresh(key, document)) is not None:
                found[key] = fresh
    left = [k for k in combo_keys if k not in found]
    with ThreadPoolExecutor(max_workers=LOOKUPS) as pool:
        found |= {
            k: f for k, f in zip(left, pool.map(lambda k: latest_result(store, k), left), strict=True) if f is not None
        }
    return found


def latest_quick_results(store: ObjectStore, combo_keys: list[str]) -> dict[str, StoredResult]:
    """The latest quick measurements of `combo_keys` (those that have one): a quick run reuses them as
    its quick pass where no full measurement is stored."""

    def read(key: str) -> StoredResult | None:
        try:
            return _fresh(key, store.get_bytes(keys.quick_result(key)), quick=True)
        except NotFound:
            return None

    with ThreadPoolExecutor(max_workers=LOOKUPS) as pool:
        return {k: f for k, f in zip(combo_keys, pool.map(read, combo_keys), strict=True) if f is not None}


def pack_results(
    store: ObjectStore, model_sha256: str, run_id: str, archived_at: datetime, measured: dict[str, dict]
) -> None:
    """Keep the results a run measured (result key -> document) in one pack of its model."""
    if measured:
        store.put_bytes(keys.result_pack(model_sha256, archived_at, run_id), ResultBundle(results=measured).to_bytes())


def reused_result(store: ObjectStore, combo_key: str) -> InferenceDone | None:
    """The `InferenceDone` that reuses the latest stored result of `combo_key` (None if none
    or stale, `latest_result`), naming its exact version."""
    found = latest_result(store, combo_key)
    return None if found is None else found.inference_done()


def stored_profile(
    store: ObjectStore, result: SummaryResult | MeasuredResult, for_run: str | None = None
) -> CombinationProfile | None:
    """The stored profiled pass of a result for run `for_run` (`results/{combo key}/{run id}.profile.json`;
    by default the run that measured it), or None. A run that reused another's result has its own
    profile of it: profiles are keyed by the run that asked for them, never another owner's."""
    try:
        return CombinationProfile.read(store.get_bytes(keys.profile(result.combo_key, for_run or result.run_id)))
    except NotFound:
        return None


def priced_for_region(result: SummaryResult, region: str) -> SummaryResult:
    """`result` with its cost in the run's price region. A stored result was costed in the
    region of the run that measured it; the billed durations are the same everywhere."""
    cost = result.cost
    if cost is None or cost.price_region == region:
        return result
    try:
        if cost.billed_ms_per_request is None or cost.cold_start_billed_ms is None:
            raise UnknownPriceRegion(f"its cost in {cost.price_region!r} names no billed durations to price again")
        repriced = cost_block(
            billed_ms_per_request=cost.billed_ms_per_request,
            cold_start_ms=cost.cold_start_billed_ms,
            memory_mb=result.combo.memory_mb,
            batch_size=result.combo.batch_size,
            hardware=result.combo.hardware,
            region=region,
        )
    except UnknownPriceRegion as exc:  # the price table changed since the request was accepted
        log.warning("price_region_unknown", region=region, reason=str(exc))
        return result.model_copy(update={"cost": None, "cost_unavailable": f"no price for region {region!r}: {exc}"})
    return result.model_copy(update={"cost": repriced})


def stored_plan(store: ObjectStore, run_id: str) -> RunPlanned | None:
    """The run's plan as the archiver stored it (read as stored: `STORED`); None before it is."""
    try:
        return RunPlanned.model_validate_json(store.get_bytes(keys.plan(run_id)), context=STORED)
    except NotFound:
        return None
