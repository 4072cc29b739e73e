"""A MetaSchedule search over a conversion's tasks: its first round, its time limit, its progress.

The heaviest tasks (FLOPs x uses) are searched first, as many as get MIN_TRIALS_PER_TASK trials
each; a round is budget / tasks / 2 trials (4-32), so the first pass covers every chosen task
with half the budget and the gradient scheduler gives the rest to the tasks that still cost the
most. With several builds, the first round is one round per task and the rest of the budget is
raced (`engines.tvm.race`). A time limit (`TimeLimit`) stops the search starting batches that
would end past it; the rounds are then sized for the trials the limit fits at TRIAL_PACE_S.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from engines import ConversionJob
from engines.tvm import logs
from engines.tvm.race import best_estimate_ms, race
from engines.tvm.records import MIN_TRIALS_PER_TASK, MODULE_EQUALITY, Records, Tuning
from engines.tvm.seeding import seed_candidates
from engines.tvm.target import host_num_cores

# Seconds a trial takes (evolving, building, measuring), to size a search's rounds for the trials
# its time limit fits: measured on 2 shared cores, 1.3-1.5 for ResNet-18, 0.7 for the encoder.
TRIAL_PACE_S = 1.5
# A kernel whose search starts from another batch size's schedules gets this share of its trials
# after the first round. Measured (bench/bench_tuning_seeds.py, docs/tvm.md): at 0.5 the encoder's
# batch 4 ran 1.56x slower than searched from nothing at the same 64 trials asked, so seeds
# start the search and save no trials until a share below 1 is measured to hold its latency.
SEEDED_TRIAL_SHARE = 1.0


class TimeLimit:
    """The end of a search: `seconds` after `started` (perf_counter; None: no end). A batch of
    trials is started only if it would end before then at the pace so far (seconds per trial
    started since the first batch: evolving, building and measuring a batch all scale with its
    size), so the search ends at the limit rather than a batch past it."""

    def __init__(self, seconds: float | None, started: float) -> None:
        self.at = None if seconds is None else started + seconds
        self.first_batch: float | None = None
        self.started_trials = 0
        self.reached = False

    def allows(self, trials: int) -> bool:
        if self.at is None:
            return True
        now = time.perf_counter()
        pace = (
            (now - self.first_batch) / self.started_trials
            if self.first_batch is not None and self.started_trials
            else 0.0
        )
        if now + pace * trials > self.at:
            self.reached = True
        return not self.reached

    def starting_batch(self) -> None:
        """A batch is being evolved: the pace is counted from the first one's start."""
        if self.first_batch is None:
            self.first_batch = time.perf_counter()

    def started_batch(self, trials: int) -> None:
        self.starting_batch()
        self.started_trials += trials


