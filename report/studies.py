"""What the CLI prints of the studies of a finished run, as `rich` renderables: its
combinations under a traffic profile (`ayci traffic`), the cold-start levers (`ayci
coldstart`), a load test beside its simulation (`ayci loadtest`), a capacity search (`ayci capacity`)."""

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
        "throttled",
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
                f"{option.get('throttled_share', 0.0):.2%}",
                f"{option['p50_ms']:.1f}",
                f"{option['p99_ms']:.1f}",
                f"{option['p999_ms']:.1f}",
                str(option["peak_instances"]),
                f"{option['bill_usd']:.2f}",
                note,
            )
    slo = f"p99 with cold starts within {slo_ms:g} ms" if slo_ms else "no SLO given"
    rule = f" [{report['pick_rule']}]" if report.get("pick_rule") else ""
    return [table, Text(f"cheapest ({slo}){rule}: {report['recommended'] or 'none meets it'}")]


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
    "cold starts",
    "peak workers",
)


def _loadtest_row(label: str, figures: dict, requests: int, errors: str, cold: str, peak: str) -> list[str]:
    return [
        label,
        str(requests),
        errors,
        *(f"{figures[f'p{p}_ms']:.1f}" for p in (50, 90, 95, 99)),
        f"{figures['cold_share']:.2%}",
        cold,
        peak,
    ]


def loadtest_view(report: dict, samples: list[dict], files: str) -> list[RenderableType]:
    """Per model: the open-loop load test beside the simulation of the same arrivals fed this
    machine's calibration (judged: pass or fail, figure by figure, with both values) and fed the
    run's stored measurement (shown, not judged); the calibration, the generator's lag, time queued
    against computing, the workers each second; where the files are."""
    out: list[RenderableType] = []
    for name, row in report["models"].items():
        seen, guess, stored = row["observed"], row["predicted"], row.get("from_run")
        pool = "Lambda-like pool" if row.get("lambda_like") else "endpoint (not the Lambda pool the simulation models)"
        table = Table(title=f"{name}: {row['combination']} of run {row['run_id']}, {pool}")
        for column in LOADTEST_COLUMNS:
            table.add_column(column)
        errors = ", ".join(f"{n} x {code}" for code, n in seen["errors"].items()) or "0"
        loads = ", ".join(f"{n} {kind}" for kind, n in seen["loads"].items()) or "0"
        table.add_row(
            *_loadtest_row("load test (open loop)", seen, seen["requests"], errors, loads, str(seen["peak_workers"]))
        )
        for label, simulated in (("simulated, fed this machine", guess), ("simulated, fed the run", stored)):
            if simulated:
                table.add_row(
                    *_loadtest_row(
                        label,
                        simulated,
                        simulated["simulated_requests"],
                        "-",
                        str(simulated["cold_starts"]),
                        str(simulated["peak_instances"]),
                    )
                )
        out.append(table)
        out.append(
            Text(
                f"queued p50 {seen['queued']['p50_ms']:.1f} / p99 {seen['queued']['p99_ms']:.1f} ms, computing "
                f"p50 {seen['compute']['p50_ms']:.1f} / p99 {seen['compute']['p99_ms']:.1f} ms; "
                f"{seen['waited_for_load']} requests waited for a cold load"
            )
        )
        comparison = row["comparison"]
        if comparison.get("verdict") is None:
            out.append(Text(f"not compared: {comparison.get('reason')}"))
        else:
            out.append(Text(f"simulation against the load test: {comparison['verdict'].upper()}"))
            for f in comparison["figures"]:
                shown = (lambda v: f"{v:.2%}") if f["figure"] == "cold-start share" else (lambda v: f"{v:.1f} ms")
                ratio = f", {f['ratio']:.2f}x" if f["ratio"] is not None else ""
                out.append(
                    Text(
                        f"  {f['figure']}: observed {shown(f['observed'])}, simulated {shown(f['predicted'])}{ratio} "
                        f"(bound {f['bound']}): {'pass' if f['passed'] else 'FAIL'}"
                    )
                )
        fed = (guess or {}).get("fed")
        if fed:
            out.append(
                Text(
                    f"fed: service p50 {fed['service_p50_ms']:.2f} ms / p99 {fed['service_p99_ms']:.2f} ms, cold start "
                    f"{fed['cold_start_ms']:.0f} ms, overhead p50 {fed['overhead_p50_ms']:.2f} ms, idle timeout "
                    f"{fed['idle_timeout_s']:g} s, at most {fed['max_instances']} instances"
                    + (
                        f"; arrivals as the pool saw them, each after its own time in the front end (p50 "
                        f"{fed['front_p50_ms']:.2f} ms, p99 {fed['front_p99_ms']:.2f} ms)"
                        if fed.get("front_p50_ms") is not None
                        else ""
                    )
                )
            )
    generator = report.get("generator") or {}
    if generator.get("send_lag_p99_ms") is not None:
        machine = report.get("machine") or {}
        load = (
            f"; {machine['cores']} cores, load average {machine['load_before'][0]:.1f}"
            f" -> {machine['load_after'][0]:.1f}"
            if machine
            else ""
        )
        out.append(
            Text(
                f"generator: {generator['requests']} requests sent, lag behind schedule p50 "
                f"{generator['send_lag_p50_ms']:.1f} ms, p99 {generator['send_lag_p99_ms']:.1f} ms{load}"
            )
        )
    for name in report["models"]:
        per_second = [
            s["models"][name]["workers"] + s["models"][name]["starting"] for s in samples[::4] if name in s["models"]
        ]
        out.append(Text(f"{name} workers, each second: {' '.join(map(str, per_second))}"))
    out.append(Text(files))
    return out


