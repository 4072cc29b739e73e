"""Which artifact serves each run: the run's recommended combination (balanced, else fastest),
or a chosen one (`RUN_ID:intel/onnx/b1/1769MB`), read from the run's summary and results in
the store; its artifact and reference inputs copied to the endpoint's work folder, its model's
signature read from the stored model info (`models/{sha}.json`). A run that cannot be served
is refused at start with the reason."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.ports import NotFound
from schemas import keys
from schemas.combos import Optimizer, reference_key
from schemas.documents import ArtifactManifest, ModelInfo, RunSummary, SummaryResult
from schemas.signature import ModelSignature


class NotServable(ValueError):
    """A run (or the combination chosen of it) cannot be served; the message says why."""


@dataclass(frozen=True)
class ServedModel:
    name: str  # the path segment of /invocations/{name}
    run_id: str
    label: str  # the combination served
    chosen_by: str  # "recommended (balanced)", "chosen", ...
    result: SummaryResult  # the measured result, as the run's summary has it
    signature: ModelSignature | None
    artifact_path: Path
    reference_path: Path

    @property
    def memory_mb(self) -> int:
        return self.result.combo.memory_mb

    @property
    def optimizer(self) -> str:
        return self.result.combo.optimizer.value

    @property
    def fixed_batch(self) -> int | None:
        """TVM compiles for the combination's batch: only that batch runs."""
        return self.result.combo.batch_size if self.result.combo.optimizer == Optimizer.tvm else None

    def public(self) -> dict:
        return {
            "model": self.name,
            "run_id": self.run_id,
            "combination": self.label,
            "chosen_by": self.chosen_by,
            "memory_mb": self.memory_mb,
            "threads": self.result.threads or 1,
            "inputs": [s.model_dump(include={"name", "dtype", "dims"}) for s in self.signature.inputs]
            if self.signature
            else None,
            "measured": {
                "p50_ms": self.result.latency_ms.p50,
                "p99_ms": self.result.latency_ms.p99,
                "cold_start_ms": self.result.cold_start_ms.total if self.result.cold_start_ms else None,
            },
        }


def servable(result: SummaryResult) -> str | None:
    """Why a measured result cannot be served on this machine, or None."""
    if result.predicted:
        return "predicted, not measured"
    if result.emulated:
        return "its hardware runs here only under emulation"
    if not result.artifact_key:
        return "no artifact stored"
    return None


def pick(summary: RunSummary, chosen: str | None) -> tuple[SummaryResult, str]:
    """The result to serve of a run and why it was picked."""
    run_id = summary.run_id
    measured = {r.label: r for r in summary.results if servable(r) is None}
    if not measured:
        failures = "; ".join(f"{f.label}: {f.reason}" for f in summary.failures[:3])
        reasons = "; ".join(f"{r.label}: {servable(r)}" for r in summary.results)
        raise NotServable(
            f"run {run_id} has no measured combination to serve ({reasons or failures or 'it has no results'})"
        )
    if chosen:
        if chosen not in measured:
            raise NotServable(
                f"run {run_id} has no measured combination {chosen} (it has {', '.join(sorted(measured))})"
            )
        return measured[chosen], "chosen"
    recommendation = summary.recommendation
    for kind in ("balanced", "fastest"):
        label = recommendation.pick(kind) if recommendation else None
        if label in measured:
            return measured[label], f"recommended ({kind})"
    fastest = min(measured.values(), key=lambda r: r.latency_ms.p99)
    return fastest, "the lowest measured p99 (the run recommends none)"


def served_model(store, spec: str, work_dir: Path) -> ServedModel:
    """`RUN_ID` or `RUN_ID:LABEL` as a model to serve, its files copied under `work_dir`."""
    run_id, _, chosen = spec.partition(":")
    try:
        summary = RunSummary.read(store.get_bytes(keys.summary(run_id)))
    except NotFound:
        raise NotServable(f"no archived run {run_id}") from None
    result, chosen_by = pick(summary, chosen or None)
    model = result.model or summary.model
    try:
        info = ModelInfo.read(store.get_bytes(keys.model_info(model.sha256)))
        manifest = ArtifactManifest.read(store.get_bytes(keys.manifest(result.artifact_key)))
    except NotFound as exc:
        raise NotServable(f"run {run_id}: {exc} is no longer stored") from None
    folder = work_dir / run_id
    folder.mkdir(parents=True, exist_ok=True)
    artifact = folder / manifest.artifact_file
    store.get_file(keys.artifact_file(result.artifact_key, manifest.artifact_file), artifact)
    reference = folder / "reference.npz"
    store.get_file(keys.reference(reference_key(model, result.combo.batch_size)), reference)
    name = f"{model.workload.value.replace('_', '-')}-{model.sha256[:8]}"
    return ServedModel(
        name=name,
        run_id=run_id,
        label=result.label,
        chosen_by=chosen_by,
        result=result,
        signature=info.signature,
        artifact_path=artifact,
        reference_path=reference,
    )


def served_models(store, specs: list[str], work_dir: Path) -> list[ServedModel]:
    models = [served_model(store, spec, work_dir) for spec in specs]
    names: dict[str, str] = {}
    for m in models:
        if m.name in names:
            raise NotServable(
                f"runs {names[m.name]} and {m.run_id} are of the same model ({m.name}): serve one of them"
            )
        names[m.name] = m.run_id
    return models
