"""Converter: turns the stored model into the artifact of one combination's optimizer and
hardware (`artifacts/{artifact key}/`), and makes sure the base model's reference outputs for
its batch size exist (`references/{reference key}.npz`) so inference can judge agreement.

An artifact is converted once: a stored manifest means it is reused.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import shutil
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import structlog

from core import measurement_lock
from core.lambda_model.prediction import predict_run
from core.lease import Lease
from core.ports import NotFound, ObjectStore
from core.results import stored_plan
from core.runtime import Delayed
from core.tuning_stakes import skip_reason, waits_for_others
from engines import Conversion, ConversionError, ConversionJob
from engines.model_files import NotAModelError
from schemas import keys
from schemas.combos import Combo, ModelFormat, ModelRef, Optimizer, Tuning, artifact_key, reference_key
from schemas.cost import default_region as default_price_region
from schemas.documents import ArtifactManifest, SummaryResult
from schemas.events import (
    TUNING_TIME_LIMIT_S,
    ComboFailed,
    ComboPending,
    Envelope,
    FailureStage,
    ModelConverted,
    Payload,
    RunPlanned,
)
from schemas.reasons import whole
from services.converter.reference import ReferenceFailed, compute_reference
from services.converter.sandboxed import convert_in_sandbox, export_onnx_in_sandbox

log = structlog.get_logger()
SHARED_TUNING_RECORDS = 8  # other models' records read per TVM conversion (each ~1 MB per 600 trials)


@dataclass
class ConverterDeps:
    store: ObjectStore
    work_dir: Path | None = None
    reference_timeout_s: float = 300.0  # the base model on the example inputs, in its own process
    reference_memory_mb: int = 10240  # the largest Lambda: a model that cannot run there cannot run anywhere
    lease_s: float = 900.0  # a conversion's lease on its artifact, renewed at each progress step
    lease_retry_s: float = 30.0  # a combination whose artifact another worker converts comes back after this
    now: Callable[[], datetime] = lambda: datetime.now(UTC)
    conversion_timeout_s: float = 600.0  # a conversion's wall-clock limit in the sandbox (TVM: plus its tuning's)
    conversion_memory_mb: int = 10240  # its memory cap (a cgroup where there is one; twice it as address space)
    # computes the base model's outputs (in the sandbox: `reference.py`)
    compute_reference: Callable[..., None] = compute_reference
    # runs a conversion; None: the engine in the sandbox (`sandboxed.py`) within the limits above
    convert: Callable[[Optimizer, ConversionJob], object] | None = None

    def converter(self) -> Callable[[Optimizer, ConversionJob], object]:
        return self.convert or functools.partial(
            convert_in_sandbox, timeout_s=self.conversion_timeout_s, memory_mb=self.conversion_memory_mb
        )


def on_combo_pending(event: Envelope, deps: ConverterDeps) -> list[Payload]:
    pending: ComboPending = event.payload
    combo, model = pending.combo, pending.model
    bound = log.bind(run_id=event.run_id, combo_key=pending.combo_key, combo=combo.label)
    if deps.store.exists(keys.summary(event.run_id)):  # the run is over (cancelled, or closed at its deadline)
        log.info("skipped_run_ended", run_id=event.run_id, combo_key=pending.combo_key)
        return []
    if (
        combo.optimizer == Optimizer.tvm
        and pending.tuning_trials > 0
        and not deps.store.exists(keys.manifest(pending.artifact_key))
        and waits_for_others(deps.store, event.run_id, combo.hardware.value, combo.batch_size, deps.now())
    ):  # tuned last: the run's other engines at this batch say first whether tuning can matter
        bound.info("tvm_tuning_waits_for_other_engines", retry_s=deps.lease_retry_s)
        return [Delayed(pending, deps.now() + timedelta(seconds=deps.lease_retry_s))]
    referenced = deps.store.exists(keys.reference(reference_key(model, combo.batch_size)))
    if referenced and deps.store.exists(keys.manifest(pending.artifact_key)):
        # converted already (another memory size of it): neither the model's bytes nor the machine's lock needed
        manifest = ArtifactManifest.read(deps.store.get_bytes(keys.manifest(pending.artifact_key)))
        bound.info("artifact_reused", artifact_key=pending.artifact_key)
        return [_converted(pending, manifest, reused=True)]
    with tempfile.TemporaryDirectory(dir=deps.work_dir, prefix="convert-") as tmp:
        work = Path(tmp)
        model_path = work / f"model.{model.format.value}"
        deps.store.get_file(keys.model(model.sha256), model_path)
        inputs_path = fetch_inputs(deps.store, model, work)
        if not referenced:  # checked above: a stored reference is neither looked up again nor computed
            try:
                # computing it runs the base model: not beside a measurement either
                with measurement_lock.shared():
                    ensure_reference(
                        deps.store,
                        model,
                        model_path,
                        combo.batch_size,
                        work,
                        timeout_s=deps.reference_timeout_s,
                        memory_mb=deps.reference_memory_mb,
                        compute=deps.compute_reference,
                        inputs_path=inputs_path,
                        also=_run_batch_sizes(deps.store, event.run_id),
                    )
            except ReferenceFailed as exc:
                return [
                    _failed(
                        pending,
                        f"the base model does not run on the {'example' if inputs_path else 'workload' + chr(39) + 's'}"
                        f" inputs: {exc}",
                    )
                ]
            if deps.store.exists(keys.manifest(pending.artifact_key)):  # converted meanwhile by another worker
                manifest = ArtifactManifest.read(deps.store.get_bytes(keys.manifest(pending.artifact_key)))
                bound.info("artifact_reused", artifact_key=pending.artifact_key)
                return [_converted(pending, manifest, reused=True)]
        if combo.optimizer == Optimizer.tvm and pending.tuning_trials > 0:
            skipped = skip_reason(
                deps.store,
                event.run_id,
                model.workload.value,
                combo.hardware.value,
                combo.batch_size,
                pending.tuning_trials,
                predict=onnx_where_predicted,
            )
            if skipped is not None:  # the run's figures so far: tuning TVM here cannot change the answer
                bound.info("tvm_tuning_skipped", reason=skipped)
                return [_failed(pending, skipped, FailureStage.skipped)]
        lease = conversion_lease(deps, pending.artifact_key, event.event_id)
        if not lease.take():
            # another worker converts this artifact (e.g. for another memory size): come back when it is done
            bound.info("conversion_waits_for_lease", artifact_key=pending.artifact_key, retry_s=deps.lease_retry_s)
            return [Delayed(pending, deps.now() + timedelta(seconds=deps.lease_retry_s))]
        out_dir = work / "artifact"
        out_dir.mkdir()
        tuning_dir, shared_tuning = (
            _fetch_tuning_records(deps.store, pending, work) if combo.optimizer == Optimizer.tvm else (None, [])
        )
        try:
            exported = _shared_onnx_export(deps, model, model_path, combo.optimizer, work)
        except ConversionError as exc:
            bound.warning("conversion_failed", reason=str(exc))
            lease.release()
            return [_failed(pending, whole(str(exc)))]
        export_s = 0.0
        if exported is not None:  # the engine converts from the model's one ONNX export
            (model_path, export_s), model = exported, model.model_copy(update={"format": ModelFormat.onnx})
        job = ConversionJob(
            model=model,
            model_path=model_path,
            hardware=combo.hardware,
            batch_size=combo.batch_size,
            target_cpu=pending.target_cpu,
            out_dir=out_dir,
            tuning_trials=pending.tuning_trials,
            tuning_time_limit_s=TUNING_TIME_LIMIT_S,
            tuning_dir=tuning_dir,
            shared_tuning_dirs=shared_tuning,
            inputs_path=inputs_path,
            min_agreement=pending.min_agreement,
            **(
                _int8_recipe_chosen(deps.store, pending, _run_batch_sizes(deps.store, event.run_id))
                if combo.optimizer == Optimizer.onnx_int8
                else {}
            ),
            progress=lambda message: _progress(
                lease, bound, message, f"{combo.hardware.value}/tvm/b{combo.batch_size}"
            ),
        )
        bound.info("conversion_started", optimizer=combo.optimizer.value, hardware=combo.hardware.value)
        try:
            if _base_checked_by_reference(deps, combo.optimizer):
                conversion = base_artifact(job)
            else:
                with measurement_lock.shared():  # never beside a measurement: it would disturb it
                    conversion = deps.converter()(combo.optimizer, job)
        except (ConversionError, NotAModelError) as exc:
            bound.warning("conversion_failed", reason=str(exc))
            lease.release()  # those waiting try (and fail) for themselves
            return [_failed(pending, whole(str(exc)))]
        if export_s:  # the export it started from was made for it: its cost is this conversion's
            conversion = dataclasses.replace(conversion, conversion_s=conversion.conversion_s + export_s)
        if tuning_dir is not None:
            _store_tuning_records(deps.store, pending, tuning_dir)
        deps.store.put_file(
            keys.artifact_file(pending.artifact_key, conversion.artifact_file), out_dir / conversion.artifact_file
        )
        manifest = ArtifactManifest(
            artifact_file=conversion.artifact_file,
            optimizer=combo.optimizer.value,
            hardware=combo.hardware.value,
            target_cpu=job.target_cpu,
            conversion_s=conversion.conversion_s,
            tuning_s=conversion.tuning_s,
            details=conversion.details,
        )
        deps.store.put_bytes(keys.manifest(pending.artifact_key), manifest.to_bytes(), if_absent=True)
        bound.info(
            "conversion_done",
            artifact_key=pending.artifact_key,
            conversion_s=round(conversion.conversion_s, 2),
            tuning_s=round(conversion.tuning_s, 2),
        )
        return [_converted(pending, manifest, reused=False)]


def onnx_where_predicted(planned: RunPlanned, combos: list[Combo], rows: list[SummaryResult]) -> list[SummaryResult]:
    """ONNX Runtime's rows at the sizes the run predicts (`predict_run`, priced as stored results are): where a
    TVM anchor is one of them, TVM's best case there (`core.tuning_stakes.skip_reason`)."""
    predicted, _ = predict_run(planned.request, combos, rows, [], default_price_region())
    return predicted


