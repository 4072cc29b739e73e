"""What the CLI prints about a run, as `rich` renderables: the results table and the
recommendation, a run's plan, a model's signature. The CLI prints them; nothing here prints
but `print_report`.

Combination labels never break (their column does not wrap and is as wide as the longest
label); a column with nothing to show in any row (the prediction interval when nothing is
predicted, costs when nothing is costed) is left out."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from report.render import check_lines, picks
from report.table import COLUMNS, as_summary, format_cell, summary_rows

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from core.planning import Plan
    from schemas.documents import RunSummary, TableRow
    from schemas.signature import ModelSignature

ALWAYS_SHOWN = ("combination", "status")
STATUS_WORDS = ("measured", "predicted", "failed", "skipped")


def label_column(table: Table, title: str, labels: list[str]) -> None:
    """A column of labels (combinations, status words): never wrapped, folded or shortened."""
    table.add_column(title, no_wrap=True, overflow="ignore", min_width=max([len(title), *map(len, labels)]))


def results_table(summary: RunSummary | dict) -> Table:
    """The run's table: one row per combination (`report.table.summary_rows`), the columns
    with something to show; a note every row has is said once, under the table."""
    summary = as_summary(summary)
    rows = summary_rows(summary)
    shared = shared_notes(rows)
    cells = [{key: row.cell(key) for key, _ in COLUMNS} for row in rows]
    for row, row_cells in zip(rows, cells, strict=True):
        row_cells["note"] = ", ".join(n for n in _note_parts(row) if n not in shared)
    columns = [
        (key, title)
        for key, title in COLUMNS
        if key in ALWAYS_SHOWN or any(row_cells[key] not in (None, "") for row_cells in cells)
    ]
    table = Table(title=f"run {summary.run_id}: {summary.status}")
    for key, title in columns:
        if key == "combination":
            label_column(table, title, [row.combination for row in rows])
        elif key == "status":
            label_column(table, title, list(STATUS_WORDS))
        else:
            table.add_column(title, overflow="fold")
    for row_cells in cells:
        table.add_row(*(format_cell(key, row_cells[key]) for key, _ in columns))
    if shared:
        table.caption = "every row: " + ", ".join(shared)
        table.caption_justify = "left"
    return table


def _note_parts(row: TableRow) -> list[str]:
    return [part for part in (row.cell("note") or "").split(", ") if part]


def shared_notes(rows: list[TableRow]) -> list[str]:
    """Notes every row of a table of several has (say, what agreement rests on): said once,
    under the table, rather than on every row."""
    if len(rows) < 2:
        return []
    first, *others = (_note_parts(row) for row in rows)
    return [note for note in first if all(note in parts for parts in others)]


def recommendation_lines(summary: RunSummary | dict) -> list[Text]:
    """The recommendation under the table: each pick (with its margin over the next where a race gave one,
    `core/racing.margins`), the Pareto front, what checking the predicted picks found, what was not recommended and
    why."""
    rec = as_summary(summary).recommendation
    margins = (getattr(rec, "margins", None) or {}) if rec else {}
    lines = [margins.get(kind) or f"{kind}: {label or 'none qualifies'}" for kind, label in picks(rec)]
    if rec and rec.pareto:
        lines.append(f"pareto front (p99 against cost): {', '.join(rec.pareto)}")
    lines += check_lines(rec)
    lines += [f"  not recommended {label}: {why}" for label, why in (rec.excluded if rec else {}).items()]
    return [Text(line) for line in lines]


def print_report(summary: RunSummary | dict, console: Console) -> None:
    """The table and the recommendation on a `rich` console (the CLI)."""
    summary = as_summary(summary)
    console.print(results_table(summary))
    for line in recommendation_lines(summary):
        console.print(line)


def plan_view(plan: Plan, title: str) -> list[RenderableType]:
    """`ayci plan`: each combination's state (reused, to measure with its estimates, impossible
    with the reason), then the totals and what the run would cost."""
    table = Table(title=title)
    label_column(table, "combination", [c.combo.label for c in plan.combos])
    for column in ("state", "conversion s", "measuring s", "reason", "Lambda"):
        table.add_column(column, overflow="fold")
    for c in plan.combos:
        fit = c.lambda_fit  # Lambda's rules before measuring: the package, the rules broken
        table.add_row(
            c.combo.label,
            c.state,
            f"{c.conversion_s:.0f}" if c.state == "measure" else "",
            f"{c.measurement_s:.0f}" if c.state == "measure" else "",
            escape(c.reason or ""),
            escape("; ".join([fit.summary(), *(f"breaks: {b}" for b in fit.broken)])) if fit else "",
        )
    totals = plan.as_dict()["totals"]
    predicted = f", predicted {totals['predicted']} (a predicted pick is measured too)" if totals["predicted"] else ""
    return [
        table,
        Text(
            f"to measure {totals['to_measure']}, reused {totals['reused']}, impossible {totals['impossible']}"
            f"{predicted}; breaking Lambda's rules {totals['breaking_lambda_rules']} (never recommended); "
            f"estimated wall time {totals['estimated_wall_s'] / 60:.1f} min; "
            f"measuring as Lambda invocations ≈ ${totals['estimated_benchmark_cost_usd']:.4f}"
        ),
        Text(
            f"on the AWS deployment (python -m infra deploy), this run ≈ ${plan.aws_run_cost_usd:.4f} "
            "(measuring functions, the inference functions waiting for them, conversions)"
        ),
    ]


def signature_view(signature: ModelSignature, name: str) -> list[RenderableType]:
    """`ayci inspect`: a model's inputs and outputs, its dynamic dims and its problems."""
    table = Table(title=f"{name}: {signature.format}{', external data' if signature.external_data else ''}")
    for column in ("", "name", "dtype", "dims", "passed"):
        table.add_column(column)
    for side, specs in (("input", signature.inputs), ("output", signature.outputs)):
        for spec in specs:
            table.add_row(side, escape(spec.name), spec.dtype, escape(spec.shape_text()), spec.kind or "")
    lines: list[RenderableType] = [table]
    lines += [Text(f"dynamic dim {dim}: {allowed.text()}") for dim, allowed in signature.dim_ranges.items()]
    lines += [Text(problem, style="yellow") for problem in signature.problems]
    return lines
