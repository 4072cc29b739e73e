"""Dedup: expands a request into combinations and skips what is already known.

For each combination: a stored result (`results/{combo key}.json`, found by key) is reused
unless the request forces a new measurement; a stored artifact (`artifacts/{artifact key}/
manifest.json`) skips conversion; everything else goes to the converter. It also tells the
archiver what to wait for (`RunPlanned`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from core.ports import ObjectStore
from schemas.combos import Hardware, Optimizer, artifact_key, combo_key, reference_key
from schemas.events import (
    ComboFailed,
    ComboPending,
    Envelope,
    FailureStage,
    Payload,
    RequestSubmitted,
    RunPlanned,
)
from core.results import reused_result
from schemas import keys
from schemas.documents import ArtifactManifest


@dataclass
class DedupDeps:
    store: ObjectStore
    # (hardware, optimizer) -> the CPU an artifact is built for (engines.targets.target_cpu)
    target_cpu: Callable[[Hardware, Optimizer], str]


# rough costs on one machine (measurements run one at a time): the deadline must never cut a
# large run that is merely long
MEASUREMENT_ESTIMATE_S = 60.0  # cold start, warm-up, samples up to the time cap, per combination
CONVERSION_ESTIMATE_S = {Optimizer.base: 10.0, Optimizer.onnx: 30.0, Optimizer.tvm: 120.0}
TUNING_TRIAL_ESTIMATE_S = 2.0


def run_deadline_s(request: RequestSubmitted) -> float:
    """When the archiver closes the run: the request's deadline, or twice the run's estimated
    length if that is longer (every combination measured, every artifact converted, TVM tuned)."""
    combos = request.matrix.combos()
    artifacts = {(c.hardware, c.optimizer, None if c.optimizer == Optimizer.base else c.batch_size) for c in combos}
    converting = sum(CONVERSION_ESTIMATE_S[o] + (request.tuning_trials * TUNING_TRIAL_ESTIMATE_S if o == Optimizer.tvm else 0) for _, o, _ in artifacts)
    return max(request.deadline_s, 2 * (converting + MEASUREMENT_ESTIMATE_S * len(combos)))


def on_request_submitted(event: Envelope, deps: DedupDeps) -> list[Payload]:
    request: RequestSubmitted = event.payload
    model = request.model
    combos = {combo_key(model, c): c for c in request.matrix.combos()}
    planned = RunPlanned(
        model=model, combos=combos, deadline=event.time + timedelta(seconds=run_deadline_s(request)), request=request
    )
    out: list[Payload] = [planned]
    model_stored = deps.store.exists(keys.model(model.sha256))
    for key, combo in combos.items():
        if not model_stored:
            out.append(ComboFailed(combo=combo, combo_key=key, stage=FailureStage.dedup, reason=f"model {model.sha256[:12]} is not stored"))
            continue
        reused = None if request.force else reused_result(deps.store, key)
        if reused is not None:
            out.append(reused)
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
    return out


HANDLERS = {RequestSubmitted: on_request_submitted}