def time_limited(strategy, limit: TimeLimit, seeds=None, seeded: list[int] | None = None):
    """`strategy` (a MetaSchedule search strategy) that yields no more candidates once `limit`
    does not allow its next batch: the task scheduler then ends each task as it comes round,
    joining the batches still being measured, so their records are kept.

    It also ends a task whose batch comes back empty (every schedule its search finds is
    measured already: an elementwise or gather kernel has one or two). The task scheduler would
    otherwise ask again until the task's trials were spent, and never get any: on the detector
    it asked 109 times, for about a minute of the 15.

    With `seeds` (`seeding.Seeds`: schedules tuned at another batch size), up to half of a
    task's first batch is its kernel's transferred schedules, when it has any (`seeded[0]`
    counts the tasks seeded, `seeded[1]` the candidates): measured and recorded, the best of them
    are what the evolutionary search evolves from in the next rounds."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy

    @derived_object
    class TimeLimited(PySearchStrategy):
        def __init__(self, inner) -> None:
            super().__init__()
            self.inner, self.batch, self.context, self.seeded = inner, 1, None, False

        def _initialize_with_tune_context(self, context) -> None:
            self.context = context
            self.inner._initialize_with_tune_context(context)

        def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None) -> None:
            self.batch = num_trials_per_iter
            self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)

        def post_tuning(self) -> None:
            self.inner.post_tuning()

        def generate_measure_candidates(self):
            if not limit.allows(self.batch):
                return None
            limit.starting_batch()
            candidates = self.inner.generate_measure_candidates()
            if not candidates:  # None: the task's trials are spent; empty: its search space is
                return None
            if not self.seeded and seeds and self.context is not None:
                # up to half the first batch: a batch whose every candidate fails would end the task
                self.seeded = True
                transferred = seed_candidates(seeds, self.context)[: max(1, len(candidates) // 2)]
                if transferred:
                    if seeded is not None:
                        seeded[0] += 1
                        seeded[1] += len(transferred)
                    candidates = [*transferred, *list(candidates)[: len(candidates) - len(transferred)]]
            limit.started_batch(len(candidates))
            return candidates

        def notify_runner_results(self, measure_candidates, results) -> None:
            self.inner.notify_runner_results(measure_candidates, results)

        def clone(self):
            return TimeLimited(self.inner.clone())

    return TimeLimited(strategy)


def search(
    job, records: Records, extracted, uses, budget, scratch, tune_spec, started, borrowed: int, seeds=None
) -> Tuning:
    """Run MetaSchedule on `extracted` with `budget` trials, ending early at
    `job.tuning_time_limit_s` after `started` (`TimeLimit`); records go to `records`, whose
    meta then counts the trials measured and the trials asked for.

    With one build, one search. With several (`nhwc` and `nhwc-winograd`), a first round of one
    round per task over the tasks of every build, then the race for the rest (`race.race`;
    docs/tvm.md has why)."""
    from tvm.s_tir import meta_schedule as ms

    # The heaviest kernels first, as many as the budget tunes at MIN_TRIALS_PER_TASK each: the
    # gradient scheduler's first pass gives every task one round in order, so a task after the
    # budget ran out would stay naive loops, and a big convolution left so costs far more than
    # an elementwise kernel left so.
    extracted.sort(key=_task_cost, reverse=True)
    every_task = len(extracted)
    # The rounds are sized for the trials the time limit fits at TRIAL_PACE_S (when the budget
    # asks more): a first round sized for a budget the limit cuts would end before it reached
    # the last kernels, and they would stay naive loops. The search goes on past it while the
    # limit allows.
    planned = (
        budget if job.tuning_time_limit_s is None else max(1, min(budget, int(job.tuning_time_limit_s / TRIAL_PACE_S)))
    )
    extracted = extracted[: max(1, min(len(extracted), planned // MIN_TRIALS_PER_TASK))]
    # Half the budget goes to a first round over every task, the other half to the rounds the
    # gradient scheduler gives the tasks that still cost the most (a convolution gains from 100+
    # trials, an elementwise kernel is done in a dozen).
    per_round = max(4, min(32, planned // len(extracted) // 2))
    # Kernels whose search starts from another batch size's schedules need fewer of the rounds
    # after the first (`seeded_budget`): the same tasks and rounds, fewer trials in all.
    asked = budget
    if seeds:
        budget = seeded_budget(budget, extracted, seeds, job.progress)
    measured = [0]
    limit = TimeLimit(job.tuning_time_limit_s, started)
    # The stock evolutionary search evolves 512 schedules for 4 generations before every round;
    # with a few trials per round that search, not measuring, took 80-90% of the time here.
    seeded = [0, 0]  # tasks whose first batch was transferred from another batch size's schedules, candidates
    strategy = time_limited(
        ms.search_strategy.EvolutionarySearch(population_size=128, init_min_unmeasured=32, genetic_num_iters=2),
        limit,
        seeds,
        seeded,
    )
    with logs.meta_schedule_logs():  # its task tables go to the log file, not the terminal
        contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
            extracted, work_dir=scratch, strategy=strategy, num_threads=host_num_cores(), seed=0
        )
    cores = host_num_cores()
    # One cost model for every stage: each starts with what the ones before measured.
    cost_model = ms.cost_model.CostModel.create("xgb", num_tuning_cores=cores, tree_method="auto")
    context = _progress_context(job)
    progress = _progress_callback(
        job, budget, records.have, measured, lambda: best_estimate_ms(records.database, uses), context
    )

    def run(chosen: list[int], trials: int, trials_per_round: int, trials_per_task: int | None = None) -> None:
        ms.tune.tune_tasks(
            tasks=[contexts[i] for i in chosen],
            task_weights=[weights[i] for i in chosen],
            work_dir=scratch,
            max_trials_global=trials,
            max_trials_per_task=trials_per_task or max(trials_per_round, trials // len(chosen) * 4),
            num_trials_per_iter=trials_per_round,
            builder=ms.builder.LocalBuilder(f_build=_make_f_build(), max_workers=cores, timeout_sec=120),
            runner=ms.runner.LocalRunner(
                timeout_sec=60, evaluator_config=ms.runner.EvaluatorConfig(number=3, repeat=1, min_repeat_ms=50)
            ),
            database=records.database,
            cost_model=cost_model,
            measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), progress],
            module_equality=MODULE_EQUALITY,
        )

    everything = list(range(len(contexts)))
    within = "" if job.tuning_time_limit_s is None else f" or {job.tuning_time_limit_s:.0f} s, whichever comes first"
    first_round = per_round * len(contexts)
    estimates: dict[str, float] = {}
    # Builds are raced only when the first round reaches every kernel (none left out of the
    # budget): a build is estimated from all of its kernels or not at all.
    if len(uses) < 2 or len(extracted) < every_task or planned - first_round < per_round:
        job.progress(f"tvm: tuning {len(contexts)} tasks, {budget} trials{within} ({per_round} per round)")
        run(everything, budget, per_round)
    else:
        job.progress(
            f"tvm: tuning {len(contexts)} tasks of the builds {', '.join(uses)}, {budget} trials{within}: "
            f"a first round of {first_round} trials ({per_round} each)"
        )
        # One round each and no more (a task whose search space is small yields fewer candidates,
        # and the scheduler would give what they leave to the next rounds of the others).
        run(everything, first_round, per_round, trials_per_task=per_round)
        estimates = race(
            run,
            measured,
            limit,
            records.database,
            uses,
            [task.mod for task in extracted],
            budget,
            planned,
            job.progress,
        )
    if limit.reached:
        job.progress(
            f"tvm: the tuning time limit ({job.tuning_time_limit_s:.0f} s) ended the search after "
            f"{records.have + measured[0]} of {records.have + budget} trials"
        )
    logs.progress(
        records.have + measured[0],
        records.have + budget,
        best_estimate_ms(records.database, uses),
        finished=True,
        **context,
    )
    records.write_meta(tune_spec, measured[0], asked, len(contexts))  # a seeded search answers the trials asked
    return Tuning(
        records.database,
        trials=records.have + measured[0],
        tasks=len(contexts),
        borrowed=borrowed,
        seconds=time.perf_counter() - started,
        scratch=scratch,
        estimates=estimates,
        time_limited=limit.reached,
        seeded=seeded[0],
    )


def seeded_budget(budget: int, tasks: list, seeds, progress) -> int:
    """The trials a search of `tasks` needs when some start from schedules tuned at another batch
    size (`seeding.Seeds`): the first round (half of `budget`) as asked, and of the other half,
    each seeded kernel SEEDED_TRIAL_SHARE of its share. The user's budget stays the cap."""
    seeded = sum(1 for task in tasks if seeds.for_kernel(task.mod)) if SEEDED_TRIAL_SHARE < 1 else 0
    if not seeded:
        return budget
    rest = budget - budget // 2
    reduced = budget // 2 + round(rest * (len(tasks) - seeded * (1 - SEEDED_TRIAL_SHARE)) / len(tasks))
    progress(
        f"tvm: {seeded} of {len(tasks)} kernels start from schedules tuned at another batch size: "
        f"{reduced} of the {budget} trials asked"
    )
    return min(budget, reduced)


