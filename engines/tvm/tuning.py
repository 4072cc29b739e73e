"""MetaSchedule's tuning records and what a conversion searches: the tasks, the budget.

`job.tuning_dir` holds MetaSchedule's JSON database (`database_workload.json`,
`database_tuning_record.json`) and `ayci_tuning.json` (tuning target, trials measured, trials
asked, tasks). Records that answer the trials asked for the same target are applied without a
search; otherwise the difference is searched and added (`engines.tvm.search`). Kernels that share
their anchor block share one task; kernels other models' records hold, searched at least as
deeply as this budget would, take those schedules (`job.shared_tuning_dirs`).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from engines import ConversionError, ConversionJob
from engines.tvm.records import (
    MIN_TRIALS_PER_TASK,
    MODULE_EQUALITY,
    TUNING_META,
    Records,
    Tuning,
    open_records,
    read_meta,
    same_kernel,
)
from engines.tvm.search import search
from engines.tvm.seeding import Seeds
from schemas.reasons import whole

# Seed a batch size's search with the schedules tuned at another (`seeding`). Off: measured on the
# encoder at batch 4 and 64 trials (docs/tvm.md), the seeded searches shipped builds 1.1-1.4x
# slower than a search from nothing, twice; kept for a measurement on a quiet machine.
SEED_ACROSS_BATCHES = False


def extract_tasks(variants: dict, target) -> tuple[list, dict]:
    """The kernels to tune across every layout candidate, each once (the kernels the layouts
    share, such as a strided convolution or the classifier, are one task), weighted by the most
    calls any candidate makes; kernels already scheduled, or with nothing to schedule, are not tasks.
    Also `{variant: [(kernel, calls)]}`: what each build runs, to estimate it from the records."""
    from tvm.s_tir import meta_schedule as ms

    tasks: list = []
    uses: dict[str, list] = {variant: [] for variant in variants}
    for variant, mod in variants.items():
        for task in ms.relax_integration.extract_tasks(mod, target, module_equality=MODULE_EQUALITY):
            if (
                task.mod.attrs
                and task.mod.attrs.get("tirx.is_scheduled", False)
                or not _has_loops_to_schedule(task, target)
            ):
                continue
            uses[variant].append((task.mod, int(task.weight)))
            same = next((t for t in tasks if same_kernel(t.mod, task.mod)), None)
            if same is None:
                tasks.append(task)
            elif int(task.weight) > int(same.weight):
                tasks[tasks.index(same)] = task
    return tasks, uses


def _has_loops_to_schedule(task, target) -> bool:
    """Whether the task's kernel stores anything through TIR loops: MetaSchedule's cost model
    reads features of those stores. `topk`'s kernel is one call into the runtime's sort: no
    features, and XGBoost's prediction over a batch of such candidates fails ("Cannot cast array
    data from dtype('float64') to dtype('int64')"), which failed the detector's tuning once its
    budget reached `topk`."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    context = ms.TuneContext(mod=task.mod, target=target)
    candidate = ms.MeasureCandidate(tvm.s_tir.Schedule(task.mod), ms.arg_info.ArgInfo.from_prim_func(task.mod["main"]))
    return ms.feature_extractor.PerStoreFeature().extract_from(context, [candidate])[0].shape[0] > 0


