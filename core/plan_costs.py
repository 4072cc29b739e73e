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

With nothing stored (or an engine never measured here), `PRIOR_*`, set on this 2-core host from
the runs of docs/benchmarks.md ("Time to the answer"), where they come within 25 % of the README's
example matrix (quick +4 %, exact +19 %) and of the issue-38 96-combination matrix in exact
(ResNet-18 -14 %, all-MiniLM-L6-v2 +16 %) and quick on MiniLM (-2 %), but not quick on ResNet-18
(+70 %: its race skipped every TVM tuning and refined a quarter, which no prior can know before
the race). Once results are stored, what they say replaces the priors: the plan's model's own
first (`learn_costs`).
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from core.ports import NotFound, ObjectStore
from core.racing import QUICK_TIME_CAP_SHARE
from schemas import keys
from schemas.combos import Combo, Optimizer

# measuring/measure.py: at least TAIL_MIN_SAMPLES samples (more until the intervals converge),
# timing capped at MeasureSpec.time_cap_s plus a quarter of it warming up
SAMPLING_CAP_S = 15.0
EXPECTED_SAMPLES = 200  # samples to converge (100 at least; 60-370 seen), warm-up windows included
LAMBDA_FULL_VCPU_MB = 1769  # below it a Lambda size has a share of one vCPU: latency grows as the share shrinks

# priors, seconds (no stored result of the engine): overhead per combination beyond its sampling,
# conversion per artifact, TVM tuning per trial
PRIOR_OVERHEAD_S = {Optimizer.base: 6.0, Optimizer.onnx: 6.0, Optimizer.onnx_int8: 6.0, Optimizer.tvm: 6.0}
# conversion per artifact: a model's first of an optimizer on a hardware, and its next batch sizes, which start
# from what the first made (the ONNX export, onnx_int8's chosen recipe): ResNet-18 224 and all-MiniLM-L6-v2, 2026-12-06:
# base 0.01 s (its artifact is the model file), onnx 6.4 s then 0.2 s, onnx_int8 12 and 33 s then 8 and 11 s;
# tvm's build around its tuning 64-85 s and 14 s, its tuning 2.6-3.5 s and 1.4 s per trial (64 trials)
PRIOR_CONVERSION_S = {Optimizer.base: 0.5, Optimizer.onnx: 7.0, Optimizer.onnx_int8: 22.0, Optimizer.tvm: 45.0}
PRIOR_NEXT_CONVERSION_S = {Optimizer.base: 0.5, Optimizer.onnx: 0.5, Optimizer.onnx_int8: 9.0, Optimizer.tvm: 45.0}
PRIOR_TRIAL_S = 2.0
PRIOR_P50_MS = 30.0  # a model never measured here, for its sampling (within the cap whatever it is)
MAX_RESULTS_READ = 400  # stored results read to learn from (the store may hold many more)
MIN_OWN_FIGURES = 3  # a plan's model's own overheads per engine before they replace every model's

