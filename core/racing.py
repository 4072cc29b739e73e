"""Racing: measure every combination briefly, then to full precision only those that can
still be an answer.

A run of precision `quick` (`RequestSubmitted.precision`, the default) measures each
combination with a quarter of the timing budget (`QUICK_TIME_CAP_SHARE`): rough figures with
95 % intervals. `race` then splits them:
- contenders: could still be fastest, cheapest, balanced, within the SLO or on the Pareto
  front: they are measured again to full precision (the refined result replaces the quick one);
- dominated: another combination's worst case (its interval's upper bound) beats its best case
  (lower bound) on both p99 and cost: it cannot be any of the answers. It stops at its rough
  figures, shown as "dominated by X" with both intervals (`Domination.evidence`);
- out: cannot be an answer for a reason timing precision does not change (it disagrees with
  base, is emulated, host-limited...), or its p99's lower bound is above the SLO.

A quick measurement whose samples converged before the quick pass's cap, with session settings tuned
at its own size and undisturbed, is already a full one (`converged_in_quick_pass`): a measurement
to full precision stops at the same rule. It is kept as such (not refined, reusable by later runs).
A contender that a full measurement would not sharpen keeps its quick figures (`kept_quick`: neither
interval narrower by a quarter, `REFINEMENT_NARROWS`): what is left of its intervals is the run-to-run
slack, which another measurement carries too. Measured on the issue's quick runs (docs/benchmarks.md):
22 of MiniLM's 35 refinements narrowed neither interval by a fifth; over 61 refinements of three
models `refinement_narrows`, from the quick measurement alone, came within 0.1 of what the
refinement did in 53; of the other 8 it decided 7 as the refinement's narrowing would have, and
refined one that then narrowed by less than a quarter (TVM b1 512 MB).

With `predict` a family (hardware, optimizer, batch) stops only when none of its sizes, measured
or predicted, is a contender: its predicted sizes rest on all of its anchors.

Intervals: the p99's is the distribution-free interval of its order statistics
(`measuring/measure.py`), the cost's the mean's (1.96 cv / sqrt(n), the billed duration is a
mean); both widened by `run_to_run_slack` (15 %, 30 % for a measurement that took every core of its
host), as a combination measured again in another process moves more than one process's samples say
(measured: docs/benchmarks.md, "Run to run"). Predicted rows carry their own interval.

The running answer (`runs/{id}/answer.json`, a view for the CLI, the API and the page; the summary
is the run's word) goes through these stages:
- `gathering` (not shown): from the plan on, each quick outcome adds its figures;
- `provisional`, **the first answer**: as soon as every engine (hardware, optimizer) of the run has
  the quick outcome of its lead combination (`leads`: its smallest batch at the measured size
  nearest one vCPU, 1,769 MB, where every engine runs one unthrottled thread: what compares
  engines best and measures fastest). An outcome is a figure, a failure or a reason it cannot be
  an answer. An engine whose artifact is tuned (TVM with trials in a racing run) is not waited
  for: its tuning waits for the other engines' figures by design (`core/tuning_stakes.py`), so it
  is listed as still to come and joins when its outcome arrives. The first answer compares the
  engines on their quick figures: picks with intervals and margins among the combinations not
  dominated so far, what is dominated so far (by whom) and how many of the run's measured
  combinations have ended ("12 of 48 ended; picks may change"); every later quick outcome
  refines it. Predicted sizes are not in it (they rest on every anchor of their family);
- `quick`: every combination has its quick outcome: the race is decided (`race`) and the answer
  is rebuilt from every figure, predictions included; `refining` as refinements arrive; `final`:
  the summary's picks (the email carries that one).
Dedup emits the combinations in `telling_order` (every engine's lead first, then by batch and the
size that tells most) and the embedded bus runs a combination's measurement before the next
conversion (`adapters/inprocess_bus.py`), so the leads are measured first.

Pure functions of figures (`Figures`): the archiver builds them from results, the running answer
(`runs/{id}/answer.json`) keeps them, `picks` and `margins` read them.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from schemas.combos import Combo
from schemas.documents import SummaryResult
from schemas.lambda_limits import MB_PER_VCPU

QUICK_TIME_CAP_SHARE = 0.25  # the quick pass times each combination for this share of the full time cap
# Every interval widened by this relative amount on each side (`run_to_run_slack`): a combination measured again
# in another process moves more than one process's samples say, and more where its measurement takes every core of
# the host, with nothing left for the rest of the host's work (2 vCPUs on a 2-core host). Measured on the issue's
# 96-combination matrix (MiniLM, docs/benchmarks.md, "Run to run"): measured again in the same run, the cost moved
# by a median 3 % (up to 13 %) with a core to spare, 7 % (up to 22 %) taking every core; in the exact run after it,
# 5 % (up to 19 %) and 18 % (up to 28 %). Widened by 5 % as before, 27 % of the figures measured again in the same
# run fell outside their first measurement's interval; by these two, 4 %.
RUN_TO_RUN_SLACK = 0.15
RUN_TO_RUN_SLACK_EVERY_CORE = 0.30
Z95 = 1.96
KINDS = ("fastest", "cheapest", "balanced")


@dataclass(frozen=True)
class Figures:
    """One combination's p99 and cost per million inferences, each with its 95 % interval."""

    label: str
    combo_key: str
    family: str  # racing stops a whole family at once (the combination itself without predict)
    p99: float
    p99_low: float
    p99_high: float
    cost: float
    cost_low: float
    cost_high: float
    precision: str = "exact"  # quick: the first pass's rough figures
    predicted: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, data: dict[str, Any]) -> Figures:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True)
