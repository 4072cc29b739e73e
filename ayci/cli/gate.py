"""`ayci gate --baseline FILE|RUN_ID RUN_ID`: exit 1 when a combination of the run regresses
against the baseline beyond the thresholds AND beyond noise (`report/compare.py gate`), 0 when
nothing regresses, 2 on an error (no such run, nothing compared). Prints the comparison (table,
Markdown for a pull request's comment, or JSON) and which combinations regress, by how much."""

from __future__ import annotations

import argparse

from ayci.cli.compare import add_output_options, compared, show
from ayci.cli.console import UsageError, err

EXIT_PASSED, EXIT_REGRESSED = 0, 1


def percent(text: str) -> float:
    """`10%`, `10` -> 10.0 (a percentage)."""
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a percentage like 10% is wanted, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a percentage of at least 0 is wanted, got {text!r}")
    return value


def register(sub) -> None:
    gate = sub.add_parser(
        "gate", help="exit 1 when a run regresses against a baseline beyond thresholds and noise (for CI)"
    )
    gate.add_argument("run_id", help="the run to judge")
    gate.add_argument("--baseline", required=True, help="a baseline file (`ayci baseline`) or a run id")
    gate.add_argument("--max-p99-regression", type=percent, default=10.0, help="largest p99 increase (default 10%%)")
    gate.add_argument("--max-cost-regression", type=percent, default=5.0, help="largest cost increase (default 5%%)")
    gate.add_argument(
        "--min-agreement", type=float, help="lowest agreement allowed (default: the run's own --min-agreement)"
    )
    gate.add_argument(
        "--confirm",
        type=int,
        default=0,
        metavar="N",
        help="re-measure regressed combinations N times before failing (not implemented yet: refused)",
    )
    add_output_options(gate)
    gate.set_defaults(func=cmd_gate)


def cmd_gate(args: argparse.Namespace) -> int:
    from report.compare import Thresholds, gate

    if args.confirm:
        raise UsageError(
            "--confirm is not implemented yet: re-measure with `ayci replay RUN_ID --force` and gate again"
        )
    comparison, summary = compared(args, args.baseline, args.run_id)
    if not comparison.combinations:
        show(comparison, args.format)
        raise UsageError(f"no combination of run {args.run_id} was measured in the baseline: nothing to gate")
    minimum = args.min_agreement if args.min_agreement is not None else summary.request.get("min_agreement")
    thresholds = Thresholds(
        max_p99_regression_pct=args.max_p99_regression,
        max_cost_regression_pct=args.max_cost_regression,
        min_agreement=minimum,
    )
    result = gate(comparison, thresholds)
    show(comparison, args.format, result)
    if not result.passed:
        err.print(
            f"gate: {len(result.regressions)} regression(s) in "
            f"{len({r.combination for r in result.regressions})} of {result.compared} combinations",
            highlight=False,
        )
    return EXIT_PASSED if result.passed else EXIT_REGRESSED
