"""`ayci compare RUN_A RUN_B`: two finished runs (or a pinned baseline file and a run) compared
combination by combination (`report/compare.py`): the change of each figure and a verdict,
faster, slower or within noise; what differs between the runs. `ayci baseline RUN_ID --out FILE`
pins a run as a baseline (its summary and the history of its combinations)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ayci.cli.common import archived_summary, settings_of
from ayci.cli.console import UsageError, err, terminal
from ayci.cli.options import DATA_DIR_HELP

FORMATS = ("table", "markdown", "json")
TABLE_WIDTH = 180


def register(sub) -> None:
    compare = sub.add_parser(
        "compare", help="two finished runs compared: each combination's change, faster, slower or within noise"
    )
    compare.add_argument("run_a", help="the run (or a baseline file from `ayci baseline`) compared against")
    compare.add_argument("run_b", help="the run compared")
    add_output_options(compare)
    compare.set_defaults(func=cmd_compare)

    baseline = sub.add_parser("baseline", help="pin a finished run as a baseline file, for `ayci gate`")
    baseline.add_argument("run_id")
    baseline.add_argument("--out", required=True, help="the file to write, e.g. baseline.json")
    baseline.add_argument("--data-dir", help=DATA_DIR_HELP)
    baseline.set_defaults(func=cmd_baseline)


def add_output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=FORMATS, default="table", help="table (default), markdown or json")
    parser.add_argument("--data-dir", help=DATA_DIR_HELP)


def side(store, reference: str, settings):
    """A run's summary and the history of its combinations: from a baseline file when
    `reference` names one, else from the store (a UsageError if the run is not archived)."""
    from report.compare import Baseline, stored_history
    from schemas.events import SchemaError

    path = Path(reference)
    if path.suffix == ".json" or path.is_file():
        try:
            baseline = Baseline.read(path.read_bytes())
            return baseline.run_summary(), baseline.history
        except FileNotFoundError:
            raise UsageError(f"{path}: no such baseline file") from None
        except SchemaError as exc:
            raise UsageError(
                f"{path} is not a baseline (`ayci baseline RUN_ID --out FILE` writes one): {exc}"
            ) from None
    summary = archived_summary(store, reference, settings)
    return summary, stored_history(store, [summary])


def compared(args: argparse.Namespace, reference_a: str, reference_b: str):
    """The comparison of B against A, B's and A's summaries, and the history it was judged on."""
    from ayci.bootstrap import local_store
    from report.compare import compare

    settings = settings_of(args)
    store = local_store(settings)
    a, history_a = side(store, reference_a, settings)
    b, history_b = side(store, reference_b, settings)
    history = merged(history_a, history_b)
    return compare(a, b, history), b, a, history


def merged(first: dict, second: dict) -> dict:
    """Two histories as one: a combination in both keeps each measurement once, oldest first."""
    history = {**first, **second}
    for key in first.keys() & second.keys():
        points = {p.run_id: p for p in [*first[key], *second[key]]}
        history[key] = sorted(points.values(), key=lambda p: p.measured_at or "")
    return history


def show(comparison, output_format: str, result=None) -> None:
    from report.compare_views import comparison_markdown, comparison_table, gate_text

    if output_format == "json":
        document = comparison.as_dict()
        if result is not None:
            document["gate"] = result.as_dict()
        terminal.print_json(document)
    elif output_format == "markdown":
        terminal.print(comparison_markdown(comparison, result))
    else:
        console = terminal.out(TABLE_WIDTH)
        console.print(comparison_table(comparison))
        if result is not None:
            console.print(gate_text(result))


def cmd_compare(args: argparse.Namespace) -> int:
    show(compared(args, args.run_a, args.run_b)[0], args.format)
    return 0


def cmd_baseline(args: argparse.Namespace) -> int:
    from ayci.bootstrap import local_store
    from report.compare import Baseline, stored_history

    settings = settings_of(args)
    store = local_store(settings)
    summary = archived_summary(store, args.run_id, settings)
    baseline = Baseline.pin(summary, stored_history(store, [summary]))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(baseline.to_bytes(indent=1))
    measured = sum(1 for r in summary.results if not r.predicted)
    err.print(
        f"run {args.run_id} pinned to {out}: {measured} measured combinations, "
        f"{sum(len(v) for v in baseline.history.values())} stored measurements of them",
        highlight=False,
        soft_wrap=True,
    )
    return 0