def _run_batch_sizes(store: ObjectStore, run_id: str) -> list[int]:
    """The batch sizes the run's plan measures (none before the archiver stored it, or from a plan that does
    not read: they are only computed ahead, each is computed when its own combination comes)."""
    try:
        plan = stored_plan(store, run_id)
    except ValueError:
        return []
    return sorted({c.batch_size for c in plan.combos.values()}) if plan else []


def _int8_recipe_chosen(store: ObjectStore, pending: ComboPending, batch_sizes: list[int]) -> dict:
    """For an onnx_int8 conversion: the recipe chosen for the same model at another batch size of the
    run, smallest first, read from that artifact's manifest (`int8_recipe`, `int8_recipe_batch` of the
    job; none yet: every recipe is tried). The artifact's key names the run's minimum agreement, so a
    manifest found was chosen against it."""
    combo = pending.combo
    for batch in batch_sizes:
        if batch == combo.batch_size:
            continue
        other = artifact_key(  # an onnx_int8 key names the minimum agreement (its recipe is chosen against it)
            pending.model,
            combo.model_copy(update={"batch_size": batch}),
            pending.target_cpu,
            Tuning(trials=0, min_agreement=pending.min_agreement),
        )
        try:
            manifest = ArtifactManifest.read(store.get_bytes(keys.manifest(other)))
        except (NotFound, ValueError):
            continue
        recipe = manifest.details.get("recipe")
        if recipe and manifest.details.get("meets_minimum"):
            return {"int8_recipe": recipe, "int8_recipe_batch": batch}
    return {}


