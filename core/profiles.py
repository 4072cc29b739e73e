"""Where the time goes: an engine's profiled operator calls made into an operator table, traces
kept bounded, the optimizers side by side by operator group, and when TVM's tuning pays off.

An engine's profiler (`engines.*_engine.profile`) yields one `(name, op_type, ms)` per operator
call over `runs` inferences; `operator_rows` sums them per operator (type and name): calls,
total and mean time per inference, share of the inference. `operator_group` files an operator
type under one of `GROUPS` by its name (the same words for torch's `aten::`, ONNX's op types and
TVM's fused kernels), so different engines' operators line up in one table.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict

GROUPS = ("conv", "matmul", "attention", "layout", "copy", "elementwise", "other")
# substrings of an operator type (lower case) -> its group; the first group that matches wins
_GROUP_WORDS = (
    ("attention", ("attention", "softmax", "sdpa", "scaled_dot_product")),
    ("conv", ("conv",)),
    ("matmul", ("matmul", "gemm", "linear", "dense", "addmm", "bmm", "mm", "einsum")),
    (
        "layout",
        (
            "transpose",
            "permute",
            "reshape",
            "view",
            "layout",
            "flatten",
            "squeeze",
            "unsqueeze",
            "expand",
            "concat",
            "cat",
            "split",
            "slice",
            "gather",
            "pad",
            "reorder",
            "as_strided",
            "contiguous",
        ),
    ),
    (
        "copy",
        (
            "copy",
            "clone",
            "to_copy",
            "alloc",
            "empty",
            "memcpy",
            "identity",
            "cast",
            "_to",
            "zeros",
            "ones",
            "full",
            "fill",
        ),
    ),
    (
        "elementwise",
        (
            "relu",
            "add",
            "mul",
            "sub",
            "div",
            "sigmoid",
            "tanh",
            "gelu",
            "erf",
            "exp",
            "sqrt",
            "pow",
            "batch_norm",
            "batchnormalization",
            "layer_norm",
            "layernormalization",
            "norm",
            "clip",
            "hardtanh",
            "max_pool",
            "maxpool",
            "avg_pool",
            "averagepool",
            "globalaveragepool",
            "mean",
            "where",
            "neg",
            "abs",
            "silu",
            "sum",
            "reduce",
            "clamp",
            "clip",
            "pool",
        ),
    ),
)
MAX_TRACE_EVENTS = 50_000  # a stored trace keeps at most this many events (the rest is cut, with a note)
MAX_TRACE_BYTES = 20_000_000  # and at most about this much JSON


def operator_group(op_type: str) -> str:
    """The group of an operator type: conv, matmul, attention, layout, copy, elementwise or other."""
    name = op_type.lower().removeprefix("aten::")
    for group, words in _GROUP_WORDS:
        if any(word in name for word in words):
            return group
    return "other"


def operator_rows(calls: list[tuple[str, str, float]], runs: int) -> list[dict]:
    """Per operator (type and name), heaviest first: calls per inference, total and mean ms per
    inference, share of the profiled operators' time, and its group."""
    total: dict[tuple[str, str], float] = defaultdict(float)
    count: dict[tuple[str, str], int] = defaultdict(int)
    for name, op_type, ms in calls:
        total[(op_type, name)] += ms
        count[(op_type, name)] += 1
    everything = sum(total.values()) or 1.0
    runs = max(1, runs)
    rows = [
        {
            "op_type": op_type,
            "name": name,
            "group": operator_group(op_type),
            "calls": count[key] / runs,
            "total_ms": total[key] / runs,
            "mean_ms": total[key] / count[key],
            "share": total[key] / everything,
        }
        for key in total
        for op_type, name in [key]
    ]
    return sorted(rows, key=lambda row: -row["total_ms"])


def group_totals(rows: list[dict]) -> dict[str, dict]:
    """ms per inference and share per operator group (every group, zero where none)."""
    totals = {group: {"total_ms": 0.0, "share": 0.0, "top": None} for group in GROUPS}
    for row in rows:  # rows come heaviest first: the first of a group is its top operator
        entry = totals[row["group"]]
        entry["total_ms"] += row["total_ms"]
        entry["share"] += row["share"]
        entry["top"] = entry["top"] or row["op_type"]
    return totals


def side_by_side(profiles: dict[str, list[dict]]) -> list[dict]:
    """One row per operator group, one column per profiled optimizer (its ms per inference,
    share and heaviest operator of that group); groups no optimizer spends time in are left out."""
    totals = {optimizer: group_totals(rows) for optimizer, rows in profiles.items()}
    table = []
    for group in GROUPS:
        cells = {optimizer: groups[group] for optimizer, groups in totals.items()}
        if any(cell["total_ms"] > 0 for cell in cells.values()):
            table.append({"group": group, "optimizers": cells})
    return table


def bounded_trace(
    trace: dict, max_events: int = MAX_TRACE_EVENTS, max_bytes: int = MAX_TRACE_BYTES
) -> tuple[dict, str | None]:
    """The Chrome trace with at most `max_events` events and about `max_bytes` of JSON (the
    first events: whole inferences first), and the note saying what was cut (None: nothing)."""
    events = trace.get("traceEvents", [])
    kept, size = 0, 0
    for event in events[:max_events]:
        size += len(json.dumps(event))
        if size > max_bytes:
            break
        kept += 1
    if kept == len(events):
        return trace, None
    note = (
        f"truncated: the first {kept} of {len(events)} events kept "
        f"(at most {max_events} events, {max_bytes // 1_000_000} MB)"
    )
    other = {**trace.get("otherData", {}), "ayci_note": note}
    return {**trace, "traceEvents": events[:kept], "otherData": other}, note


def break_even(
    *,
    tuning_s: float,
    tuning_usd: float,
    tuned_ms: float,
    untuned_ms: float,
    saved_usd_per_inference: float,
    untuned: str,
) -> dict:
    """When tuning pays off: the inferences after which tuning's cost (`tuning_usd`: its seconds
    priced as the build's compute) is repaid by each inference costing `saved_usd_per_inference`
    less than on the best engine without tuning (`untuned`). `inferences` is None ("never")
    when the tuned engine is not faster."""
    faster = untuned_ms > tuned_ms and saved_usd_per_inference > 0
    return {
        "tuning_s": tuning_s,
        "tuning_usd": tuning_usd,
        "against": untuned,
        "against_p50_ms": untuned_ms,
        "tuned_p50_ms": tuned_ms,
        "saved_ms_per_inference": untuned_ms - tuned_ms,
        "saved_usd_per_inference": saved_usd_per_inference,
        "inferences": math.ceil(tuning_usd / saved_usd_per_inference) if faster else None,
    }
