"""Whether tuning TVM at a batch size can still change a run's answer.

TVM's artifact of one batch size serves every memory size of it. Before it is tuned (minutes),
the run may already hold ONNX Runtime's figures at that batch and a leader: TVM's best case is
ONNX Runtime's figures times the largest gain TVM has shown on comparable workloads with a
tuning budget at least the run's (`best_ratio`: the lowest TVM / ONNX Runtime p99 among stored
results of the same workload kind at the same batch and memory, of at least one vCPU, whose TVM
was tuned with at least as many trials, and the documented `prior_ratio` for that budget, whichever
is lower). A search of 64 trials does not find the kernels one of 600 does, so its best case is not
600 trials'. If another combination's worst case beats that best case on both p99 and cost at every
memory size of the batch (`core.racing.dominates`), TVM cannot be fastest, cheapest, balanced,
within the SLO where the other is not, or on the Pareto front: tuning it is skipped, with that
evidence as the reason.
Where that largest gain is no gain (a ratio above 1: at the run's budget TVM has never been seen
ahead of ONNX Runtime), TVM's best case at a size is ONNX Runtime's own figures there scaled up,
so ONNX Runtime at that size beats it on both whatever their true values: the two move together,
and the width of ONNX Runtime's interval does not matter (`paired_outpaces`). Measured before this
rule: MobileNetV2's racing run tuned TVM at 2 and 3 of 4 batch sizes at 64 trials, because its
ONNX Runtime p99 at 512 MB (4.3 ms p50, 76.5 ms p99: the quota's tail) had a 95 % interval reaching
down to unthrottled samples that no other combination's worst case beat; TVM then ran 20 times
slower than ONNX Runtime.
Where the run predicts ONNX Runtime at a TVM size rather than measures it, its predicted figures
stand there; where it has neither, nothing is skipped; nor in a run of precision `exact`, which
measures everything as asked.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime, timedelta

from pydantic import ValidationError

from core.deadlines import MEASUREMENT_ESTIMATE_S, conversion_estimate_s
from core.plan_costs import stored_results
from core.ports import NotFound, ObjectStore
from core.racing import Figures, dominates, figures_of
from core.results import QUICK_SUFFIX, is_quick, latest_result, stored_plan
from schemas import keys
from schemas.combos import Combo, Optimizer
from schemas.documents import SummaryResult
from schemas.events import RunPlanned
from schemas.lambda_limits import MB_PER_VCPU

# The lowest TVM / ONNX Runtime latency measured per workload kind and tuning budget (trials asked,
# 2-core hosts): (trials, ratio) pairs. At 600 trials (docs/tvm.md): ResNet-18 0.62, the encoder
# 0.82, the detector 0.70. At 64 trials (docs/tvm.md, "What 64 trials find"; every batch size
# tuned as a run tunes them, seeded from each other, at 512, 1769 and 3538 MB, p50 and p99):
# all-MiniLM-L6-v2 1.22 at the lowest, ResNet-18 10.9 (8 of its tasks tuned at that budget).
# Both kinds take 1.2, the lowest any model showed: one model's figure is not a kind's.
PRIOR_RATIOS: dict[str, tuple[tuple[int, float], ...]] = {
    "image_classification": ((64, 1.2), (600, 0.62)),
    "nlp": ((64, 1.2), (600, 0.82)),
    "object_detection": ((600, 0.70),),
}


def prior_ratio(workload: str, trials: int) -> float:
    """The largest gain over ONNX Runtime documented for `workload` (any kind's for a custom
    model) at the smallest budget measured of at least `trials`: a smaller budget tunes fewer
    kernels, less deeply, and finds no better ones than a larger budget does. Above every budget
    measured, the largest gain measured at all. (Kernels borrowed from another model tuned longer,
    `engines/tvm/tuning.py`, can give more: that model's stored pairs count in `best_ratio`.)"""
    points = PRIOR_RATIOS.get(workload) or tuple(p for kind in PRIOR_RATIOS.values() for p in kind)
    covering = [budget for budget, _ in points if budget >= trials]
    if not covering:
        return min(ratio for _, ratio in points)
    nearest = min(covering)  # the smallest budget measured at or above this one: its gain bounds this one's
    return min(ratio for budget, ratio in points if budget == nearest)


def _tuned_with(result: dict) -> int | None:
    """The trials a stored TVM result's artifact was tuned with (asked, or measured where more: its
    records extended earlier ones); None where the result does not say."""
    conversion = result.get("conversion") or {}
    found = [int(conversion[name]) for name in ("trials_asked", "trials") if conversion.get(name) is not None]
    return max(found) if found else None


def best_ratio(results: list[dict], workload: str, trials: int) -> float:
    """The largest gain over ONNX Runtime TVM has shown on `workload` with at least `trials`
    trials (a p99 ratio, lower is a larger gain): among stored results (`core.plan_costs.stored_results`)
    pairing tvm and onnx at the same model, hardware, batch and memory of at least one vCPU (a TVM
    result that does not say its budget counts, as the largest gain may), and the prior
    (`prior_ratio`). Below one vCPU the CPU quota, not the engine, sets the p99: every engine's
    tail is the quota's period. Measured: the example encoder at 512 MB, p99 86.9 (TVM) against
    81.7 ms (ONNX Runtime) at b1 and 96.9 against 87.2 at b2 where their p50s were 14.4 against 7.3
    and 95.8 against 15.3 ms: pairs of 1.06 and 1.11 where every pair of one vCPU or more was 1.40
    to 2.04. Taken as TVM's largest gain, they set MiniLM's best case at 1.06, and its run tuned
    TVM at b2 (99 s) where 1.2 leaves it dominated at every size. A racing
    run's rough figures (`precision: quick`) pair with nothing: the smallest of many ratios takes
    the noisiest. Measured: MiniLM's quick run paired TVM b1 3538 MB (p99 23.0 ms, full) with ONNX
    Runtime's quick p99 of 40.5 ms (16.1 refined), took 0.57 for TVM's best case where 1.2 stood,
    and tuned TVM at three batch sizes the prior had skipped."""
    seen: dict[tuple, dict[str, float]] = {}
    for result in results:
        try:
            if result["model"].get("workload") != workload or is_quick(result):
                continue
            combo = result["combo"]
            if combo["memory_mb"] < MB_PER_VCPU:
                continue  # throttled: the quota's period, not the engine, sets its tail
            tuned_with = _tuned_with(result) if combo["optimizer"] == "tvm" else None
            if tuned_with is not None and tuned_with < trials:
                continue  # a smaller search: what it found bounds nothing for this one
            where = (result["model"]["sha256"], combo["hardware"], combo["batch_size"], combo["memory_mb"])
            seen.setdefault(where, {})[combo["optimizer"]] = float(result["latency_ms"]["p99"])
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
    ratios = [pair["tvm"] / pair["onnx"] for pair in seen.values() if pair.get("tvm") and pair.get("onnx")]
    return min([prior_ratio(workload, trials), *ratios])


def paired_outpaces(ratio: float) -> bool:
    """Whether ONNX Runtime at a size beats TVM's best case there (its own figures times `ratio`,
    `best_ratio`) on both p99 and cost whatever its true figures are: the ratio is above 1, TVM has
    never been seen ahead at the budget. At a size of at least one vCPU both figures scale with the
    compute; below it the p99 is the CPU quota's period for either engine (the encoder at 512 MB:
    1.06 and 1.11 where TVM was 2 and 6 times slower at the p50), so TVM ties at best there, and its
    mean, the bill, is still the ratio behind: it cannot be fastest, cheapest or balanced where
    ONNX Runtime is not, nor on the Pareto front."""
    return ratio > 1.0


def never_ahead(results: list[dict], workload: str, trials: int) -> str | None:
    """Why a racing run skips TVM's tuning at every batch size where ONNX Runtime has a figure at
    each of TVM's sizes (`skip_reason` through `paired_outpaces`), before anything is measured: at
    this budget TVM has never been seen ahead of ONNX Runtime on `workload`. None where it has."""
    ratio = best_ratio(results, workload, trials)
    if not paired_outpaces(ratio):
        return None
    return (
        f"TVM tuned with {trials} trials has never been seen ahead of ONNX Runtime on {workload} workloads "
        f"(its largest gain: TVM / ONNX Runtime p99 {ratio:.2f})"
    )


def never_tuned(
    tvm: Iterable[Combo], onnx: Iterable[Combo], results: list[dict], workload: str, trials: int
) -> str | None:
    """Why a race will tune TVM at none of the `tvm` combinations' batch sizes, before anything is
    measured: ONNX Runtime has a figure (`onnx`: measured, reused or predicted) at each of their sizes,
    and at `trials` TVM has never been seen ahead of it (`never_ahead`). None where the figures decide."""
    have = {(c.hardware, c.batch_size, c.memory_mb) for c in onnx}
    tvm = list(tvm)
    if not tvm or any((c.hardware, c.batch_size, c.memory_mb) not in have for c in tvm):
        return None
    reason = never_ahead(results, workload, trials)
    return None if reason is None else f"{reason}, and ONNX Runtime has a figure at each of TVM's sizes"


def _plan(store: ObjectStore, run_id: str) -> RunPlanned | None:
    """The run's plan as stored (`core.results.stored_plan`: the combinations it measures, its request);
    None before it is stored, or where it does not read (then nothing is skipped and nothing waits)."""
    try:
        return stored_plan(store, run_id)
    except ValueError:
        return None


# the run's rows of some predicted combinations, from its measured rows (the Lambda model's `predict_run`, which
# this module does not import: its caller hands it over)
Predict = Callable[[RunPlanned, list[Combo], list[SummaryResult]], list[SummaryResult]]


def run_figures(
    store: ObjectStore, run_id: str, predict: Predict | None = None
) -> tuple[dict[str, Combo], list[Figures]]:
    """The run's measured combinations (key -> combo) and the figures of them so far: this run's
    quick pass where it has one, else the latest stored result; with `predict`, also ONNX Runtime's
    sizes the run predicts, from those (with their intervals). None of either for a run of
    precision `exact`: it measures everything, TVM tuned."""
    planned = _plan(store, run_id)
    if planned is None or planned.request.precision == "exact":  # everything measured, as asked
        return {}, []
    combos = planned.combos
    rows = []
    for key in combos:
        try:
            row = json.loads(store.get_bytes(keys.result_version(key, f"{run_id}{QUICK_SUFFIX}")))
        except (NotFound, ValueError):
            stored = latest_result(store, key)
            row = stored.document if stored is not None else None
        if row and (typed := _typed({**row, "combo_key": key})):
            rows.append(typed)
    # ONNX Runtime at the sizes the run predicts: a TVM anchor may be one (its larger peak moves TVM's smallest
    # measured size up: DistilBERT's TVM at 1024 MB where ONNX Runtime is measured at 512)
    if predict is not None and planned.predicted:
        rows += predict(planned, [c for c in planned.predicted.values() if c.optimizer == Optimizer.onnx], rows)
    return combos, [f for row in rows if (f := figures_of(row)) is not None]


def skip_reason(
    store: ObjectStore,
    run_id: str,
    workload: str,
    hardware: str,
    batch_size: int,
    trials: int,
    predict: Predict | None = None,
) -> str | None:
    """Why tuning TVM for this run at `batch_size` with `trials` trials cannot change its answer
    (None: it may). `predict`: ONNX Runtime's rows at the sizes the run predicts (`run_figures`)."""
    combos, figures = run_figures(store, run_id, predict)
    memories = sorted(
        {
            c.memory_mb
            for c in combos.values()
            if c.optimizer.value == "tvm" and c.hardware.value == hardware and c.batch_size == batch_size
        }
    )
    if not memories or not figures:
        return None
    ratio = best_ratio(stored_results(store), workload, trials)
    evidence = []
    for memory in memories:
        label = f"{hardware}/onnx/b{batch_size}/{memory}MB"
        onnx = next((f for f in figures if f.label == label), None)
        if onnx is None:
            return None
        if paired_outpaces(ratio):  # ONNX Runtime's own figures beat it: no interval to weigh
            evidence.append(f"{memory} MB: at best {ratio:.2f} times {label}'s own p99 and cost")
            continue
        best_case = replace(
            onnx,
            label=f"{hardware}/tvm/b{batch_size}/{memory}MB",
            p99_low=onnx.p99_low * ratio,
            cost_low=onnx.cost_low * ratio,
        )
        winner = next((f for f in figures if f.label != best_case.label and dominates(f, best_case)), None)
        if winner is None:
            return None
        evidence.append(
            f"{memory} MB: at best p99 {best_case.p99_low:.3g} ms, ${best_case.cost_low:.3g}/M against "
            f"{winner.label}'s worst {winner.p99_high:.3g} ms, ${winner.cost_high:.3g}/M"
        )
    return (
        f"tuning skipped: even TVM's largest gain seen on {workload} workloads tuned with at least {trials} "
        f"trials (TVM / ONNX Runtime p99 {ratio:.2f}) leaves it dominated at every memory size ({'; '.join(evidence)})"
    )


# A waiting TVM conversion keeps this multiple of the run's TVM work (every TVM artifact's
# conversion with its tuning, and every TVM combination's measurement, at the deadline module's
# estimates) between the moment it stops waiting and the run's deadline.
TVM_RESERVE_FACTOR = 2.0


def tvm_reserve_s(planned: RunPlanned) -> float:
    """The time a racing run keeps before its deadline for its TVM work, waited or not."""
    tvm = [c for c in planned.combos.values() if c.optimizer == Optimizer.tvm]
    artifacts = {(c.hardware, c.batch_size) for c in tvm}
    tuning_trials = planned.request.tuning_trials if planned.request is not None else 0
    work = len(artifacts) * conversion_estimate_s(Optimizer.tvm, tuning_trials) + len(tvm) * MEASUREMENT_ESTIMATE_S
    return TVM_RESERVE_FACTOR * work


def waits_for_others(store: ObjectStore, run_id: str, hardware: str, batch_size: int, now: datetime) -> bool:
    """Whether a racing run's TVM conversion at `batch_size` should wait: the run's other
    engines at that batch (cheaper to measure than TVM is to tune) have not all ended yet, and
    the run's deadline still leaves room for its TVM work after them (`tvm_reserve_s`). Their
    figures then say whether tuning is worth it.

    The limit follows the run's own deadline (an hour, or twice the run's estimated length),
    not a fixed time from submission: on a busy machine a run waits for the measurement lock
    behind other processes, and a fixed 15 minutes passed before the other engines had their
    figures, so TVM was tuned where they would have shown it could not change the answer. The
    other engines always end (measured, failed, or dead-lettered into a failure), so the wait
    ends with them; the reserve is for a run whose other combinations end only at its deadline."""
    planned = _plan(store, run_id)
    if planned is None or planned.request.precision == "exact":
        return False
    if now >= planned.deadline - timedelta(seconds=tvm_reserve_s(planned)):
        return False
    others = [
        key
        for key, c in planned.combos.items()
        if c.optimizer.value != "tvm" and c.hardware.value == hardware and c.batch_size == batch_size
    ]
    return any(not store.exists(keys.outcome(run_id, key)) for key in others)


def _typed(row: dict) -> SummaryResult | None:
    """A stored result as a summary's typed row (None: it does not fit the schema, it cannot race)."""
    try:
        return SummaryResult.of(row)
    except ValidationError:
        return None