EXPORTED_FOR = (Optimizer.onnx, Optimizer.onnx_int8)  # the engines that start from the model's ONNX export


def _shared_onnx_export(
    deps: ConverterDeps, model: ModelRef, model_path: Path, optimizer: Optimizer, work: Path
) -> tuple[Path, float] | None:
    """The model's ONNX export for an `onnx` or `onnx_int8` conversion of a `.pt2` model, and the seconds
    spent making it now (0.0: stored already). Both engines export the same way (`onnx_engine.exported_onnx`)
    with dynamic axes, so one export (`keys.onnx_export`, by torch's version) serves them and every batch size
    instead of one per artifact (10 to 25 s each on ResNet-18). None where the model is ONNX already, for
    other engines, or where the caller converts with its own function (tests)."""
    if optimizer not in EXPORTED_FOR or model.format != ModelFormat.pt2 or deps.convert is not None:
        return None
    key = keys.onnx_export(model.sha256, _exporter())
    local = work / "exported.onnx"
    if deps.store.exists(key):
        deps.store.get_file(key, local)
        return local, 0.0
    started = time.perf_counter()
    with measurement_lock.shared():  # never beside a measurement
        export_onnx_in_sandbox(
            model_path, local, timeout_s=deps.conversion_timeout_s, memory_mb=deps.conversion_memory_mb
        )
    deps.store.put_file(key, local)
    return local, time.perf_counter() - started


