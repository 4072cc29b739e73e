"""Dedup: expands a request into combinations and skips what is already known.

For each combination: a stored result (`results/{combo key}.json`, found by key) is reused
unless the request forces a new measurement (all of them in a few `CombosReused` events); a stored artifact (`artifacts/{artifact key}/
manifest.json`) skips conversion; everything else goes to the converter. It also tells the
archiver what to wait for (`RunPlanned`). With `predict`, each (hardware, optimizer, batch)
measures up to three anchor sizes and the archiver predicts the others (`core/prediction.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta

from core.ports import ObjectStore
from schemas.combos import Hardware, Optimizer, artifact_key, combo_key, reference_key
from schemas.events import (
    REUSED_PER_EVENT,
    ComboFailed,
    ComboPending,
    CombosReused,
    Envelope,
    FailureStage,
    Payload,
    RequestSubmitted,
    RunPlanned,
)
from core.deadlines import run_deadline_s
from core.planning import impossible_reason, model_signature, request_shapes
from core.prediction import measured_and_predicted
from core.results import reused_result
from schemas import keys
from schemas.documents import ArtifactManifest


LOOKUPS = 16  # concurrent reads of stored results


@dataclass
class DedupDeps:
    store: ObjectStore
    # (hardware, optimizer) -> the CPU an artifact is built for (engines.targets.target_cpu)
    target_cpu: Callable[[Hardware, Optimizer], str]


def impossible_combos(store: ObjectStore, request: RequestSubmitted) -> dict[str, str]:
    """Combination key -> why it cannot run, from the model's stored signature and size."""
    signature = model_signature(store, request.model.sha256)
    shapes = request_shapes(store, request)
    measured, predicted = measured_and_predicted(request)
    reasons = {combo_key(request.model, c): impossible_reason(signature, request, c, shapes) for c in [*measured, *predicted]}
    return {key: reason for key, reason in reasons.items() if reason}


def on_request_submitted(event: Envelope, deps: DedupDeps) -> list[Payload]:
    request: RequestSubmitted = event.payload
    model = request.model
    model_stored = deps.store.exists(keys.model(model.sha256))
    impossible = impossible_combos(deps.store, request) if model_stored else {}
    measured, predicted = measured_and_predicted(request)
    predicted_keys = {combo_key(model, c): c for c in predicted}
    # an impossible combination fails at plan even where it would be predicted, and a stored
    # result is reused rather than predicted: the archiver waits for both
    known = {k for k in predicted_keys if k in impossible or (not request.force and reused_result(deps.store, k) is not None)}
    combos = {combo_key(model, c): c for c in measured} | {k: c for k, c in predicted_keys.items() if k in known}
    planned = RunPlanned(
        model=model, combos=combos, deadline=event.time + timedelta(seconds=run_deadline_s(request)), request=request,
        predicted={k: c for k, c in predicted_keys.items() if k not in known},
    )
    out: list[Payload] = [planned]
    reused_results: dict[str, str] = {}
    # the stored results, looked up concurrently: a resubmitted matrix of 1,536 is 3,072 reads on S3
    with ThreadPoolExecutor(max_workers=LOOKUPS) as pool:
        stored = dict(zip(combos, pool.map(lambda k: None if request.force or k in impossible else reused_result(deps.store, k), combos), strict=True))
    for key, combo in combos.items():
        if not model_stored:
            out.append(ComboFailed(combo=combo, combo_key=key, stage=FailureStage.dedup, reason=f"model {model.sha256[:12]} is not stored"))
            continue
        if key in impossible:  # never reaches a worker
            out.append(ComboFailed(combo=combo, combo_key=key, stage=FailureStage.plan, reason=impossible[key]))
            continue
        reused = stored[key]
        if reused is not None:
            reused_results[key] = reused.result_key
            continue
        target_cpu = deps.target_cpu(combo.hardware, combo.optimizer)
        art_key = artifact_key(model, combo, target_cpu)
        # an artifact serves its combination only with the base outputs for its batch: `base`
        # serves every batch, and the converter is the one that computes a batch's reference
        if deps.store.exists(keys.manifest(art_key)) and deps.store.exists(keys.reference(reference_key(model, combo.batch_size))):
            manifest = ArtifactManifest.read(deps.store.get_bytes(keys.manifest(art_key)))
            out.append(manifest.model_converted(model=model, combo=combo, combo_key=key, artifact_key=art_key, reused=True))
            continue
        out.append(ComboPending(model=model, combo=combo, combo_key=key, artifact_key=art_key, target_cpu=target_cpu, tuning_trials=request.tuning_trials))
    chunks = list(reused_results.items())
    out += [CombosReused(results=dict(chunks[i:i + REUSED_PER_EVENT])) for i in range(0, len(chunks), REUSED_PER_EVENT)]
    return out


HANDLERS = {RequestSubmitted: on_request_submitted}