class Domination:
    label: str
    by: str
    evidence: dict[str, Any]

    @property
    def reason(self) -> str:
        e = self.evidence
        return (
            f"dominated by {self.by} (quick pass, 95 %): p99 {_span(e['p99'])} ms against {_span(e['by_p99'])} ms, "
            f"cost {_span(e['cost'], '$')} against {_span(e['by_cost'], '$')} per million inferences"
        )


@dataclass
class Race:
    contenders: list[str] = field(default_factory=list)  # labels measured to full precision
    dominated: dict[str, Domination] = field(default_factory=dict)
    out: dict[str, str] = field(default_factory=dict)  # label -> why it cannot be an answer whatever its timing

    @classmethod
    def of(cls, data: dict[str, Any]) -> Race:
        """A race as `as_dict` wrote it."""
        return cls(
            contenders=list(data.get("contenders") or []),
            dominated={
                k: Domination(label=k, by=d["by"], evidence=d["evidence"])
                for k, d in (data.get("dominated") or {}).items()
            },
            out=dict(data.get("out") or {}),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "contenders": self.contenders,
            "dominated": {
                k: {"by": d.by, "evidence": d.evidence, "reason": d.reason} for k, d in self.dominated.items()
            },
            "out": self.out,
        }


def _span(pair: list[float], unit: str = "") -> str:
    low, high = pair
    if unit == "$":
        return f"${low:.4g}-{high:.4g}"
    return f"{low:.3g}-{high:.3g}"


# Student's t (97.5 %) by degrees of freedom: a mean of a few samples is less certain than 1.96 says
T975 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23, 15: 2.13, 20: 2.09}
TAIL_MIN_SAMPLES = 100  # below this a p99's upper bound is not in the samples (measuring/measure.py)
TAIL_SPREAD = 3.0  # then its worst case is taken as the p99 plus this many standard deviations


def t975(samples: int) -> float:
    df = samples - 1
    if df >= 30:
        return Z95
    return T975[max(k for k in T975 if k <= max(df, 1))]


def mean_half_width(cv: float | None, samples: int | None) -> float | None:
    """The relative half-width of the 95 % interval of a mean of `samples` with this CV."""
    if cv is None or not samples:
        return None
    return t975(samples) * cv / math.sqrt(samples)


def figures_of(row: SummaryResult, family: str | None = None) -> Figures | None:
    """The figures of a result row (a summary's typed row), or None without a cost or a p99
    interval (it cannot be raced: it stays a contender)."""
    latency = row.latency_ms
    cost = row.cost.per_million_inferences_usd if row.cost else None
    p99 = latency.p99
    if not cost or p99 is None:
        return None
    if row.predicted:
        if row.interval is None or not row.interval.p99:
            return None
        p99_low, p99_high = row.interval.p99
        p50_low, p50_high = row.interval.p50 or (latency.p50, latency.p50)
        half = max(latency.p50 - p50_low, p50_high - latency.p50) / latency.p50 if latency.p50 else 0.0
    else:
        p99_low, p99_high = latency.p99_ci95_low, latency.p99_ci95_high
        samples = latency.iterations
        half = mean_half_width(latency.cv, samples)
        if p99_low is None or p99_high is None or half is None:
            return None
        if samples < TAIL_MIN_SAMPLES:  # the p99 of a few samples is about their maximum: its worst case is beyond
            spread = TAIL_SPREAD * latency.cv * (latency.mean or p99)
            p99_high = max(p99_high, latency.max or p99, p99 + spread)
    label = row.combo.label
    slack = 1 + run_to_run_slack(row)
    return Figures(
        label=label,
        combo_key=row.combo_key or label,
        family=family or label,
        p99=p99,
        p99_low=min(p99_low, p99) / slack,
        p99_high=max(p99_high, p99) * slack,
        cost=cost,
        cost_low=cost * max(0.0, 1 - half) / slack,
        cost_high=cost * (1 + half) * slack,
        precision=row.precision or "exact",
        predicted=row.predicted,
    )


