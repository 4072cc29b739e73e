"""Which combination to deploy. Only results that agree with `base` within the run's
threshold (and meet its p99 SLO, if any) are candidates; the others say why they are not."""

from __future__ import annotations


def recommend(results: list[dict], *, slo_p99_ms: float | None, min_agreement: float, balance_weight: float = 0.5) -> dict:
    candidates, excluded = [], {}
    for result in results:
        label = _label(result)
        if result.get("emulated"):
            excluded[label] = "timed under emulation: not a real latency"
        elif result["agreement"]["score"] < min_agreement:
            excluded[label] = f"agreement {result['agreement']['score']:.4f} below {min_agreement}"
        elif slo_p99_ms is not None and result["latency_ms"]["p99"] > slo_p99_ms:
            excluded[label] = f"p99 {result['latency_ms']['p99']:.1f} ms above the SLO {slo_p99_ms} ms"
        else:
            candidates.append(result)
    if not candidates:
        return {"fastest": None, "excluded": excluded}
    fastest = min(candidates, key=lambda r: r["latency_ms"]["p99"])
    return {"fastest": _label(fastest), "excluded": excluded}


def _label(result: dict) -> str:
    c = result["combo"]
    return f"{c['hardware']}/{c['optimizer']}/b{c['batch_size']}/{c['memory_mb']}MB"