@functools.cache
def _exporter() -> str:
    """What makes an export: torch's version (the sandbox runs this same Python's torch)."""
    from importlib import metadata

    return f"torch{metadata.version('torch')}"


def _base_checked_by_reference(deps: ConverterDeps, optimizer: Optimizer) -> bool:
    """Whether `base`'s conversion is already done: its one check (the program loads: `base_engine.convert`)
    is what the reference's sandboxed child ran on these same bytes, `ensure_reference` having stored
    its outputs just before (`reference.reference_outputs` calls `base.convert`, then runs the model). Only
    on the real path: with a conversion or a reference of the caller's own (tests), nothing is assumed."""
    return optimizer == Optimizer.base and deps.convert is None and deps.compute_reference is compute_reference


def base_artifact(job: ConversionJob) -> Conversion:
    """`base`'s artifact without a second sandboxed child (a torch import and a program load, 5 to 13 s on
    ResNet-18): the model file's bytes, named as `engines/base_engine.convert` names them; nothing of the
    model is read in this process."""
    started = time.perf_counter()
    name = "model.pt2" if job.model.format == ModelFormat.pt2 else "model.onnx"
    shutil.copyfile(job.model_path, job.out_dir / name)
    return Conversion(
        artifact_file=name,
        conversion_s=time.perf_counter() - started,
        details={"checked_by": "the reference's sandboxed run of the same file (base_engine.convert, then the model)"},
    )


def fetch_inputs(store: ObjectStore, model: ModelRef, work: Path) -> Path | None:
    """The user's own example inputs of the model, if it has them, as a local file."""
    if model.inputs_sha256 is None:
        return None
    path = work / "inputs.npz"
    if not path.exists():
        store.get_file(keys.inputs(model.inputs_sha256), path)
    return path


def ensure_reference(
    store: ObjectStore,
    model: ModelRef,
    model_path: Path,
    batch: int,
    work: Path,
    *,
    timeout_s: float = 300.0,
    memory_mb: int = 10240,
    compute: Callable[..., None] = compute_reference,
    inputs_path: Path | None = None,
    also: list[int] | tuple[int, ...] = (),
) -> str:
    """Store the base model's outputs on the workload's fixed example inputs for `batch`
    (once), and return its key. They are computed in a child process with a time limit and a
    memory cap (`reference.py`); raises `ReferenceFailed` if the base model does not run on
    those inputs within them. `also`: the run's other batch sizes, computed by the same child where
    they are not stored yet (one torch import and model load instead of one per batch size)."""
    key = keys.reference(reference_key(model, batch))
    if store.exists(key):
        return key
    out = work / f"reference-b{batch}.npz"
    # the run's other batch sizes from the same child (the real computation only: a caller's own takes one)
    more = {
        b: work / f"reference-b{b}.npz"
        for b in sorted(set(also) - {batch})
        if compute is compute_reference and not store.exists(keys.reference(reference_key(model, b)))
    }

    def run(more_batches: dict[int, Path]) -> None:
        compute(
            model_path,
            model.model_dump_json(),
            model.workload.value,
            model.input_size,
            batch,
            out,
            timeout_s=timeout_s,
            memory_mb=memory_mb,
            inputs_path=inputs_path,
            **({"more_batches": more_batches} if more_batches else {}),
        )

    try:
        run(more)
    except ReferenceFailed:
        if not more:
            raise
        more = {}  # another batch size's failure is not this one's: this one alone, its own verdict
        run(more)
    store.put_file(key, out)  # the same bytes whoever writes them
    for other, path in more.items():
        store.put_file(keys.reference(reference_key(model, other)), path)
    return key


def conversion_lease(deps: ConverterDeps, artifact_key: str, holder: str) -> Lease:
    """One conversion per artifact: `holder` (the event being handled) takes the artifact's lease
    before converting, renews it at each progress step and releases it if the conversion fails.
    A lease whose holder died expires; of the workers that then take it over one wins (`core/lease.py`)."""
    return Lease(deps.store, keys.conversion_lease(artifact_key), holder, deps.lease_s, now=deps.now)