def converged_in_quick_pass(report: dict[str, Any]) -> bool:
    """Whether a quick-pass measurement (`measuring/launcher.py` report) is a full one: its samples met
    full precision's stopping rule (`measuring/measure.py converged`: the p50 within ±2 % and the p99
    within ±10 %, 95 %, on at least 100 samples) before the quick pass's shorter cap; its session settings
    are what a full measurement would search (`searched_as_in_full`); and no other work disturbed it.
    Measured again to full precision, it would stop at the same rule with settings from the same search:
    measuring it again is time spent for nothing."""
    latency = report.get("latency_ms") or {}
    disturbed = bool((report.get("load") or {}).get("disturbed"))
    return bool(latency.get("converged")) and searched_as_in_full(report.get("engine_tuning")) and not disturbed


# A contender is measured again only where that can narrow one of its intervals by at least this share of its width
# (`refinement_narrows`): the run-to-run slack is in every measurement's interval, a full one's too.
REFINEMENT_NARROWS = 0.25


def refinement_narrows(row: SummaryResult) -> float:
    """The largest share by which measuring this quick row again to full precision could narrow its p99 or cost
    interval, as the race compares them (log widths, `run_to_run_slack` included). A full measurement samples
    until the stopping rule or its cap: where the quick one met the rule (settings aside) it would time as many,
    else 1 / `QUICK_TIME_CAP_SHARE` times as many. Its cost interval is then the mean's at that count; its
    p99's sampling part narrows as the root of the samples where both reach `TAIL_MIN_SAMPLES`, goes at most
    where only the full one would, and stays where neither would (its worst case rests on the same spread).
    1.0 where the row has no intervals to compare."""
    quick = figures_of(row)
    latency = row.latency_ms
    samples, cv = latency.iterations, latency.cv
    if quick is None or not samples or cv is None:
        return 1.0
    full_samples = samples if getattr(latency, "converged", False) else math.ceil(samples / QUICK_TIME_CAP_SHARE)
    slack = 2 * math.log(1 + run_to_run_slack(row))
    cost_now = math.log(quick.cost_high / quick.cost_low)
    half = min(mean_half_width(cv, full_samples) or 0.0, 0.99)
    cost_full = math.log((1 + half) / (1 - half)) + slack
    p99_now = math.log(quick.p99_high / quick.p99_low)
    if full_samples < TAIL_MIN_SAMPLES:
        p99_full = p99_now
    elif samples >= TAIL_MIN_SAMPLES:  # an order statistic's interval narrows as the root of the samples
        p99_full = slack + max(0.0, p99_now - slack) * math.sqrt(samples / full_samples)
    else:  # its p99 would rest on samples of its own at last: at most the sampling part goes
        p99_full = min(p99_now, slack)
    return max(0.0, 1 - cost_full / cost_now, 1 - p99_full / p99_now)


def kept_quick(row: SummaryResult) -> str | None:
    """Why a contender's quick figures stand without a refinement (None: it is measured again): measured again
    to full precision it would narrow neither interval by `REFINEMENT_NARROWS` (`refinement_narrows`), its
    session settings come from the search a full measurement makes (`searched_as_in_full`) and nothing
    disturbed it. What is left of its intervals is the run-to-run slack, which a second measurement carries too."""
    if row.disturbed or not searched_as_in_full(row.engine_tuning):
        return None
    narrows = refinement_narrows(row)
    if narrows >= REFINEMENT_NARROWS:
        return None
    return (
        f"quick figures kept (a full measurement narrows them {narrows * 100:.0f} % at most; "
        f"±{run_to_run_slack(row) * 100:.0f} % run to run in either)"
    )


