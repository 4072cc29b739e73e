"""Which combination to deploy.

Candidates are the measured results that may be recommended: timed natively (never under
emulation), as Lambda would run them (confined to the memory size, with the vCPUs it gives:
never host-limited), undisturbed by other work, costed, agreeing with `base` within the run's
threshold, meeting its p99 SLO, if it has one, and Lambda's rules (`core.lambda_rules`: a
batch's payload within 6 MB, its init within 10 s, a package within 10 GB). Every other result
is listed under `excluded` with the reason. Among the candidates:
- `fastest`: the lowest p99;
- `cheapest`: the lowest cost per million inferences;
- `balanced`: the lowest `w * cost' + (1 - w) * p99'`, where cost' and p99' are normalised
  to 0..1 over the candidates and `w` is the run's balance weight (1: cost alone, 0: p99 alone);
- `pareto`: the candidates no other one beats on both p99 and cost, by increasing p99.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from core.racing import balance_scores
from schemas.combos import Combo
from schemas.documents import BreakEven, SummaryResult
from schemas.recommendation import Candidate, Criteria, Recommendation


def rows(results: Iterable[SummaryResult | dict[str, Any]]) -> list[SummaryResult]:
    """`results` as typed rows (stored result dicts are validated once, here)."""
    return [r if isinstance(r, SummaryResult) else SummaryResult.model_validate(r) for r in results]


def recommend(
    results: Iterable[SummaryResult | dict[str, Any]],
    *,
    slo_p99_ms: float | None,
    min_agreement: float,
    balance_weight: float = 0.5,
    scale_rows: Iterable[SummaryResult] = (),
) -> Recommendation:
    """The recommendation for a run's `results` (rows of a summary, or stored result dicts
    with `combo`, `latency_ms`, `agreement`, `cost`); combinations are named by their labels.
    `scale_rows`: rows that are not candidates but span the balanced score's scale, as they would
    in a run that measured them fully (a racing run's dominated rows: `core.racing.balance_ranking`)."""
    results = rows(results)
    candidates, excluded = [], {}
    for result in results:
        why = exclusion(result, slo_p99_ms=slo_p99_ms, min_agreement=min_agreement)
        if why:
            excluded[result.label] = why
        else:
            candidates.append(result)
    criteria = Criteria(
        slo_p99_ms=slo_p99_ms, min_agreement=min_agreement, balance_weight=balance_weight, fastest_by="p99"
    )
    disturbed = sorted(r.label for r in results if r.disturbed)
    if not candidates:
        return Recommendation(
            fastest=None,
            cheapest=None,
            balanced=None,
            pareto=[],
            candidates={},
            excluded=excluded,
            criteria=criteria,
            disturbed=disturbed,
        )
    p99 = {r.label: r.latency_ms.p99 for r in candidates}
    cost = {r.label: r.cost.per_million_inferences_usd for r in candidates}
    spanning = [r for r in scale_rows if r.cost is not None and r.latency_ms.p99 is not None]
    scores = balance_scores(
        p99,
        cost,
        balance_weight,
        scale=(
            [r.latency_ms.p99 for r in spanning],
            [r.cost.per_million_inferences_usd for r in spanning],
        ),
    )
    return Recommendation(
        fastest=min(p99, key=lambda k: (p99[k], cost[k])),
        cheapest=min(cost, key=lambda k: (cost[k], p99[k])),
        balanced=min(scores, key=lambda k: (scores[k], p99[k], cost[k])),
        pareto=pareto_front(p99, cost),
        candidates={
            k: Candidate(p99_ms=p99[k], per_million_inferences_usd=cost[k], balance_score=scores[k])
            for k in sorted(p99, key=p99.get)
        },
        excluded=excluded,
        criteria=criteria,
        disturbed=disturbed,
    )


def recipes_detail(result: SummaryResult) -> str:
    """onnx_int8: what every int8 recipe scored ("; int8 recipes: static QDQ 0.18, ...")."""
    summary = (getattr(result, "conversion", None) or {}).get("recipe_summary")
    return f"; int8 recipes: {summary}" if summary else ""


def exclusion(result: SummaryResult | dict[str, Any], *, slo_p99_ms: float | None, min_agreement: float) -> str | None:
    """Why `result` cannot be recommended, or None if it can."""
    (result,) = rows([result])
    if result.emulated:
        return "timed under emulation: neither its latency nor its cost is real"
    if result.host_limited:
        return (
            f"host-limited: Lambda gives {result.combo.memory_mb} MB {result.vcpus or 0:.1f} vCPUs, "
            f"this host has {result.vcpus_available}: measured with fewer, not costed"
        )
    from core.lambda_model.unconfined import is_estimated

    if result.confined is False and not is_estimated(result):  # an estimate from one unconfined thread may be picked
        return f"unconfined: not measured as Lambda would run it ({result.confinement_reason})"
    if result.disturbed:
        return f"disturbed: {result.load.disturbance}; measure again"
    if result.agreement is None:
        return "no agreement with base was measured"
    agreement = result.agreement.score
    if agreement < min_agreement:
        return (
            f"agrees with base only {agreement:.4f} ({result.agreement.metric}), below the threshold {min_agreement}"
            f"{divergence_detail(result)}{recipes_detail(result)}"
        )
    if result.cost is None or not result.cost.per_million_inferences_usd:
        return "no cost (no price for it)"
    if slo_p99_ms is not None and result.latency_ms.p99 > slo_p99_ms:
        return f"p99 {result.latency_ms.p99:.1f} ms above the SLO of {slo_p99_ms:g} ms"
    from core.lambda_rules import broken_rules

    broken = broken_rules(result)
    if broken:
        return "breaks Lambda's rules: " + "; ".join(broken)
    return None


def divergence_detail(result: SummaryResult) -> str:
    """Where a result's outputs first diverge (`divergence`, found when it was measured), as the
    end of its exclusion's reason; empty if it has none."""
    divergence = result.divergence
    if not divergence:
        return ""
    if divergence.get("node"):
        diff = divergence.get("max_abs_diff")
        size = f"max abs diff {diff:.3g}" if diff is not None else divergence.get("detail", "")
        return f"; first diverges at node {divergence['node']} ({divergence['op_type']}): {size}"
    return f"; {divergence.get('detail') or divergence.get('error')}"


def pareto_front(p99: dict[str, float], cost: dict[str, float]) -> list[str]:
    """The keys no other key beats on both p99 and cost (at least as good on both, better on
    one), by increasing p99. One sweep by (p99, cost): a key is on the front if it costs
    less than every key before it (equal pairs all stay)."""
    front: list[str] = []
    best_cost, best_pair = float("inf"), None
    for k in sorted(p99, key=lambda k: (p99[k], cost[k])):
        pair = (p99[k], cost[k])
        if cost[k] < best_cost:
            front.append(k)
            best_cost, best_pair = cost[k], pair
        elif pair == best_pair:  # the same figures as a key on the front: neither beats the other
            front.append(k)
    return front


def label(result: SummaryResult | dict[str, Any]) -> str:
    """The combination label of a result (`Combo.label`)."""
    return result.label if isinstance(result, SummaryResult) else Combo.model_validate(result["combo"]).label


def with_break_even(
    results: Iterable[SummaryResult | dict[str, Any]], region: str, *, min_agreement: float = 0.99
) -> list[SummaryResult]:
    """The measured results, each tuned one (`tvm`) with `break_even`: after how many inferences
    its tuning time, priced as the build's compute, is repaid by its faster inference against
    the fastest engine without tuning at the same hardware, batch and memory size (by p50) that
    could be recommended (`exclusion` finds nothing against it at the run's `min_agreement`:
    an int8 row that disagrees with base is no yardstick); `inferences` None: never (not
    faster). Without such an untuned engine to compare, none."""
    from core.profiles import break_even
    from schemas.cost import UnknownPriceRegion, build_cost_usd, inference_cost_usd, load_prices

    results = rows(results)
    untuned: dict[tuple, SummaryResult] = {}
    for result in results:
        c = result.combo
        where = (c.hardware, c.batch_size, c.memory_mb)
        if (
            c.optimizer not in TUNED_OPTIMIZERS
            and not result.predicted
            and exclusion(result, slo_p99_ms=None, min_agreement=min_agreement) is None
            and (where not in untuned or result.latency_ms.p50 < untuned[where].latency_ms.p50)
        ):
            untuned[where] = result
    out, table = [], load_prices()  # once, not twice per tuned result
    for result in results:
        c = result.combo
        best = untuned.get((c.hardware, c.batch_size, c.memory_mb))
        if c.optimizer not in TUNED_OPTIMIZERS or best is None or result.predicted:
            out.append(result)
            continue
        tuned_ms, untuned_ms = result.latency_ms.p50, best.latency_ms.p50
        try:
            tuning_usd = build_cost_usd(result.tuning_s or 0.0, region, table)
            saved = inference_cost_usd(untuned_ms - tuned_ms, c.memory_mb, c.hardware, c.batch_size, region, table)
        except UnknownPriceRegion:
            out.append(result)
            continue
        payoff = break_even(
            tuning_s=result.tuning_s or 0.0,
            tuning_usd=tuning_usd,
            tuned_ms=tuned_ms,
            untuned_ms=untuned_ms,
            saved_usd_per_inference=saved,
            untuned=best.label,
        )
        out.append(result.model_copy(update={"break_even": BreakEven.model_validate(payoff)}))
    return out


TUNED_OPTIMIZERS = ("tvm",)  # optimizers whose conversion tunes (MetaSchedule): their tuning's break-even is reported