# what the TVM engine reports from its sandbox while it tunes (engines/tvm/search.py)
TUNED = re.compile(r"tvm: tuned (\d+)/(\d+) trials(?:, best ([0-9.]+) ms)?")
TUNING_PROGRESS = "tvm.tuning.progress"  # the event a CLI's tuning bar follows (ayci/cli/follow.py)


def _progress(lease: Lease, bound, message: str, label: str) -> None:
    """Log the conversion's progress and keep its lease alive while it works (tuning is long).
    Tuning's progress, reported from the sandbox as a line, is logged as `tvm.tuning.progress`
    in this process too: the conversion's own events stay in its sandbox."""
    tuned = TUNED.fullmatch(message)
    if tuned:
        done, total, best = tuned.groups()
        bound.info(
            TUNING_PROGRESS,
            trials_done=int(done),
            trials_total=int(total),
            best_ms=float(best) if best else None,
            label=label,
        )
    else:
        bound.info("conversion_progress", message=message)
    lease.renew()


def _fetch_tuning_records(store: ObjectStore, pending: ComboPending, work: Path) -> tuple[Path, list[Path]]:
    """The stored TVM tuning records of this model, target, batch and input size (one archive,
    written whole once the search ended: never half-written), unpacked into a folder; and those
    of up to `SHARED_TUNING_RECORDS` others for the same target CPU, whose kernels this model may
    share or start its search from: this model's other batch sizes first, nearest first, then
    other models (or sizes)."""
    tuning_dir = work / "tuning"
    tuning_dir.mkdir()
    key = keys.tuning_records(
        pending.model.sha256, pending.target_cpu, pending.combo.batch_size, pending.model.input_size
    )
    listed = store.list_keys(keys.tuning_records_for(pending.target_cpu))  # this model's among them, if stored
    if key in listed:
        _unpack(store, key, tuning_dir)
    # this model's records at other batch sizes first (nearest batch first: their kernels are this
    # one's at another batch, `engines/tvm/seeding.py`), then other models' (the latest listed)
    mine = keys.tuning_records(pending.model.sha256, pending.target_cpu, 0, pending.model.input_size)
    prefix, suffix = mine[: mine.index("-b0-") + 2], mine[mine.index("-b0-") + 3 :]  # ".../{sha}-b", "-{HxW}.tar.gz"
    batch_of = {
        k: k[len(prefix) : -len(suffix)] for k in listed if k != key and k.startswith(prefix) and k.endswith(suffix)
    }
    siblings = sorted(
        (k for k, b in batch_of.items() if b.isdigit()), key=lambda k: abs(int(batch_of[k]) - pending.combo.batch_size)
    )
    room = max(0, SHARED_TUNING_RECORDS - len(siblings))
    rest = [k for k in listed if k != key and k not in batch_of]
    others = siblings[:SHARED_TUNING_RECORDS] + (rest[-room:] if room else [])
    shared = []
    for index, other in enumerate(others):
        shared.append(work / "shared-tuning" / str(index))
        shared[-1].mkdir(parents=True)
        _unpack(store, other, shared[-1])
    return tuning_dir, shared


def _unpack(store: ObjectStore, key: str, folder: Path) -> None:
    archive = folder.parent / f"{folder.name}.tar.gz"
    store.get_file(key, archive)
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")  # no absolute paths, no links out, no devices
    archive.unlink()


def _store_tuning_records(store: ObjectStore, pending: ComboPending, tuning_dir: Path) -> None:
    archive = tuning_dir.parent / "tuning-out.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(p for p in tuning_dir.iterdir() if p.is_file() and not p.is_symlink()):
            tar.add(path, arcname=path.name)
    store.put_file(
        keys.tuning_records(
            pending.model.sha256, pending.target_cpu, pending.combo.batch_size, pending.model.input_size
        ),
        archive,
    )


def _converted(pending: ComboPending, manifest: ArtifactManifest, *, reused: bool) -> ModelConverted:
    return manifest.model_converted(
        model=pending.model,
        combo=pending.combo,
        combo_key=pending.combo_key,
        artifact_key=pending.artifact_key,
        reused=reused,
    )


def _failed(pending: ComboPending, reason: str, stage: FailureStage = FailureStage.converter) -> ComboFailed:
    return ComboFailed(combo=pending.combo, combo_key=pending.combo_key, stage=stage, reason=reason)


HANDLERS = {ComboPending: on_combo_pending}
