"""Profiles side by side: for each hardware, batch and memory size of a run, the optimizers'
time per operator group (conv, matmul, attention, layout, copy, elementwise, other) in one
table, each with its heaviest operator and where its trace is (`core/profiles.py`). The CLI
prints these tables; the API serves them (`GET /runs/{id}/profiles`) and the page draws them."""

from __future__ import annotations

from typing import Any

from core.profiles import side_by_side
from report.table import as_summary
from schemas.documents import RunSummary, SummaryResult

TOP_OPERATORS = 5  # operators listed per optimizer under the table
PROFILED_OPTIMIZERS = ("base", "onnx", "tvm", "onnx_int8")


class NotProfilable(Exception):
    """This combination cannot be profiled (failed, unknown, emulated, no profiler): the message says why."""


def profilable(result: SummaryResult | dict[str, Any]) -> str | None:
    """Why a run's result cannot be profiled here, or None if it can."""
    if not isinstance(result, SummaryResult):
        result = SummaryResult.model_validate(result)
    if result.predicted:
        return "it was predicted, not measured"
    if result.emulated:
        return "it ran under emulation: a profile of emulated code says nothing about Lambda"
    if result.combo.optimizer.value not in PROFILED_OPTIMIZERS:
        return f"no profiler for {result.combo.optimizer.value}"
    return None


def chosen_results(summary: RunSummary | dict[str, Any], combo_key: str | None) -> list[SummaryResult]:
    """The run's results to profile (rows of its summary): all profilable ones, or the one
    `combo_key` names (NotProfilable naming why when it failed, is unknown to the run or cannot
    be profiled)."""
    summary = as_summary(summary)
    if combo_key is None:
        chosen = [r for r in summary.results if profilable(r) is None]
        if not chosen:
            raise NotProfilable(f"run {summary.run_id} has no natively measured combination to profile")
        return chosen
    for result in summary.results:
        if result.combo_key == combo_key:
            why = profilable(result)
            if why:
                raise NotProfilable(f"combination {combo_key} cannot be profiled: {why}")
            return [result]
    for failure in summary.failures:
        if failure.combo_key == combo_key:
            raise NotProfilable(f"combination {combo_key} failed ({failure.reason}): there is nothing to profile")
    raise NotProfilable(f"run {summary.run_id} has no combination {combo_key}")


def profile_tables(profiles: list[dict], trace_url=lambda profile: None) -> list[dict]:
    """One table per (hardware, batch, memory) of the given stored profiles (`CombinationProfile`
    documents): `title`, `optimizers` (each with its p50s, trace link and top operators) and
    `rows` (`core.profiles.side_by_side`)."""
    groups: dict[str, list[dict]] = {}
    for profile in profiles:
        hardware, _, batch, memory = profile["label"].split("/")
        groups.setdefault(f"{hardware}/{batch}/{memory}", []).append(profile)
    tables = []
    for title, members in groups.items():
        members = sorted(members, key=lambda p: p["optimizer"])
        tables.append(
            {
                "title": title,
                "optimizers": [
                    {
                        "optimizer": p["optimizer"],
                        "combo_key": p["combo_key"],
                        "run_id": p["run_id"],
                        "unprofiled_p50_ms": p["unprofiled_p50_ms"],
                        "profiled_p50_ms": p["profiled_p50_ms"],
                        "trace": trace_url(p),
                        "trace_note": p.get("trace_note"),
                        "profiled_at": p.get("profiled_at"),
                        "top": p["operators"][:TOP_OPERATORS],
                    }
                    for p in members
                ],
                "rows": side_by_side({p["optimizer"]: p["operators"] for p in members}),
            }
        )
    return tables


def print_profile_tables(tables: list[dict], console) -> None:
    """The side-by-side tables on a rich console."""
    from rich.table import Table

    for entry in tables:
        optimizers = [o["optimizer"] for o in entry["optimizers"]]
        table = Table(title=f"{entry['title']}: where the time goes (ms per inference, share)")
        table.add_column("group")
        for optimizer in optimizers:
            table.add_column(optimizer)
        for row in entry["rows"]:
            cells = []
            for optimizer in optimizers:
                cell = row["optimizers"][optimizer]
                cells.append(
                    f"{cell['total_ms']:.2f} ({cell['share']:.0%}) {cell['top'] or ''}".strip()
                    if cell["total_ms"]
                    else "-"
                )
            table.add_row(row["group"], *cells)
        table.add_row(
            "p50 unprofiled / profiled",
            *(f"{o['unprofiled_p50_ms']:.2f} / {o['profiled_p50_ms']:.2f} ms" for o in entry["optimizers"]),
        )
        console.print(table)
        for o in entry["optimizers"]:
            top = ", ".join(
                f"{r['op_type']}{'' if r['name'] == r['op_type'] else ' ' + r['name']} "
                f"{r['total_ms']:.2f} ms x{r['calls']:g}"
                for r in o["top"]
            )
            note = f" ({o['trace_note']})" if o["trace_note"] else ""
            console.print(
                f"  {o['optimizer']}: trace {o['trace']}{note}; top: {top}",
                markup=False,
                soft_wrap=True,
            )
