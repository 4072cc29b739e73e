"""What a combination costs in wall time, learned from the results stored: per engine, the time a
measured combination takes end to end, its artifact's conversion, and TVM's seconds per trial.

A result says when it was measured (`measured_at`), how long its measuring process ran
(`measurement_s`), what its artifact's conversion and tuning took (`conversion_s`, `tuning_s`)
and its latency. Within one run combinations are measured one after another, so the time
between a result and the one before it in the same run is what that combination took: its
measuring process, the launcher around it (ONNX Runtime's session tuning, confinement, agreement),
the reference outputs of a new batch size, and its artifact's conversion when this run converted
it (taken out: it is counted once per artifact), and its wait for the measurement lock (taken
out: on a shared machine that is other work's time, and a plan estimates a quiet machine).
That time is split into the measuring of the samples, which grows with the model's latency up
to the time cap (`sampling_s`), and the rest, an engine's overhead (process start, imports,
model load, its session tuning). A plan then charges each combination its engine's overhead
plus the sampling its expected latency needs (`expected_p50_ms`: the same model's stored results
when there are any).

With nothing stored of the plan's workload, its `PRIORS`: what the issue-38 matrix (96 combinations,
--predict, TVM at 64 trials, docs/benchmarks.md "Time to the answer") took on this 2-core Intel host, two runs
of each precision per model, ResNet-18 for image classification and all-MiniLM-L6-v2 for NLP. The two kinds
differ most where no engine-wide figure can follow them: TVM's build and its seconds per trial (a
convolutional network's tasks 4 and 2 times an encoder's), onnx_int8's recipe search (the encoder's 3 times),
and the latency a sample takes. A workload measured here has its own; another (object detection, custom inputs)
the mean of those measured. They are one model's each: another model of the workload can differ by more than the
plan's 25 % (the example encoder, NLP, runs a sample 3 times faster than MiniLM and its int8 recipe search 3 times
faster: its plan came out +26 % quick, +33 % exact; MobileNetV2 had TVM tuned at 2 of 4 batch sizes, where
ResNet-18 tunes none: docs/benchmarks.md, "Time to the answer"). Once results are stored,
what they say replaces the priors: the plan's model's own first, then its workload's (`learn_costs`), so a
model's second run is estimated from its first.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import dataclass, field, fields
from datetime import datetime

from core.ports import NotFound, ObjectStore
from core.racing import QUICK_TIME_CAP_SHARE
from schemas import keys
from schemas.combos import Combo, Optimizer, Workload

# measuring/measure.py: at least TAIL_MIN_SAMPLES samples (more until the intervals converge),
# timing capped at MeasureSpec.time_cap_s plus a quarter of it warming up
SAMPLING_CAP_S = 15.0
EXPECTED_SAMPLES = 130  # samples a measurement times (100 at least, 60-370 seen; most stop at 100 here)
LAMBDA_FULL_VCPU_MB = 1769  # below it a Lambda size has a share of one vCPU: latency grows as the share shrinks


@dataclass(frozen=True)
class Priors:
    """What a plan charges an engine before any result of its workload is stored: its overhead per
    combination beyond sampling (measured to full precision, and in a racing run's quick pass), conversion per
    artifact (a model's first of an engine on a hardware, then its next batch sizes, which start from what the
    first made: the ONNX export, onnx_int8's recipe), TVM's seconds per tuning trial, the latency of one sample at
    a full vCPU, and what a race does: the share of its quick measurements it refines, of its TVM artifacts it
    tunes."""

    overhead_s: dict[Optimizer, float]
    quick_overhead_s: dict[Optimizer, float]  # in a racing run's quick pass: a quarter of the samples' time
    conversion_s: dict[Optimizer, float]
    next_conversion_s: dict[Optimizer, float]
    trial_s: float
    sample_p50_ms: dict[Optimizer, float]
    refined_share: float
    tvm_tuned_share: float
    basis: str


def _engines(base: float, onnx: float, onnx_int8: float, tvm: float) -> dict[Optimizer, float]:
    return {Optimizer.base: base, Optimizer.onnx: onnx, Optimizer.onnx_int8: onnx_int8, Optimizer.tvm: tvm}


# Learned (`learn_costs`, at `EXPECTED_SAMPLES`) from the fresh stores of the runs of 2026-12-07: the medians of
# each model's two exact runs (commits 1bd69ac and a8f50dc), the latency per sample over the sizes of a full vCPU
# and more; the quick pass's overheads and the share of its quick pass its race refined, from each model's racing
# run on commit a38a927 (the quick pass searches ONNX Runtime's session settings with a full measurement's budget,
# and a contender a full measurement would not sharpen keeps its quick figures: `core.racing.kept_quick`); the
# share of TVM artifacts its racing runs tuned, with the two of each on the earlier host (AMD EPYC, 2026-12-06), as
# (tuned + 1) / (artifacts + 2): none of 16 tuned is not proof that the next image model never tunes.
PRIORS: dict[Workload, Priors] = {
    Workload.image_classification: Priors(
        overhead_s=_engines(5.1, 5.6, 3.2, 13.0),  # TVM's: its slow untuned kernels' warm-up
        quick_overhead_s=_engines(3.7, 5.7, 4.3, 13.0),  # TVM's: no racing run here tuned it, the full one
        conversion_s=_engines(0.5, 4.6, 7.7, 51.0),
        next_conversion_s=_engines(0.5, 0.1, 5.4, 61.0),
        trial_s=2.4,
        sample_p50_ms=_engines(20.4, 12.3, 4.2, 269.0),  # ResNet-18 at 224: TVM at 64 trials 11-32x ONNX Runtime
        refined_share=0.15,  # 4 of the 27 its race weighed, 1 kept (6 on 7926c97, before quick figures were kept)
        tvm_tuned_share=0.056,  # (0 + 1) / (16 + 2)
        basis="image classification, measured on ResNet-18",
    ),
    Workload.nlp: Priors(
        overhead_s=_engines(4.2, 6.5, 4.9, 3.0),
        quick_overhead_s=_engines(3.9, 6.5, 5.4, 5.0),
        conversion_s=_engines(0.5, 6.0, 23.5, 12.5),
        next_conversion_s=_engines(0.5, 0.3, 8.6, 12.1),
        trial_s=1.25,
        sample_p50_ms=_engines(13.9, 19.8, 13.3, 34.3),  # all-MiniLM-L6-v2 at 128 tokens
        refined_share=0.15,  # 6 of 39, 23 kept (35 of 38 on 7926c97, before quick figures were kept)
        tvm_tuned_share=0.28,  # (4 + 1) / (16 + 2): b1 in each of its four racing runs
        basis="NLP, measured on all-MiniLM-L6-v2",
    ),
}


def mean_priors(priors: list[Priors], basis: str) -> Priors:
    """Each figure of `priors` averaged (per engine where it is one per engine)."""

    def mean(name: str) -> float | dict[Optimizer, float]:
        values = [getattr(p, name) for p in priors]
        if isinstance(values[0], dict):
            return {o: statistics.fmean(v[o] for v in values) for o in Optimizer}
        return statistics.fmean(values)

    return Priors(**{f.name: mean(f.name) for f in fields(Priors) if f.name != "basis"}, basis=basis)


# a workload with no runs measured here: the mean of those measured
DEFAULT_PRIORS = mean_priors(
    list(PRIORS.values()), "a workload not measured here: the mean of image classification's and NLP's"
)


def priors_for(workload: str | None) -> Priors:
    """The priors of `workload` (`PRIORS`), else `DEFAULT_PRIORS`."""
    try:
        return PRIORS.get(Workload(workload), DEFAULT_PRIORS) if workload else DEFAULT_PRIORS
    except ValueError:
        return DEFAULT_PRIORS


MAX_RESULTS_READ = 400  # stored results read to learn from (the store may hold many more)
MIN_OWN_FIGURES = 3  # a plan's model's own overheads per engine before they replace every model's

# A racing run (`core/racing.py`, precision `quick`) measures every combination quickly, then again
# to full precision only those that can still be an answer; TVM is tuned at a batch size only where
# the other engines' figures leave it a chance (`core/tuning_stakes.py`). How much of each a run
# does is the race's to decide; a plan learns it from its model's own racing runs stored, else from those of its
# workload, beside its workload's priors (`Priors.refined_share`, `tvm_tuned_share`), which count as this many
# racing runs of the matrix (38 quick measurements, 4 TVM artifacts each): how much a race decides depends
# on the model, so one stored run of another model of the workload moves the shares only part of the way.
PRIOR_RACING_RUNS = (2, 38, 4)
MAX_RACING_RUNS_READ = 12  # the newest racing runs learned from


def sampling_s(p50_ms: float, cap_share: float = 1.0) -> float:
    """Seconds spent timing samples of a model of this latency (warm-up included), up to the cap
    (`cap_share` of it: a racing run's quick pass, `core.racing.QUICK_TIME_CAP_SHARE`)."""
    return min(SAMPLING_CAP_S * cap_share, EXPECTED_SAMPLES * p50_ms / 1000)


@dataclass
class EngineCosts:
    """Per engine: overhead per combination (its wall time beyond sampling), conversion per
    artifact; TVM seconds per trial; stored p50s, to expect a combination's latency; how many
    results each figure rests on (0: the prior)."""

    priors: Priors = DEFAULT_PRIORS  # the workload's (`priors_for`): what each figure is until results say
    overhead_s: dict[Optimizer, float] = field(init=False)
    quick_overhead_s: dict[Optimizer, float] = field(init=False)
    conversion_s: dict[Optimizer, float] = field(init=False)
    next_conversion_s: dict[Optimizer, float] = field(init=False)
    trial_s: float = field(init=False)
    learned_from: dict[str, int] = field(default_factory=dict)  # optimizer -> results its overhead rests on
    p50s: dict[tuple, float] = field(default_factory=dict)  # (model sha, optimizer, batch, memory) -> p50 ms
    artifacts: dict[tuple, str] = field(default_factory=dict)  # `artifact_of` -> the artifact key results name
    # a racing run: the share of its quick-measured combinations measured again fully, of its TVM artifacts
    # tuned, and the racing runs both rest on (0: the priors)
    refined_share: float = field(init=False)
    tvm_tuned_share: float = field(init=False)
    # why a race will tune TVM at none of its batch sizes, whatever its figures (`core.planning.tvm_skipped`)
    tvm_skipped: str | None = None
    racing_runs: int = 0
    racing_runs_own: bool = False  # the shares are the plan's model's own racing runs'

    def __post_init__(self) -> None:  # the priors until stored results say otherwise (`learn_costs`, `learn_racing`)
        self.overhead_s = dict(self.priors.overhead_s)
        self.quick_overhead_s = dict(self.priors.quick_overhead_s)
        self.conversion_s = dict(self.priors.conversion_s)
        self.next_conversion_s = dict(self.priors.next_conversion_s)
        self.trial_s = self.priors.trial_s
        self.refined_share = self.priors.refined_share
        self.tvm_tuned_share = self.priors.tvm_tuned_share

    def expected_p50_ms(self, model_sha256: str, combo: Combo) -> float:
        """The combination's latency as far as stored results tell: the same model, engine and
        batch at the nearest memory size (scaled by the vCPU share below a full vCPU), else
        another batch (scaled by batch), else another engine; else the workload's prior latency of
        the engine per sample of the batch at a full vCPU (`Priors.sample_p50_ms`)."""

        def share(memory: int) -> float:
            return min(1.0, memory / LAMBDA_FULL_VCPU_MB)

        mine = [(k, v) for k, v in self.p50s.items() if k[0] == model_sha256]
        for same in (
            lambda k: k[1] == combo.optimizer.value and k[2] == combo.batch_size,
            lambda k: k[1] == combo.optimizer.value,
            lambda k: True,
        ):
            found = [(k, v) for k, v in mine if same(k)]
            if found:
                (_, _, batch, memory), p50 = min(found, key=lambda kv: abs(kv[0][3] - combo.memory_mb))
                return p50 * share(memory) / share(combo.memory_mb) * combo.batch_size / batch
        return self.priors.sample_p50_ms[combo.optimizer] * combo.batch_size / share(combo.memory_mb)

    def stored_artifact(self, model_sha256: str, combo: Combo, tuning_trials: int) -> str | None:
        """The key of the artifact a stored result of this model was measured with, for this
        combination's hardware, optimizer and batch (any batch for base; tvm's at the same trials
        asked): a run finds it converted (if it is still stored)."""
        return self.artifacts.get(artifact_of(model_sha256, combo.model_dump(mode="json"), tuning_trials))

    def combination_s(self, model_sha256: str, combo: Combo, quick: bool = False) -> float:
        """A measured combination's wall time, its artifact's conversion apart (`quick`: in a racing run's
        quick pass, its shorter session tuning and sampling)."""
        if quick:
            return self.quick_overhead_s[combo.optimizer] + sampling_s(
                self.expected_p50_ms(model_sha256, combo), QUICK_TIME_CAP_SHARE
            )
        return self.overhead_s[combo.optimizer] + sampling_s(self.expected_p50_ms(model_sha256, combo))

    def source(self) -> str:
        if not self.learned_from:
            return f"priors for {self.priors.basis} (no results of its workload stored yet)"
        return "learned from stored results: " + ", ".join(f"{k} {n}" for k, n in sorted(self.learned_from.items()))

    def racing_source(self) -> str:
        if not self.racing_runs:
            return f"priors for {self.priors.basis} (no racing run of its workload stored yet)"
        runs = f"{self.racing_runs} stored racing run{'s' * (self.racing_runs > 1)}"
        return f"learned from this model's {runs}" if self.racing_runs_own else f"learned from {runs} of its workload"


def artifact_of(model_sha256: str, combo: dict, tuning_trials: int | None) -> tuple:
    """What an artifact serves: a model on one hardware with one optimizer at one batch (base:
    every batch), tvm at one tuning budget."""
    optimizer = combo["optimizer"]
    return (
        model_sha256,
        combo["hardware"],
        optimizer,
        None if optimizer == Optimizer.base.value else combo["batch_size"],
        tuning_trials if optimizer == Optimizer.tvm.value else None,
    )


def _when(result: dict) -> datetime | None:
    try:
        return datetime.fromisoformat(result["measured_at"])
    except (KeyError, TypeError, ValueError):
        return None


def stored_results(store: ObjectStore, limit: int = MAX_RESULTS_READ) -> list[dict]:
    """Every measurement kept (`results/{combination}/{run}.json`, a racing run's quick pass
    `{run}.quick.json`), up to `limit` of them."""
    found = []
    for key in store.list_keys(keys.results_prefix()):
        name = key.rsplit("/", 1)[-1]
        if key.count("/") != 2 or not name.endswith(".json") or name.count(".") - name.endswith(".quick.json") != 1:
            continue  # the latest copy (`results/{key}.json`), profiles, traces; a quick pass's are read
        try:
            found.append(json.loads(store.get_bytes(key)))
        except (NotFound, ValueError):
            continue
        if len(found) >= limit:
            break
    return found


def learn_costs(
    results: list[dict],
    submitted: dict[str, datetime] | None = None,
    model_sha256: str | None = None,
    workload: str | None = None,
) -> EngineCosts:
    """`EngineCosts` from stored results (dicts of `MeasuredResult`): an engine's overhead is the
    median, over the combinations measured after another in the same run, of (time since the one
    before - its conversion when this run converted its artifact - its sampling); its conversion
    the median of its artifacts' conversion, a model's first artifact of the engine on a hardware
    apart from its next ones (by when each was first measured); TVM's seconds per trial from its tuned artifacts.
    `submitted` (run id -> when it was submitted) times a run's first combination from the
    submission: the run's start (workers starting, the first reference outputs) is its cost.
    `model_sha256`: the model a plan is for; where the results hold enough of its own
    (`MIN_OWN_FIGURES` overheads of an engine; one conversion of it, one TVM tuning), an engine's
    figures are learned from them alone: a model's load, agreement and conversions are its own
    (ResNet-18's onnx_int8 conversion 12 s, MiniLM's 33 s). `workload`: the plan's; what `results` do not
    say stays its priors (`priors_for`). The results are expected of that workload (`of_workload`)."""
    costs = EngineCosts(priors=priors_for(workload))
    by_run: dict[str, list[tuple[datetime, dict]]] = defaultdict(list)
    # (model, hardware, optimizer) -> artifact -> (first measured with it, its conversion)
    conversions: dict[tuple, dict[str, tuple[str, float]]] = defaultdict(dict)
    trial_s: dict[str, tuple[str, float]] = {}  # tvm artifact -> (its model, seconds per trial)
    for result in results:
        try:
            optimizer = Optimizer(result["combo"]["optimizer"])
            p50 = float(result["latency_ms"]["p50"])
            combo = result["combo"]
            costs.p50s[(result["model"]["sha256"], optimizer.value, combo["batch_size"], combo["memory_mb"])] = p50
        except (KeyError, TypeError, ValueError):
            continue
        when = _when(result)
        if when is not None and result.get("run_id"):
            by_run[result["run_id"]].append((when, result))
        artifact = result.get("artifact_key") or ""
        family = conversions[(result["model"]["sha256"], combo.get("hardware"), optimizer)]
        at = str(result.get("measured_at") or "")
        family[artifact] = (
            min(at, family[artifact][0]) if artifact in family else at,
            float(result.get("conversion_s") or 0.0),
        )
        if artifact:
            asked = (result.get("conversion") or {}).get("trials_asked")
            costs.artifacts[artifact_of(result["model"]["sha256"], result["combo"], asked)] = artifact
        trials = (result.get("conversion") or {}).get("trials") or 0
        if optimizer == Optimizer.tvm and trials and result.get("tuning_s"):
            trial_s[artifact] = (result["model"]["sha256"], float(result["tuning_s"]) / int(trials))
    # (optimizer, in a quick pass) -> (model, overhead)
    overheads: dict[tuple[Optimizer, bool], list[tuple[str, float]]] = defaultdict(list)
    for measured in by_run.values():
        measured.sort(key=lambda pair: pair[0])
        run_id = measured[0][1]["run_id"]
        seen: set[str] = set()
        if submitted and run_id in submitted and submitted[run_id] <= measured[0][0]:
            measured.insert(0, (submitted[run_id], {}))
        else:
            seen.add(measured[0][1].get("artifact_key") or "")
        for (before, _), (when, result) in zip(measured, measured[1:], strict=False):
            # waiting for the measurement lock is other work on the machine (another run's, or this
            # run's conversions, counted apart): not this combination's cost
            gap = (when - before).total_seconds() - float(result.get("lock_wait_s") or 0.0)
            artifact = result.get("artifact_key") or ""
            if artifact not in seen:  # the first of its artifact in this run: converted here if the gap holds it
                seen.add(artifact)
                converting = float(result.get("conversion_s") or 0.0) + float(result.get("tuning_s") or 0.0)
                if gap - converting >= float(result.get("measurement_s") or 0.0):
                    gap -= converting
            quick = result.get("precision") == "quick"
            share = QUICK_TIME_CAP_SHARE if quick else 1.0
            overheads[(Optimizer(result["combo"]["optimizer"]), quick)].append(
                (result["model"]["sha256"], max(0.0, gap - sampling_s(float(result["latency_ms"]["p50"]), share)))
            )

    def learned(figures: list[tuple[str, float]], minimum: int = MIN_OWN_FIGURES) -> list[float]:
        """The model's own figures where there are `minimum` of them, else every model's."""
        own = [v for model, v in figures if model == model_sha256]
        return own if len(own) >= minimum else [v for _, v in figures]

    for optimizer in Optimizer:
        # a quick pass tunes its session with a quarter of the budget: where results say one kind only, the other
        # is it at the ratio of the priors
        full, quick = learned(overheads[(optimizer, False)]), learned(overheads[(optimizer, True)])
        if not full and not quick:
            continue
        ratio = costs.priors.quick_overhead_s[optimizer] / costs.priors.overhead_s[optimizer]
        costs.overhead_s[optimizer] = statistics.median(full) if full else statistics.median(quick) / ratio
        costs.quick_overhead_s[optimizer] = statistics.median(quick) if quick else statistics.median(full) * ratio
        costs.learned_from[optimizer.value] = len(full) + len(quick)
    firsts: dict[Optimizer, list[tuple[str, float]]] = defaultdict(list)
    nexts: dict[Optimizer, list[tuple[str, float]]] = defaultdict(list)
    for (model, _, optimizer), per_artifact in conversions.items():
        ordered = [s for _, s in sorted(per_artifact.values()) if s > 0]
        if ordered:
            firsts[optimizer].append((model, ordered[0]))
            nexts[optimizer] += [(model, s) for s in ordered[1:]]
    for optimizer, values in firsts.items():
        costs.conversion_s[optimizer] = statistics.median(learned(values, minimum=1))
    for optimizer, values in nexts.items():
        if values:
            costs.next_conversion_s[optimizer] = statistics.median(learned(values, minimum=1))
    if trial_s:
        costs.trial_s = statistics.median(learned(list(trial_s.values()), minimum=1))
    return costs


def learn_racing(
    store: ObjectStore,
    results: list[dict],
    costs: EngineCosts,
    model_sha256: str | None = None,
    tuning_trials: int | None = None,
) -> None:
    """What the newest stored racing runs (those with quick results among `results`, archived)
    did, into `costs`: the share of their quick pass's measurements (`racing.json`'s `quick`, predicted sizes
    apart) they refined (its `refine`) and of their TVM artifacts (hardware and batch size, measured or failed,
    predictions apart) they tuned rather than skipped (their summaries' failures at stage `skipped`). The racing
    runs of `model_sha256` alone where there are any: how much a race refines and whether TVM is worth tuning are
    the model's (its engines within each other's slack or not), and its own race says it; else every racing run
    of the workload, beside the priors (`PRIOR_RACING_RUNS`). With `tuning_trials`, TVM's share is learned from
    the races that tuned with that budget alone: whether tuning can change the answer is the budget's (at 64
    trials TVM has never been seen ahead of ONNX Runtime, and a race skips it wherever ONNX Runtime has figures,
    `core.tuning_stakes.paired_outpaces`; at 600 the figures decide)."""
    newest: dict[str, str] = {}
    measured: dict[str, int] = defaultdict(int)  # run -> its quick measurements
    model_of: dict[str, str] = {}
    for result in results:
        if result.get("precision") == "quick" and result.get("run_id"):
            newest[result["run_id"]] = max(newest.get(result["run_id"], ""), str(result.get("measured_at") or ""))
            measured[result["run_id"]] += 1
            model_of[result["run_id"]] = (result.get("model") or {}).get("sha256") or ""
    shares: dict[bool, list[int]] = {True: [0, 0, 0, 0, 0], False: [0, 0, 0, 0, 0]}  # own? -> runs, quick, ...
    for run_id in sorted(newest, key=newest.__getitem__, reverse=True)[:MAX_RACING_RUNS_READ]:
        try:
            decided = json.loads(store.get_bytes(keys.racing(run_id)))
            summary = json.loads(store.get_bytes(keys.summary(run_id)))
        except (NotFound, ValueError):
            continue  # not raced yet, or not archived yet
        was_tuned: dict[tuple, bool] = {}
        budget = (summary.get("request") or {}).get("tuning_trials")
        for row, stage in [(r, None) for r in summary.get("results", [])] + [
            (f, f.get("stage")) for f in summary.get("failures", [])
        ]:
            combo = row.get("combo") or {}
            if combo.get("optimizer") != Optimizer.tvm.value or row.get("predicted") or stage in ("plan", "prediction"):
                continue
            if tuning_trials is not None and budget != tuning_trials:
                continue  # another budget's race: what it found worth tuning says nothing of this one's
            where = (combo.get("hardware"), combo.get("batch_size"))
            was_tuned[where] = was_tuned.get(where, False) or stage != "skipped"
        # the quick pass's measurements the race weighed (those converged within it included; predicted sizes not)
        quick = sum(not q.get("predicted") for q in (decided.get("quick") or {}).values()) or measured[run_id]
        figures = (1, quick, len(decided.get("refine") or {}), len(was_tuned), sum(was_tuned.values()))
        for own in {model_of[run_id] == model_sha256, False}:
            shares[own] = [a + b for a, b in zip(shares[own], figures, strict=True)]
    if shares[True][0]:
        runs, quick, refined, artifacts, tuned = shares[True]
        costs.racing_runs, costs.racing_runs_own = runs, True
        costs.refined_share = refined / quick if quick else costs.refined_share
        costs.tvm_tuned_share = tuned / artifacts if artifacts else costs.tvm_tuned_share
        return
    runs, quick, refined, artifacts, tuned = shares[False]
    if runs:
        prior_runs, prior_quick, prior_artifacts = PRIOR_RACING_RUNS
        costs.racing_runs = runs
        costs.refined_share = (costs.priors.refined_share * prior_runs * prior_quick + refined) / (
            prior_runs * prior_quick + quick
        )
        costs.tvm_tuned_share = (costs.priors.tvm_tuned_share * prior_runs * prior_artifacts + tuned) / (
            prior_runs * prior_artifacts + artifacts
        )


def submitted_at(store: ObjectStore, run_ids: set[str]) -> dict[str, datetime]:
    """When each run was submitted, from its record (runs without one are left out)."""
    found = {}
    for run_id in run_ids:
        try:
            found[run_id] = datetime.fromisoformat(json.loads(store.get_bytes(keys.run_record(run_id)))["submitted_at"])
        except (NotFound, ValueError, KeyError, TypeError):
            continue
    return found


def of_workload(results: list[dict], workload: str | None) -> list[dict]:
    """The results of `workload`'s models (all of them when it is not said): what a convolutional network's
    conversions, tuning and race took says little of an encoder's, and its workload's priors say more."""
    if workload is None:
        return results
    return [r for r in results if (r.get("model") or {}).get("workload") in (None, workload)]


def stored_costs(
    store: ObjectStore | None,
    model_sha256: str | None = None,
    workload: str | None = None,
    stored: list[dict] | None = None,
    tuning_trials: int | None = None,
) -> EngineCosts:
    """The costs learned from what `store` holds of `workload` (its priors without any), `model_sha256`'s
    own first where it holds enough (`learn_costs`); TVM's tuned share from races with `tuning_trials`
    (`learn_racing`). `stored`: `stored_results(store)`, if read already."""
    if store is None:
        return EngineCosts(priors=priors_for(workload))
    results = of_workload(stored_results(store) if stored is None else stored, workload)
    costs = learn_costs(
        results, submitted_at(store, {r["run_id"] for r in results if r.get("run_id")}), model_sha256, workload
    )
    learn_racing(store, results, costs, model_sha256, tuning_trials)
    return costs