def searched_as_in_full(tuning: dict[str, Any] | None) -> bool:
    """Whether a measurement's session settings (`engine_tuning`: None for an engine with none to tune) come
    from the search a full measurement makes: with a full measurement's budget (`budget_s`: every search since
    the quick pass's has it, a slow candidate it skipped skipped alike), or, a search that does not say its
    budget, every candidate timed (`skipped`), and the tuning not failed;
    tuned at its own size, or borrowed at one thread from such a search at another size of the run's quick
    pass (`tuned_at` with `searched_in_full`, `services/inference/handlers.quick_pass_settings`: one thread
    waits on no other, so a CPU quota slows every candidate alike). Measured on the quick runs of 2026-12-07:
    40 of 40 refinements of ONNX Runtime's quick measurements, borrowed or cut short, kept their settings."""
    if not tuning:
        return True
    if "tuned_at" in tuning:  # borrowed at one thread (`quick_pass_settings`): as the search it came from
        return tuning.get("settings") is not None and bool(tuning.get("searched_in_full"))
    tried = tuning.get("tried") or []
    # a search that says its budget had a full measurement's (`measuring.measure.tuning_budget_s`): a candidate
    # it skipped, a full measurement's search skips too; before, a quick pass's search had a quarter of it
    return (
        tuning.get("settings") is not None
        and bool(tried)
        and ("budget_s" in tuning or not any("skipped" in t for t in tried))
    )


def run_to_run_slack(row: SummaryResult) -> float:
    """How far `row`'s figures may move when measured again (`RUN_TO_RUN_SLACK`): more where its measurement took
    every core of its host (vCPUs at least the host's cores; inside a Lambda function, the function's), as a
    2-vCPU size does on a 2-core host. A predicted row's vCPUs are not a measurement's: the default."""
    every_core = bool(row.vcpus and row.vcpus_available and row.vcpus >= row.vcpus_available and not row.predicted)
    return RUN_TO_RUN_SLACK_EVERY_CORE if every_core else RUN_TO_RUN_SLACK


def family_of(combo: Combo) -> str:
    return f"{combo.hardware.value}/{combo.optimizer.value}/b{combo.batch_size}"


def dominates(winner: Figures, loser: Figures) -> bool:
    """`winner`'s worst case beats `loser`'s best case on both p99 and cost."""
    return winner.p99_high < loser.p99_low and winner.cost_high < loser.cost_low


def race(candidates: list[Figures], *, slo_p99_ms: float | None = None, out: dict[str, str] | None = None) -> Race:
    """Contenders, dominated (with the evidence) and out, of rows that may otherwise be recommended
    (`candidates`) and those that may not (`out`: label -> reason, kept as given)."""
    result = Race(out=dict(out or {}))
    eligible = []
    for f in candidates:
        if slo_p99_ms is not None and f.p99_low > slo_p99_ms:
            result.out[f.label] = (
                f"p99 {f.p99_low:.3g}-{f.p99_high:.3g} ms: above the SLO of {slo_p99_ms:g} ms with 95 % confidence"
            )
        else:
            eligible.append(f)
    beaten: dict[str, list[Figures]] = {
        f.label: [g for g in eligible if g is not f and dominates(g, f)] for f in eligible
    }
    for f in eligible:
        if not beaten[f.label]:
            result.contenders.append(f.label)
    live_families = {f.family for f in eligible if f.label in result.contenders}
    for f in eligible:
        if f.label in result.contenders:
            continue
        if f.family in live_families:  # another size of its family can still be an answer: it is measured too
            result.contenders.append(f.label)
            continue
        # name a dominator that is not dominated itself where there is one, the cheapest of those
        by = min(beaten[f.label], key=lambda g: (bool(beaten[g.label]), g.cost, g.p99))
        result.dominated[f.label] = domination(f, by)
    return result


def domination(f: Figures, by: Figures) -> Domination:
    """`f` dominated by `by`, with both intervals as the evidence."""
    return Domination(
        label=f.label,
        by=by.label,
        evidence={
            "p99": [f.p99_low, f.p99_high],
            "cost": [f.cost_low, f.cost_high],
            "by_p99": [by.p99_low, by.p99_high],
            "by_cost": [by.cost_low, by.cost_high],
            "p99_ms": f.p99,
            "per_million_inferences_usd": f.cost,
            "precision": f.precision,
        },
    )


def picks(candidates: list[Figures], balance_weight: float = 0.5, scale: list[Figures] = ()) -> dict[str, str | None]:
    """Fastest (p99), cheapest (cost) and balanced (normalised over the candidates and `scale`:
    `balance_ranking`) among `candidates`, on their point figures."""
    if not candidates:
        return dict.fromkeys(KINDS)
    return {
        "fastest": min(candidates, key=lambda f: (f.p99, f.cost)).label,
        "cheapest": min(candidates, key=lambda f: (f.cost, f.p99)).label,
        "balanced": balance_ranking(candidates, balance_weight, scale)[0],
    }


