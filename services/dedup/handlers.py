"""Dedup: expands a request into combinations and skips what is already known.

For each combination: a stored result (from the model's result packs, else
`results/{combo key}.json` by key, `core/results.py`) is reused unless the request forces a
new measurement (all of them in a few `CombosReused` events, the documents read for each kept
in one bundle, `runs/{run id}/reused/{part}.json`, so the archiver reads them at once); a
stored artifact (`artifacts/{artifact key}/manifest.json`) skips conversion; everything else
goes to the converter. It also tells the archiver what to wait for (`RunPlanned`). With
`predict`, each (hardware, optimizer, batch) measures up to three anchor sizes and the archiver
predicts the others (`core/lambda_model/prediction.py`). The combinations go out in
`core/racing.telling_order`: each engine's most telling combination first (its smallest batch at
the size nearest one vCPU), then by batch, so the first answer compares the engines early.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from core.deadlines import run_deadline_s
from core.planning import impossible_reason, model_signature, request_shapes
from core.ports import ObjectStore
from core.racing import telling_order
from core.results import StoredResult, latest_quick_results, latest_results
from core.run_plan import measured_and_predicted
from schemas import keys
from schemas.combos import Combo, Hardware, Optimizer, artifact_key, combo_key, reference_key
from schemas.documents import ArtifactManifest, ResultBundle
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


@dataclass
class DedupDeps:
    store: ObjectStore
    # (hardware, optimizer) -> the CPU an artifact is built for (engines.targets.target_cpu)
    target_cpu: Callable[[Hardware, Optimizer], str]


def impossible_combos(store: ObjectStore, request: RequestSubmitted, combos: dict[str, Combo]) -> dict[str, str]:
    """Combination key -> why it cannot run, from the model's stored signature and size."""
    signature = model_signature(store, request.model.sha256)
    shapes = request_shapes(store, request)
    reasons = {key: impossible_reason(signature, request, c, shapes) for key, c in combos.items()}
    return {key: reason for key, reason in reasons.items() if reason}


def on_request_submitted(event: Envelope, deps: DedupDeps) -> list[Payload]:
    request: RequestSubmitted = event.payload
    model = request.model
    model_stored = deps.store.exists(keys.model(model.sha256))
    measured, predicted = measured_and_predicted(request)
    measured_keys = {combo_key(model, c, request.tuning): c for c in measured}
    predicted_keys = {combo_key(model, c, request.tuning): c for c in predicted}
    impossible = impossible_combos(deps.store, request, measured_keys | predicted_keys) if model_stored else {}
    # the stored results (from the model's result packs, then by key); a stored result is
    # reused rather than predicted
    lookups = [
        k for k in {**measured_keys, **predicted_keys} if model_stored and not request.force and k not in impossible
    ]
    stored = latest_results(deps.store, model.sha256, lookups) if lookups else {}
    if request.precision == "quick":  # a quick run takes a stored quick measurement as its quick pass
        stored |= latest_quick_results(deps.store, [k for k in lookups if k not in stored])
    # an impossible combination fails at plan even where it would be predicted: the archiver waits for both
    known = {k for k in predicted_keys if k in impossible or k in stored}
    combos = measured_keys | {k: c for k, c in predicted_keys.items() if k in known}
    planned = RunPlanned(
        model=model,
        combos=combos,
        deadline=event.time + timedelta(seconds=run_deadline_s(request)),
        request=request,
        predicted={k: c for k, c in predicted_keys.items() if k not in known},
    )
    out: list[Payload] = [planned]
    # the most telling combinations first (every engine's lead, then by batch): the run's first answer
    # compares its engines as early as the order of the work allows (core/racing.py)
    for key in telling_order(combos):
        combo = combos[key]
        if not model_stored:
            out.append(
                ComboFailed(
                    combo=combo,
                    combo_key=key,
                    stage=FailureStage.dedup,
                    reason=f"model {model.sha256[:12]} is not stored",
                )
            )
            continue
        if key in impossible:  # never reaches a worker
            out.append(ComboFailed(combo=combo, combo_key=key, stage=FailureStage.plan, reason=impossible[key]))
            continue
        if key in stored:
            continue
        target_cpu = deps.target_cpu(combo.hardware, combo.optimizer)
        art_key = artifact_key(model, combo, target_cpu, request.tuning)
        # an artifact serves its combination only with the base outputs for its batch: `base`
        # serves every batch, and the converter is the one that computes a batch's reference
        if deps.store.exists(keys.manifest(art_key)) and deps.store.exists(
            keys.reference(reference_key(model, combo.batch_size))
        ):
            manifest = ArtifactManifest.read(deps.store.get_bytes(keys.manifest(art_key)))
            out.append(
                manifest.model_converted(model=model, combo=combo, combo_key=key, artifact_key=art_key, reused=True)
            )
            continue
        out.append(
            ComboPending(
                model=model,
                combo=combo,
                combo_key=key,
                artifact_key=art_key,
                target_cpu=target_cpu,
                tuning_trials=request.tuning_trials,
                min_agreement=request.min_agreement,
            )
        )
    return out + _reuse(event.run_id, [(key, stored[key]) for key in combos if key in stored], deps.store)


def _reuse(run_id: str, reused: list[tuple[str, StoredResult]], store: ObjectStore) -> list[CombosReused]:
    """The stored results a run reuses, `REUSED_PER_EVENT` per `CombosReused`; the documents
    read for each event (as stored, validated) kept in one object it names, so the archiver
    reads them once."""
    out = []
    for part, start in enumerate(range(0, len(reused), REUSED_PER_EVENT)):
        chunk = reused[start : start + REUSED_PER_EVENT]
        bundle = keys.reused_bundle(run_id, part)
        store.put_bytes(
            bundle, ResultBundle(results={stored.version: stored.document for _, stored in chunk}).to_bytes()
        )
        out.append(CombosReused(results={key: stored.version for key, stored in chunk}, bundle=bundle))
    return out


HANDLERS = {RequestSubmitted: on_request_submitted}
