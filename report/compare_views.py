"""A comparison of two runs (`report/compare.py`) rendered: a `rich` table for the terminal and
Markdown for a pull request's comment; with a gate's verdict when there is one. Nothing here prints."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from report.compare import FIGURES, WITHIN_NOISE, Comparison, FigureChange, GateResult

WORSE = {figure.worse for figure in FIGURES}
BETTER = {figure.better for figure in FIGURES}


def _number(figure: str, value: float | None) -> str:
    if value is None:
        return "-"
    if figure in ("agreement", "cost_per_million_usd"):
        return f"{value:.4f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def change_text(change: FigureChange) -> str:
    """`+30.6 % (+-5.9 %)`: the change and the noise band it is judged against."""
    if change.change is None:
        return ""
    if change.change_pct is not None:
        return f"{change.change_pct:+.1f} % (±{change.noise:.1f} %)"
    return f"{change.change:+.4f} (±{change.noise:.4f})"


def _style(verdict: str) -> str:
    return "red" if verdict in WORSE else "green" if verdict in BETTER else "dim"


def comparison_table(comparison: Comparison) -> Group:
    """The terminal's view: what differs between the runs, one row per matched combination
    (each figure: A -> B, the change, its noise band, the verdict), and what only one run has."""
    parts: list = [Text(f"run {comparison.run_b} against run {comparison.run_a}", style="bold")]
    if comparison.differences:
        differs = Table(title="what differs", title_justify="left")
        for title in ("", "A", "B"):
            differs.add_column(title)
        for difference in comparison.differences:
            differs.add_row(difference.what, difference.a, difference.b)
        parts.append(differs)
    table = Table(title="combinations (A -> B, change ±noise at 95 %, verdict)", title_justify="left")
    table.add_column("combination", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    for figure in FIGURES:
        table.add_column(figure.title)
    for combination in comparison.combinations:
        cells = []
        for figure in FIGURES:
            change = combination.figures[figure.key]
            cell = Text(f"{_number(figure.key, change.a)} → {_number(figure.key, change.b)}")
            if change.change is not None:
                cell.append(f"\n{change_text(change)}\n")
                cell.append(change.verdict, style=_style(change.verdict))
            cells.append(cell)
        table.add_row(
            Text(combination.combination + "".join(f"\n({note})" for note in combination.notes)),
            Text(combination.verdict, style=_style(combination.verdict)),
            *cells,
        )
    parts.append(table)
    for name, labels in (("only in A", comparison.only_in_a), ("only in B", comparison.only_in_b)):
        if labels:
            parts.append(Text(f"{name} (not compared): {', '.join(labels)}"))
    parts.append(Text(comparison.noise, style="dim"))
    return Group(*parts)


def gate_text(result: GateResult) -> Text:
    if not result.compared:
        return Text("gate: no combination measured in both runs: nothing compared", style="red")
    if result.passed:
        text = Text(f"gate passed: none of {result.compared} combinations regresses\n", style="green")
    else:
        text = Text(f"gate failed: {len(result.regressions)} regression(s)\n", style="red")
    for regression in result.regressions:
        text.append(f"  {regression.combination}: {regression.reason}\n")
    for line in confirmation_lines(result):
        text.append(f"  {line}\n", style="dim")
    return text


def confirmation_lines(result: GateResult) -> list[str]:
    """What the confirmation cleared, and the combinations it could not measure side by side."""
    lines = [f"not a regression: {r.combination}: {r.reason}" for r in result.unconfirmed]
    lines += [f"{p.combination}: not confirmed side by side ({p.unavailable})" for p in result.paired if p.unavailable]
    return lines


def _cell(figure: str, change: FigureChange) -> str:
    shown = f"{_number(figure, change.a)} → {_number(figure, change.b)}"
    if change.change is None:
        return shown
    verdict = change.verdict if change.verdict == WITHIN_NOISE else f"**{change.verdict}**"
    return f"{shown} ({change_text(change)}, {verdict})"


def comparison_markdown(comparison: Comparison, result: GateResult | None = None) -> str:
    """Markdown for a pull request's comment: the gate's verdict first (if any), what differs,
    the table, what only one run has, how noise is judged."""
    lines = [f"### AYCI: run `{comparison.run_b}` against `{comparison.run_a}`", ""]
    if result is not None:
        if result.passed and result.compared:
            lines.append(f"✅ **No regression** in {result.compared} combinations.")
        elif not result.compared:
            lines.append("⚠️ **Nothing compared**: no combination was measured in both runs.")
        else:
            lines.append(f"❌ **{len(result.regressions)} regression(s)**:")
            lines += [f"- `{r.combination}`: {r.reason}" for r in result.regressions]
        lines += [f"- {line}" for line in confirmation_lines(result)]
        lines.append("")
    if comparison.differences:
        lines += ["| what differs | A | B |", "|---|---|---|"]
        lines += [f"| {d.what} | {d.a} | {d.b} |" for d in comparison.differences]
        lines.append("")
    lines.append("| combination | verdict | " + " | ".join(f.title for f in FIGURES) + " |")
    lines.append("|---" * (len(FIGURES) + 2) + "|")
    for combination in comparison.combinations:
        cells = [_cell(f.key, combination.figures[f.key]) for f in FIGURES]
        verdict = combination.verdict if combination.verdict == WITHIN_NOISE else f"**{combination.verdict}**"
        lines.append(f"| `{combination.combination}` | {verdict} | " + " | ".join(cells) + " |")
    lines.append("")
    for name, labels in (("Only in A", comparison.only_in_a), ("Only in B", comparison.only_in_b)):
        if labels:
            lines.append(f"{name} (not compared): " + ", ".join(f"`{label}`" for label in labels))
    lines.append(f"<sub>Changes are B against A, ± the noise band at 95 %; {comparison.noise}.</sub>")
    return "\n".join(lines) + "\n"