def balance_scores(
    p99: dict[str, float], cost: dict[str, float], weight: float, scale: tuple[list[float], list[float]] = ([], [])
) -> dict[str, float]:
    """`weight * cost' + (1 - weight) * p99'` per key, each normalised to 0..1 over the keys and
    `scale`'s further p99s and costs (all equal: 0): the balanced score of the recommendation
    (`report/recommendation.py`) and of the race."""

    def normalised(values: dict[str, float], further: list[float]) -> dict[str, float]:
        low, high = min([*values.values(), *further]), max([*values.values(), *further])
        return {k: (v - low) / (high - low) if high > low else 0.0 for k, v in values.items()}

    p, c = normalised(p99, scale[0]), normalised(cost, scale[1])
    return {k: weight * c[k] + (1 - weight) * p[k] for k in p99}


def balance_ranking(candidates: list[Figures], balance_weight: float = 0.5, scale: list[Figures] = ()) -> list[str]:
    """The candidates' labels by balanced score (`balance_scores`), best first. The scale spans the
    candidates and `scale`: what the race stopped as dominated, which a run of precision exact
    measures fully and normalises over; without them the quick answer's balanced pick moved with
    what the race stopped (ResNet-18's README matrix: b4 3538 MB against exact's b1 3538 MB)."""
    p99 = {f.label: f.p99 for f in candidates}
    cost = {f.label: f.cost for f in candidates}
    score = balance_scores(p99, cost, balance_weight, ([f.p99 for f in scale], [f.cost for f in scale]))
    return sorted(score, key=lambda k: (score[k], p99[k], cost[k]))


def _log_sides(f: Figures, what: str) -> tuple[float, float]:
    """How far a figure's interval reaches below and above it, as log ratios (0 where it has none)."""
    value, low, high = getattr(f, what), getattr(f, f"{what}_low"), getattr(f, f"{what}_high")
    if value <= 0:
        return 0.0, 0.0
    return (math.log(value / low) if 0 < low < value else 0.0), (math.log(high / value) if high > value else 0.0)


# A margin's interval is stated as ± its wider side while its sides differ by less than this factor;
# beyond it, as the range itself: against a predicted size in the quota's range (p99 18.7-62.9 ms
# around 20.3) a margin read "costs 1 % ± 244 % more", where the interval reached far less below.
SYMMETRIC_WITHIN = 1.5


class Margin(NamedTuple):
    """How much more `nxt` costs (or how much higher its p99 is) than `best`, in %, and that
    difference's 95 % interval, in %."""

    value: float
    low: float
    high: float

    def text(self, up: str, down: str) -> str:
        """ "31 % ± 4 % more"; where the interval is lopsided, its range: "1 % more (95 %: 8 % less to 213 %
        more)", or on one side of 0 "40 % higher (95 %: 3 % to 137 % higher)"."""

        def word(x: float) -> str:
            return up if x >= 0 else down

        below, above = self.value - self.low, self.high - self.value
        if max(below, above) <= SYMMETRIC_WITHIN * min(below, above) or max(below, above) < 1:
            return f"{abs(self.value):.0f} % ± {max(below, above):.0f} % {word(self.value)}"
        if word(self.low) == word(self.high):  # "40 % higher (95 %: 3 % to 137 % higher)"
            near, far = sorted((abs(self.low), abs(self.high)))
            return f"{abs(self.value):.0f} % {word(self.value)} (95 %: {near:.0f} % to {far:.0f} % {word(self.high)})"
        return (
            f"{abs(self.value):.0f} % {word(self.value)} "
            f"(95 %: {abs(self.low):.0f} % {word(self.low)} to {abs(self.high):.0f} % {word(self.high)})"
        )


def margin(best: Figures, nxt: Figures, what: str) -> Margin:
    """How much more `nxt` costs (or how much higher its p99 is) than `best`, in %, and its interval:
    the ratio's, each figure's interval sides added in quadrature as log ratios (a ratio's error is
    relative on both sides: an interval three times above its figure and a fifth below it stays so)."""
    ratio = getattr(nxt, what) / getattr(best, what)
    best_below, best_above = _log_sides(best, what)
    next_below, next_above = _log_sides(nxt, what)
    low = ratio * math.exp(-math.hypot(next_below, best_above))
    high = ratio * math.exp(math.hypot(next_above, best_below))
    return Margin((ratio - 1) * 100, (low - 1) * 100, (high - 1) * 100)