# A racing run (`core/racing.py`, precision `quick`) measures every combination quickly, then again
# to full precision only those that can still be an answer; TVM is tuned at a batch size only where
# the other engines' figures leave it a chance (`core/tuning_stakes.py`). How much of each a run
# does is the race's to decide; a plan learns it from the racing runs stored, else these priors, from
# the issue-38 matrices measured here (96 combinations, --predict, docs/benchmarks.md), two runs of each model:
# all-MiniLM-L6-v2 refined 17 and 15 of its 39 quick measurements and tuned TVM at 1 batch size of 4 each time,
# ResNet-18 9 of 36 twice and TVM at none.
PRIOR_REFINED_SHARE = 0.33  # (17 + 15 + 9 + 9) / (39 + 39 + 36 + 36)
PRIOR_TVM_TUNED_SHARE = 0.125  # 2 of 16
# The priors count as this many racing runs of the matrix (38 quick measurements, 4 TVM artifacts each)
# beside the stored ones: how much a run decides depends on the model (MiniLM's race tuned TVM at one batch size
# and refined 15 of 39; ResNet-18's tuned none and refined 9 of 36), so one stored run of another model moves the
# shares only part of the way.
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

    overhead_s: dict[Optimizer, float] = field(default_factory=lambda: dict(PRIOR_OVERHEAD_S))
    conversion_s: dict[Optimizer, float] = field(default_factory=lambda: dict(PRIOR_CONVERSION_S))
    next_conversion_s: dict[Optimizer, float] = field(default_factory=lambda: dict(PRIOR_NEXT_CONVERSION_S))
    trial_s: float = PRIOR_TRIAL_S
    learned_from: dict[str, int] = field(default_factory=dict)  # optimizer -> results its overhead rests on
    p50s: dict[tuple, float] = field(default_factory=dict)  # (model sha, optimizer, batch, memory) -> p50 ms
    artifacts: dict[tuple, str] = field(default_factory=dict)  # `artifact_of` -> the artifact key results name
    # a racing run: the share of its quick-measured combinations measured again fully, of its TVM artifacts
    # tuned, and the racing runs both rest on (0: the priors)
    refined_share: float = PRIOR_REFINED_SHARE
    tvm_tuned_share: float = PRIOR_TVM_TUNED_SHARE
    racing_runs: int = 0

    def expected_p50_ms(self, model_sha256: str, combo: Combo) -> float:
        """The combination's latency as far as stored results tell: the same model, engine and
        batch at the nearest memory size (scaled by the vCPU share below a full vCPU), else
        another batch (scaled by batch), else another engine; else `PRIOR_P50_MS` per sample of
        the batch at a full vCPU."""

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
        return PRIOR_P50_MS * combo.batch_size / share(combo.memory_mb)

    def stored_artifact(self, model_sha256: str, combo: Combo, tuning_trials: int) -> str | None:
        """The key of the artifact a stored result of this model was measured with, for this
        combination's hardware, optimizer and batch (any batch for base; tvm's at the same trials
        asked): a run finds it converted (if it is still stored)."""
        return self.artifacts.get(artifact_of(model_sha256, combo.model_dump(mode="json"), tuning_trials))

    def combination_s(self, model_sha256: str, combo: Combo) -> float:
        """A measured combination's wall time, its artifact's conversion apart."""
        return self.overhead_s[combo.optimizer] + sampling_s(self.expected_p50_ms(model_sha256, combo))

    def source(self) -> str:
        if not self.learned_from:
            return "priors (no results stored yet)"
        return "learned from stored results: " + ", ".join(f"{k} {n}" for k, n in sorted(self.learned_from.items()))

    def racing_source(self) -> str:
        if not self.racing_runs:
            return "priors (no racing run stored yet)"
        return f"learned from {self.racing_runs} stored racing run{'s' * (self.racing_runs > 1)}"


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
    results: list[dict], submitted: dict[str, datetime] | None = None, model_sha256: str | None = None
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
    (ResNet-18's onnx_int8 conversion 12 s, MiniLM's 33 s)."""
    costs = EngineCosts()
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
    overheads: dict[Optimizer, list[tuple[str, float]]] = defaultdict(list)  # (model, overhead)
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
            share = QUICK_TIME_CAP_SHARE if result.get("precision") == "quick" else 1.0
            overheads[Optimizer(result["combo"]["optimizer"])].append(
                (result["model"]["sha256"], max(0.0, gap - sampling_s(float(result["latency_ms"]["p50"]), share)))
            )

    def learned(figures: list[tuple[str, float]], minimum: int = MIN_OWN_FIGURES) -> list[float]:
        """The model's own figures where there are `minimum` of them, else every model's."""
        own = [v for model, v in figures if model == model_sha256]
        return own if len(own) >= minimum else [v for _, v in figures]

    for optimizer, figures in overheads.items():
        values = learned(figures)
        costs.overhead_s[optimizer] = statistics.median(values)
        costs.learned_from[optimizer.value] = len(values)
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


def learn_racing(store: ObjectStore, results: list[dict], costs: EngineCosts) -> None:
    """What the newest stored racing runs (those with quick results among `results`, archived)
    did, into `costs` beside the priors (`PRIOR_RACING_RUNS`): the share of their quick measurements
    they refined (`racing.json`)
    and of their TVM artifacts (hardware and batch size, measured or failed, predictions apart)
    they tuned rather than skipped (their summaries' failures at stage `skipped`)."""
    newest: dict[str, str] = {}
    measured: dict[str, int] = defaultdict(int)  # run -> its quick measurements
    for result in results:
        if result.get("precision") == "quick" and result.get("run_id"):
            newest[result["run_id"]] = max(newest.get(result["run_id"], ""), str(result.get("measured_at") or ""))
            measured[result["run_id"]] += 1
    quick = refined = artifacts = tuned = runs = 0
    for run_id in sorted(newest, key=newest.__getitem__, reverse=True)[:MAX_RACING_RUNS_READ]:
        try:
            decided = json.loads(store.get_bytes(keys.racing(run_id)))
            summary = json.loads(store.get_bytes(keys.summary(run_id)))
        except (NotFound, ValueError):
            continue  # not raced yet, or not archived yet
        was_tuned: dict[tuple, bool] = {}
        for row, stage in [(r, None) for r in summary.get("results", [])] + [
            (f, f.get("stage")) for f in summary.get("failures", [])
        ]:
            combo = row.get("combo") or {}
            if combo.get("optimizer") != Optimizer.tvm.value or row.get("predicted") or stage in ("plan", "prediction"):
                continue
            where = (combo.get("hardware"), combo.get("batch_size"))
            was_tuned[where] = was_tuned.get(where, False) or stage != "skipped"
        runs += 1
        quick += measured[run_id]
        refined += len(decided.get("refine") or {})
        artifacts += len(was_tuned)
        tuned += sum(was_tuned.values())
    if runs:
        prior_runs, prior_quick, prior_artifacts = PRIOR_RACING_RUNS
        costs.racing_runs = runs
        costs.refined_share = (PRIOR_REFINED_SHARE * prior_runs * prior_quick + refined) / (
            prior_runs * prior_quick + quick
        )
        costs.tvm_tuned_share = (PRIOR_TVM_TUNED_SHARE * prior_runs * prior_artifacts + tuned) / (
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


def stored_costs(store: ObjectStore | None, model_sha256: str | None = None) -> EngineCosts:
    """The costs learned from what `store` holds (the priors without one), `model_sha256`'s own
    first where it holds enough (`learn_costs`)."""
    if store is None:
        return EngineCosts()
    results = stored_results(store)
    costs = learn_costs(results, submitted_at(store, {r["run_id"] for r in results if r.get("run_id")}), model_sha256)
    learn_racing(store, results, costs)
    return costs