CAPACITY_COLUMNS = (
    "req/s offered",
    "counted",
    "answers/s",
    "errors",
    "p50 ms",
    "p90 ms",
    "p95 ms",
    "p99 ms",
    "queued ms",
    "computing ms",
    "other ms",
    "simulated p50 / p99 ms",
    "p99 SLO",
)


def capacity_level_line(row: dict, slo_ms: float) -> str:
    """One level as it is measured (the CLI's progress)."""
    seen = row["measured"]
    errors = sum(seen["errors"].values())
    return (
        f"level {row['level'] + 1}: {seen['rps']:.4g} req/s: p50 {seen['p50_ms']:.1f}, p90 {seen['p90_ms']:.1f}, "
        f"p95 {seen['p95_ms']:.1f}, p99 {seen['p99_ms']:.1f} ms, {seen['throughput_rps']:.3g} answers/s, "
        f"{errors} errors: {'within' if seen['within_slo'] else 'breaks'} the {slo_ms:g} ms SLO"
    )


def capacity_view(report: dict) -> list[RenderableType]:
    """`ayci capacity`: each level by rate (p50/p90/p95/p99 from the scheduled time, throughput,
    errors, mean time queued against computing, the simulation of the same arrivals), the highest
    rate within the SLO, measured and simulated, and where the files are."""
    slo = report["plan"]["slo_ms"]
    table = Table(title=f"capacity of {report['combination']} (run {report['run_id']}), p99 SLO {slo:g} ms")
    for column in CAPACITY_COLUMNS:
        table.add_column(column, justify="left" if column == "p99 SLO" else "right")

    def ms(value) -> str:
        return "-" if value is None or value != value else f"{value:.1f}" if value >= 10 else f"{value:.2f}"

    for row in sorted(report["levels"], key=lambda r: r["measured"]["rps"]):
        seen, sim = row["measured"], row["simulated"]
        errors = ", ".join(f"{n} x {kind}" for kind, n in seen["errors"].items()) or "0"
        table.add_row(
            f"{seen['rps']:.4g}",
            str(seen["requests"]),
            f"{seen['throughput_rps']:.3g}",
            errors,
            *(ms(seen[k]) for k in ("p50_ms", "p90_ms", "p95_ms", "p99_ms", "queued_ms", "computing_ms", "other_ms")),
            f"{ms(sim['p50_ms'])} / {ms(sim['p99_ms'])}",
            "within" if seen["within_slo"] else "broken",
        )
    lines: list[RenderableType] = [table]
    for row in sorted(report["levels"], key=lambda r: r["measured"]["rps"]):
        notes = row["measured"]["notes"] + [f"simulation: {note}" for note in row["simulated"]["notes"]]
        if notes:
            lines.append(Text(f"  {row['measured']['rps']:.4g} req/s: {', '.join(notes)}"))
    capacity, (_, broke) = report["capacity_rps"], report["bracket"]
    above = f" ({broke:.4g} req/s broke it)" if broke else " (the highest rate tried)"
    lines.append(
        Text(
            f"capacity: {capacity:.4g} req/s with p99 within {slo:g} ms{above}"
            if capacity
            else f"capacity: none: even {broke:.4g} req/s broke the {slo:g} ms SLO"
        )
    )

    first_broken = min(
        (r["measured"] for r in report["levels"] if not r["measured"]["within_slo"]),
        key=lambda m: m["rps"],
        default=None,
    )
    if first_broken and first_broken["queued_ms"] is not None:
        parts = {k: first_broken[f"{k}_ms"] for k in ("queued", "computing", "other")}
        lines.append(
            Text(
                f"where the time went at {first_broken['rps']:.4g} req/s (the lowest rate that broke it), mean per "
                "answer: "
                + ", ".join(f"{k} {v:.1f} ms" for k, v in parts.items())
                + f" (of which the load generator's own lag: p99 {first_broken['send_lag_p99_ms'] or 0:.1f} ms)"
            )
        )

    def rate(value) -> str:
        return f"{value:.4g} req/s" if value else "none within the SLO"

    fed = report["fed"]
    lines.append(
        Text(
            f"simulated: {rate(report['simulated_capacity_rps'])}, fed this machine's calibration (service p50 "
            f"{fed['service_p50_ms']:.2f} / p99 {fed['service_p99_ms']:.2f} ms, cold start {fed['cold_start_ms']:.0f} "
            f"ms, overhead p50 {fed['overhead_p50_ms']:.2f} / p99 {fed['overhead_p99_ms']:.2f} ms, "
            f"{_workers(fed['max_workers'])} at most); fed the run's stored measurement: "
            f"{rate(report['simulated_from_run_capacity_rps'])}"
        )
    )
    endpoint = report["endpoint"]
    lines.append(
        Text(
            f"endpoint: {'Lambda-like, ' if endpoint.get('lambda_like') else ''}up to "
            f"{_workers(endpoint['max_workers'])}, {endpoint['max_queue']} queued at most (beyond: 503); "
            "latency from each request's scheduled time (open loop); queued: in the model's queue, "
            "computing: in its worker, other: HTTP and serialization"
        )
    )
    files = report["files"]
    lines.append(Text(f"levels: {files['csv']}  plot: {files['plot']}  requests: {files['requests']}"))
    return lines


def _workers(count: int) -> str:
    return f"{count} worker{'s' if count != 1 else ''}"