def margins(
    candidates: list[Figures],
    chosen: dict[str, str | None],
    balance_weight: float = 0.5,
    beaten: list[Figures] = (),
) -> dict[str, str]:
    """Each pick with its margin over the next best: "cheapest: A; the next, B, costs 31 % ± 4 % more";
    the balanced pick's over the next by balanced score, on both figures (a balanced pick may be
    the faster or the cheaper of the two): "balanced: A; the next, B, has a p99 12 % ± 9 % higher
    and costs 3 % ± 8 % less". The only candidate is held against the best of `beaten` (what is
    dominated, with its figures) where there is some: "the next, B (dominated), ..."."""
    if len(candidates) == 1 and beaten:
        candidates = [*candidates, *(f for f in beaten if f.label != candidates[0].label)]
    dominated = {f.label for f in beaten}
    by_label = {f.label: f for f in candidates}

    def named(f: Figures) -> str:
        return f"{f.label} (dominated)" if f.label in dominated else f.label

    out: dict[str, str] = {}
    for kind, what, phrase in (
        ("cheapest", "cost", lambda m: f"costs {m.text('more', 'less')}"),
        ("fastest", "p99", lambda m: f"has a p99 {m.text('higher', 'lower')}"),
    ):
        best = by_label.get(chosen.get(kind) or "")
        if best is None:
            continue
        rest = sorted((f for f in candidates if f.label != best.label), key=lambda f: getattr(f, what))
        if not rest:
            out[kind] = f"{kind}: {best.label} (the only candidate)"
            continue
        nxt = rest[0]
        out[kind] = f"{kind}: {best.label}; the next, {named(nxt)}, " + phrase(margin(best, nxt, what))
    balanced = by_label.get(chosen.get("balanced") or "")
    if balanced is not None:
        ranking = [label for label in balance_ranking(candidates, balance_weight, beaten) if label != balanced.label]
        if not ranking:
            out["balanced"] = f"balanced: {balanced.label} (the only candidate)"
        else:
            nxt = by_label[ranking[0]]
            p99, cost = margin(balanced, nxt, "p99"), margin(balanced, nxt, "cost")
            out["balanced"] = (
                f"balanced: {balanced.label}; the next, {named(nxt)}, has a p99 {p99.text('higher', 'lower')} "
                f"and costs {cost.text('more', 'less')}"
            )
    return out


def answer(
    rows: dict[str, Figures],
    race_result: Race | None,
    *,
    balance_weight: float,
    stage: str,
    refining: list[str],
) -> dict[str, Any]:
    """The running answer (`runs/{id}/answer.json`): picks among the rows that may be an answer,
    each pick's margin, what is dominated and why, and what is still being refined."""
    race_result = race_result or Race()
    shut = set(race_result.dominated) | set(race_result.out)
    candidates = [f for f in rows.values() if f.label not in shut]
    beaten = [f for f in rows.values() if f.label in race_result.dominated]
    chosen = picks(candidates, balance_weight, beaten)
    return {
        "stage": stage,
        "balance_weight": balance_weight,
        "picks": chosen,
        "margins": margins(candidates, chosen, balance_weight, beaten),
        "rows": {k: f.as_dict() for k, f in rows.items()},
        "refining": sorted(refining),
        "measured_fully": sum(f.precision == "exact" and not f.predicted for f in rows.values()),
        **race_result.as_dict(),
    }


# The order of the first pass ----------------------------------------------------------------

HARDWARE_ORDER = ("intel", "arm")  # arm is emulated on an x86 host: slow to measure, never a pick there
ENGINE_ORDER = ("base", "onnx", "onnx_int8", "tvm")  # cheapest conversion first (base: the model file itself)


def engine_of(combo: Combo) -> str:
    return f"{combo.hardware.value}/{combo.optimizer.value}"


def _place(values: tuple[str, ...], value: str) -> int:
    return values.index(value) if value in values else len(values)


def telling(combo: Combo) -> tuple:
    """How much a combination tells about its engine, most first: the smallest batch (the fastest
    conversion and measurement, the latency-bound case), then the size nearest one vCPU (every
    engine runs one unthrottled thread there; with predict every family's middle anchor), the
    larger on a tie."""
    return (combo.batch_size, abs(math.log(combo.memory_mb / MB_PER_VCPU)), -combo.memory_mb)


def leads(combos: dict[str, Combo]) -> dict[str, str]:
    """Each engine's lead combination (engine -> combination key): its most telling one."""
    out: dict[str, str] = {}
    for key, combo in sorted(combos.items(), key=lambda kv: telling(kv[1])):
        out.setdefault(engine_of(combo), key)
    return out


def telling_order(combos: dict[str, Combo]) -> list[str]:
    """The order a run's combinations are converted and measured in: every engine's lead first
    (cheapest conversion first), then by batch, the size that tells most, hardware, engine."""

    def engine_rank(combo: Combo) -> tuple[int, int]:
        return _place(HARDWARE_ORDER, combo.hardware.value), _place(ENGINE_ORDER, combo.optimizer.value)

    first = sorted(leads(combos).values(), key=lambda k: engine_rank(combos[k]))
    chosen = set(first)
    rest = sorted(
        (k for k in combos if k not in chosen),
        key=lambda k: (*telling(combos[k]), *engine_rank(combos[k])),
    )
    return first + rest