def tune(variants: dict, job: ConversionJob, tune_spec: dict) -> Tuning:
    import tvm

    started = time.perf_counter()
    register_cpu_tensor_intrinsics_only()
    scratch = tempfile.mkdtemp(prefix="ayci-tvm-tune-")
    records_dir = Path(job.tuning_dir) if job.tuning_dir else Path(scratch) / "records"
    records_dir.mkdir(parents=True, exist_ok=True)
    target = tvm.target.Target(tune_spec)

    meta = read_meta(records_dir)
    same_target = meta.get("target") == tune_spec
    if not same_target:  # records of another target: searched again from nothing
        for stale in records_dir.glob("database_*.json"):
            stale.unlink()
    have = int(meta.get("trials", 0)) if same_target else 0
    # a search the time limit cut still answered the trials it was asked for: not searched again for them
    asked = max(have, int(meta.get("trials_asked", 0))) if same_target else 0
    record_file = records_dir / "database_tuning_record.json"
    database = open_records(records_dir)
    if database is None:  # stored records TVM cannot read back: searched again from nothing
        job.progress("tvm: the stored tuning records do not load; searching again")
        for unreadable in [*records_dir.glob("database_*.json"), records_dir / TUNING_META]:
            unreadable.unlink(missing_ok=True)
        have, asked, database = 0, 0, open_records(records_dir)
    extracted, uses = extract_tasks(variants, target)
    budget, tasks_before, borrowed = job.tuning_trials - have, 0, []
    if asked >= job.tuning_trials and record_file.exists() and record_file.stat().st_size > 0:
        tasks_before = int(meta.get("tasks", len(extracted)))
        # A kernel the records lack was not there when they were tuned (another TVM, another
        # lowering) only if that search could cover every kernel: a smaller budget leaves the
        # cheapest kernels out on purpose (`search`).
        covered_all = have // MIN_TRIALS_PER_TASK >= len(extracted)
        missing = [task for task in extracted if not database.has_workload(task.mod)] if covered_all else []
        if not missing:
            job.progress(f"tvm: applying stored tuning records ({have} trials, {tasks_before} tasks)")
            return Tuning(
                database,
                trials=have,
                tasks=tasks_before,
                seconds=time.perf_counter() - started,
                reused=True,
                scratch=scratch,
            )
        # The kernels the records lack are searched, as deeply as the others were.
        job.progress(f"tvm: the stored tuning records lack {len(missing)} of {len(extracted)} kernels; searching those")
        extracted, budget = (
            missing,
            max(MIN_TRIALS_PER_TASK * len(missing), have * len(missing) // max(1, tasks_before)),
        )
    else:
        borrowed = _borrow_schedules(database, extracted, job, tune_spec)
        extracted = [task for task in extracted if task not in borrowed]
        if borrowed:
            job.progress(
                f"tvm: {len(borrowed)} of {len(borrowed) + len(extracted)} kernels "
                "take schedules tuned for other models"
            )
        if not extracted:
            return Tuning(
                database,
                trials=have,
                tasks=0,
                borrowed=len(borrowed),
                seconds=time.perf_counter() - started,
                scratch=scratch,
            )

    seeds = Seeds(job.shared_tuning_dirs, tune_spec) if SEED_ACROSS_BATCHES and job.shared_tuning_dirs else None
    try:
        records = Records(database, records_dir, have=have, asked=asked, tasks=tasks_before)
        return search(job, records, extracted, uses, budget, scratch, tune_spec, started, len(borrowed), seeds)
    except Exception as exc:
        shutil.rmtree(scratch, ignore_errors=True)
        raise ConversionError(f"TVM tuning failed: {whole(exc)}") from exc


def _borrow_schedules(database, tasks: list, job: ConversionJob, tune_spec: dict) -> list:
    """The tasks another model's records already hold a schedule for, searched at least as deeply
    as this conversion would (its trials per task >= this budget's): their best records are
    copied into `database`, and the search skips them (kernels share a workload when their
    computation, shapes and fused operators are the same: ResNet-18 and ResNet-34 share most).
    Records of another tuning target are not read."""
    from tvm.s_tir import meta_schedule as ms

    depth = job.tuning_trials / max(1, len(tasks))
    borrowed: list = []
    for folder in job.shared_tuning_dirs:
        meta = read_meta(Path(folder))
        if meta.get("target") != tune_spec:
            continue
        if int(meta.get("trials", 0)) / max(1, int(meta.get("tasks", 1))) < depth:
            continue
        other = open_records(Path(folder))
        if other is None:  # another model's records that do not load: not shared
            continue
        for task in tasks:
            if task in borrowed or not other.has_workload(task.mod):
                continue
            best = other.get_top_k(other.commit_workload(task.mod), 8)
            if not best:
                continue
            workload = database.commit_workload(task.mod)
            for record in best:
                database.commit_tuning_record(
                    ms.database.TuningRecord(record.trace, workload, record.run_secs, record.target, record.args_info)
                )
            borrowed.append(task)
    return borrowed


def register_cpu_tensor_intrinsics_only() -> None:
    """Import the x86 and arm tensor intrinsics without the GPU ones.

    MetaSchedule's TuneContext imports the package `tvm.s_tir.tensor_intrin`, whose `__init__`
    parses ~500 TVMScript kernels, most of them CUDA/ROCm/Hexagon: 20 s on an idle 2-core machine,
    70-180 s under load, before the first trial. CPU schedule rules need only the x86 and arm
    intrinsics (1 s). The package is registered empty, so its other submodules stay importable."""
    import importlib
    import types

    name = "tvm.s_tir.tensor_intrin"
    if name in sys.modules:
        return
    import tvm.s_tir

    package = types.ModuleType(name)
    package.__path__ = [str(Path(tvm.s_tir.__file__).parent / "tensor_intrin")]
    package.__package__ = name
    sys.modules[name] = package
    tvm.s_tir.tensor_intrin = package
    for submodule in ("x86", "arm_cpu"):
        setattr(package, submodule, importlib.import_module(f"{name}.{submodule}"))
