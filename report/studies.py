"""What the CLI prints of the studies of a finished run, as `rich` renderables: its
combinations under a traffic profile (`ayci traffic`), the cold-start levers (`ayci
coldstart`), a load test beside its simulation (`ayci loadtest`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

from report.terminal import label_column

if TYPE_CHECKING:
    from rich.console import RenderableType


def traffic_view(report: dict, title: str, days: float, slo_ms: float | None) -> list[RenderableType]:
    """Each combination's ways of serving the traffic (on demand, provisioned, SnapStart): cold
    share, latencies with cold starts, peak instances, the bill; then the cheapest meeting the SLO."""
    table = Table(title=title)
    label_column(table, "combination", [row["combination"] for row in report["rows"]])
    for column in (
        "served",
        "cold share",
        "p50 ms",
        "p99 ms",
        "p99.9 ms",
        "peak instances",
        f"bill ({days:g} d) $",
        "note",
    ):
        table.add_column(column)
    for row in report["rows"]:
        for i, option in enumerate(row["options"]):
            note = ", ".join(
                (["predicted"] if row["predicted"] else [])
                + (row["notes"] if i == 0 else [])
                + ([option["assumption"]] if "assumption" in option else [])
            )
            table.add_row(
                row["combination"] if i == 0 else "",
                option["option"],
                f"{option['cold_share']:.2%}",
                f"{option['p50_ms']:.1f}",
                f"{option['p99_ms']:.1f}",
                f"{option['p999_ms']:.1f}",
                str(option["peak_instances"]),
                f"{option['bill_usd']:.2f}",
                note,
            )
    slo = f"p99 with cold starts within {slo_ms:g} ms" if slo_ms else "no SLO given"
    return [table, Text(f"cheapest ({slo}): {report['recommended'] or 'none meets it'}")]


COLDSTART_COLUMNS = (
    "variant",
    "cold start ms",
    "saved ms",
    "process",
    "imports",
    "model load",
    "first inference",
    "peak MB",
    "p50 ms",
    "note",
)


def coldstart_tables(report: dict[str, list[dict]], repeat: int) -> list[Table]:
    """One table per combination: each lever's cold start (split), what it saved, peak memory, p50."""
    tables = []
    for label, rows in report.items():
        table = Table(title=f"{label}: cold-start levers (medians of {repeat})")
        for column in COLDSTART_COLUMNS:
            table.add_column(column)
        for row in rows:
            if "failed" in row:
                table.add_row(row["variant"], *["-"] * 8, f"failed: {row['failed']}")
                continue
            cold = row["cold_start_ms"]
            table.add_row(
                row["variant"],
                f"{cold['total']:.0f}",
                f"{row['cold_start_saved_ms']:+.0f}",
                f"{cold['process_start']:.0f}",
                f"{cold['imports']:.0f}",
                f"{cold['model_load']:.0f}",
                f"{cold['first_inference']:.0f}",
                f"{row['peak_mb']:.0f}",
                f"{row['p50_ms']:.2f}",
                f"made in {row['prepare_s']:.1f} s at conversion" if row["prepare_s"] else "",
            )
        tables.append(table)
    return tables


LOADTEST_COLUMNS = (
    "",
    "requests",
    "errors",
    "p50 ms",
    "p90 ms",
    "p95 ms",
    "p99 ms",
    "cold share",
    "cold loads",
    "evictions",
    "peak workers",
)
VERDICT = {True: "within", False: "outside", None: "not compared"}


def loadtest_view(
    report: dict, samples: list[dict], max_workers: int, tolerance: float, files: str
) -> list[RenderableType]:
    """Per model: what the load test observed beside the simulation of the same arrivals (at
    most `max_workers` workers, and as a Lambda pool), whether it agrees within `tolerance` and
    why not; the workers each second; where the files are."""
    out: list[RenderableType] = []
    for name, row in report["models"].items():
        seen, guess = row["observed"], row["predicted"] or {}
        table = Table(title=f"{name}: {row['combination']} of run {row['run_id']}")
        for column in LOADTEST_COLUMNS:
            table.add_column(column)
        errors = ", ".join(f"{n} x {code}" for code, n in seen["errors"].items()) or "0"
        loads = ", ".join(f"{n} {kind}" for kind, n in seen["loads"].items()) or "0"
        table.add_row(
            "load test",
            str(seen["requests"]),
            errors,
            f"{seen['p50_ms']:.1f}",
            f"{seen['p90_ms']:.1f}",
            f"{seen['p95_ms']:.1f}",
            f"{seen['p99_ms']:.1f}",
            f"{seen['cold_share']:.2%}",
            loads,
            str(seen["evictions"]),
            str(seen["peak_workers"]),
        )
        if guess:
            table.add_row(
                f"simulated, at most {max_workers} workers",
                str(guess["simulated_requests"]),
                "-",
                f"{guess['p50_ms']:.1f}",
                f"{guess['p90_ms']:.1f}",
                f"{guess['p95_ms']:.1f}",
                f"{guess['p99_ms']:.1f}",
                f"{guess['cold_share']:.2%}",
                str(guess["cold_starts"]),
                "-",
                f"{guess['peak_instances']}",
            )
            lam = guess["lambda"]
            table.add_row(
                "simulated Lambda pool",
                str(guess["simulated_requests"]),
                "-",
                f"{lam['p50_ms']:.1f}",
                "-",  # the Lambda pool's simulation keeps p50, p99 and p99.9
                "-",
                f"{lam['p99_ms']:.1f}",
                f"{lam['cold_share']:.2%}",
                "-",
                "-",
                f"{lam['peak_instances']} instances",
            )
        out.append(table)
        out.append(Text(f"{seen['waited_for_load']} requests waited for a cold load ({seen['waited_share']:.2%})"))
        comparison = row["comparison"]
        if guess:
            verdict = f" ({comparison['verdict']})" if comparison.get("verdict") else ""
            out.append(
                Text(
                    f"p99 {VERDICT[comparison['p99_within']]} ±{tolerance:.0%} of the prediction (at most "
                    f"{max_workers} workers), cold-start share {VERDICT[comparison['cold_share_within']]}{verdict}"
                )
            )
        out += [Text(f"  - {reason}") for reason in comparison.get("explained", [])]
        out += [Text(f"  - not explained: {gap}") for gap in comparison.get("unexplained", [])]
    for name in report["models"]:
        per_second = [
            s["models"][name]["workers"] + s["models"][name]["starting"] for s in samples[::4] if name in s["models"]
        ]
        out.append(Text(f"{name} workers, each second: {' '.join(map(str, per_second))}"))
    out.append(Text(files))
    return out