def _task_cost(task) -> float:
    """FLOPs of one extracted task times how often the model calls it."""
    from tvm.s_tir.analysis import estimate_tir_flops

    try:
        return float(estimate_tir_flops(task.dispatched[0])) * int(task.weight)
    except Exception:
        return 0.0


def _progress_context(job: ConversionJob) -> dict:
    """What a progress event says of the conversion it belongs to."""
    hardware = str(getattr(job.hardware, "value", job.hardware))
    return {
        "label": f"{hardware}/tvm/b{job.batch_size}",  # the combinations this artifact serves, bar their memory
        "model_sha256": getattr(job.model, "sha256", None),
        "hardware": hardware,
        "batch_size": job.batch_size,
    }


def _progress_callback(
    job: ConversionJob,
    budget: int,
    already: int,
    measured: list[int],
    estimate: Callable[[], float | None],
    context: dict,
):
    """Counts the trials measured in `measured[0]`; after every batch, a `tvm.tuning.progress`
    event (`logs.progress`; the estimate of the model's time is refreshed at most every 5 s), and
    at most every 5 s a progress message."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    @derived_object
    class ReportProgress(PyMeasureCallback):
        def __init__(self) -> None:
            super().__init__()
            self.last = 0.0
            self.best_ms: float | None = None

        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
            measured[0] += len(measure_candidates)
            now = time.monotonic()
            if now - self.last > 5 or measured[0] >= budget:
                self.last = now
                self.best_ms = estimate()
                best = "" if self.best_ms is None else f", best {self.best_ms:.4g} ms"
                job.progress(f"tvm: tuned {already + measured[0]}/{already + budget} trials{best}")
            logs.progress(already + measured[0], already + budget, self.best_ms, **context)

    return ReportProgress()


def _make_f_build():
    # Defined in a closure so cloudpickle ships it by value to TVM's builder processes (they
    # cannot import this project). Builds one candidate kernel; measuring needs no weight
    # packing, so the layout-rewrite blocks are dropped as the stock builder does.
    def f_build(mod, target, _params):
        import tvm
        from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

        mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
        return tvm.tirx.build(mod, target=target)

    return f_build