# The running answer before the race: gathering, then the first (provisional) answer ----------

PROVISIONAL_STAGES = ("gathering", "provisional")


WAITING_FOR_FIGURES = "its tuning waits for the other engines' figures"


def first_pass(
    combos: dict[str, Combo], *, tuned: set[str], criteria: dict[str, Any], skipping: dict[str, str] | None = None
) -> dict[str, Any]:
    """A racing run's running answer before its first answer (stage `gathering`): each engine's
    lead (`tuned`: the engines not waited for; `skipping`: the engines whose tuning the run will skip,
    not waited for either, with why, `core.tuning_stakes.never_tuned`) and the request's `criteria`
    (balance_weight, slo_p99_ms, min_agreement, price_region)."""
    skipping = skipping or {}

    def lead(engine: str, key: str) -> dict[str, Any]:
        found = {"label": combos[key].label, "combo_key": key, "state": "pending"}
        if engine in skipping:
            return {**found, "required": False, "why": f"its tuning will be skipped: {skipping[engine]}"}
        return {**found, "required": engine not in tuned}

    return {
        "stage": "gathering",
        **criteria,
        "total": len(combos),
        "ended": 0,
        "leads": {engine: lead(engine, key) for engine, key in leads(combos).items()},
        "rows": {},
        "dominated": {},
        "out": {},
        "picks": dict.fromkeys(KINDS),
        "margins": {},
        "refining": [],
        "measured_fully": 0,
    }


def with_outcome(doc: dict[str, Any], *, ended: int = 0, **outcome: Any) -> dict[str, Any]:
    """`with_outcomes` of one outcome."""
    return with_outcomes(doc, [outcome], ended=ended)


def with_outcomes(doc: dict[str, Any], outcomes: list[dict[str, Any]], *, ended: int = 0) -> dict[str, Any]:
    """`doc` (stage gathering or provisional) with quick outcomes, each `combo_key`, `label` and one
    of: its `figures` (kept while no other combination dominates it; the ones it dominates leave the
    rows, named), why it is `out` of the answer, or why it `failed`. `ended`: how many of the run's
    combinations have an outcome (the archiver's listing). Idempotent: the same outcome twice gives
    the same document."""
    doc = {**doc, "rows": dict(doc["rows"]), "dominated": dict(doc["dominated"]), "out": dict(doc["out"])}
    doc["leads"] = {k: dict(v) for k, v in doc["leads"].items()}
    doc["ended"] = max(doc.get("ended", 0), ended)
    lead_of = {lead["combo_key"]: lead for lead in doc["leads"].values()}
    for outcome in outcomes:
        _add(doc, lead_of.get(outcome["combo_key"]), **outcome)
    return refreshed(doc)


def _add(
    doc: dict[str, Any],
    lead: dict[str, Any] | None,
    *,
    combo_key: str,
    label: str,
    figures: Figures | None = None,
    out: str | None = None,
    failed: str | None = None,
) -> None:
    doc["rows"].pop(label, None)
    doc["dominated"].pop(label, None)
    doc["out"].pop(label, None)
    slo = doc.get("slo_p99_ms")
    if figures is not None and slo is not None and figures.p99_low > slo:
        out = f"p99 {figures.p99_low:.3g}-{figures.p99_high:.3g} ms: above the SLO of {slo:g} ms with 95 % confidence"
        figures = None
    if lead is not None:
        lead["state"] = "measured" if figures is not None else "out" if out else "failed"
        if failed or out:
            lead["reason"] = failed or out
    if figures is not None:
        rows = [Figures.of(v) for v in doc["rows"].values()]
        beaten_by = [g for g in rows if dominates(g, figures)]
        if beaten_by:
            by = min(beaten_by, key=lambda g: (g.cost, g.p99))
            doc["dominated"][label] = _stopped(domination(figures, by), figures)
            return
        for g in rows:
            if dominates(figures, g):
                del doc["rows"][g.label]
                doc["dominated"][g.label] = _stopped(domination(g, figures), g)
        doc["rows"][label] = figures.as_dict()
    elif out:
        doc["out"][label] = out


def _stopped(d: Domination, figures: Figures) -> dict[str, Any]:
    """A dominated row in a running answer: by whom, why, and its figures (a sole candidate's margin)."""
    return {"by": d.by, "reason": d.reason, "figures": figures.as_dict()}


def refreshed(doc: dict[str, Any]) -> dict[str, Any]:
    """Picks and margins of a gathering or provisional answer, and its stage: `provisional` once
    every engine waited for has its lead's outcome."""
    if doc["stage"] == "gathering" and all(
        lead["state"] != "pending" for lead in doc["leads"].values() if lead["required"]
    ):
        doc["stage"] = "provisional"
    candidates = [Figures.of(v) for v in doc["rows"].values()]
    beaten = [Figures.of(v["figures"]) for v in doc["dominated"].values() if v.get("figures")]
    doc["picks"] = picks(candidates, doc.get("balance_weight", 0.5), beaten)
    doc["margins"] = margins(candidates, doc["picks"], doc.get("balance_weight", 0.5), beaten)
    return doc


def is_shown(doc: dict[str, Any] | None) -> bool:
    """Whether a running answer is one to show (not still gathering its first pass)."""
    return bool(doc) and doc.get("stage") != "gathering"


def fingerprint(doc: dict[str, Any]) -> str:
    """What changes in a running answer worth printing again (the CLI prints lines, it cannot
    redraw): its stage and picks, and its margins once the race is decided."""
    kept = {"stage": doc.get("stage"), "picks": doc.get("picks")}
    if doc.get("stage") not in PROVISIONAL_STAGES:
        kept["margins"] = doc.get("margins")
    return json.dumps(kept, sort_keys=True)


PROVISIONAL_DOMINATED_SHOWN = 4  # a provisional answer names this many of what it finds dominated


def time_left_s(doc: dict[str, Any]) -> float | None:
    """Seconds left of a decided race by its running answer: the refinements still under way and the predicted
    picks' checks (`services/archiver/racing.time_left`); None before the race is decided or without estimates."""
    estimates = doc.get("refine_s")
    if doc.get("stage") not in ("quick", "refining") or estimates is None:
        return None
    return sum(estimates.get(label, 0.0) for label in doc.get("refining") or []) + float(doc.get("checks_s") or 0.0)


def duration_text(seconds: float) -> str:
    """A time left or expected, as the running answer and the plan's line say it: seconds below 90 s, else minutes."""
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def answer_lines(doc: dict[str, Any]) -> list[str]:
    """The running answer as a few lines of text (the CLI, the page)."""
    if not is_shown(doc):
        return []
    rows = {k: Figures.of(v) for k, v in (doc.get("rows") or {}).items()}
    stage = doc.get("stage", "")
    refining = doc.get("refining") or []
    left = time_left_s(doc)
    about = f", about {duration_text(left)} to go" if left is not None else ""
    head = {
        "provisional": f"first answer, provisional: {doc.get('ended', 0)} of {doc.get('total', 0)} combinations "
        "measured (quick pass); picks may change",
        "quick": f"first answer (quick pass; refining {len(refining)}{about})"
        if refining
        else "first answer (quick pass)",
        "refining": f"refining ({len(refining)} left{about})",
        "final": "answer",
    }.get(stage, stage)
    lines = [f"{head}:"]
    for kind in KINDS:
        label = (doc.get("picks") or {}).get(kind)
        if not label:
            continue
        f = rows.get(label)
        figures = (
            f" (p99 {f.p99:.3g} ms [{f.p99_low:.3g}-{f.p99_high:.3g}], "
            f"${f.cost:.4g}/M [{f.cost_low:.4g}-{f.cost_high:.4g}]{', quick' if f.precision == 'quick' else ''})"
            if f
            else ""
        )
        lines.append(f"  {(doc.get('margins') or {}).get(kind) or f'{kind}: {label}'}{figures}")
    if not any((doc.get("picks") or {}).values()):
        lines.append("  no combination can be an answer so far")
    dominated = list((doc.get("dominated") or {}).items())
    shown = dominated[:PROVISIONAL_DOMINATED_SHOWN] if stage in PROVISIONAL_STAGES else dominated
    for label, d in shown:
        lines.append(f"  {label}: {d['reason']}{' (so far)' if stage in PROVISIONAL_STAGES else ''}")
    if len(shown) < len(dominated):
        lines.append(f"  and {len(dominated) - len(shown)} more dominated so far")
    if stage in PROVISIONAL_STAGES:
        for engine, lead in (doc.get("leads") or {}).items():
            if lead["state"] == "pending":
                why = "" if lead["required"] else f" ({lead.get('why') or WAITING_FOR_FIGURES})"
                lines.append(f"  {engine}: not measured yet{why}")
            elif lead["state"] in ("failed", "out"):
                lines.append(f"  {lead['label']}: {lead['state']}: {(lead.get('reason') or '')[:200]}")
    return lines
