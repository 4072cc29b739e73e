"""`ayci gate --baseline FILE|RUN_ID RUN_ID|run options`: exit 1 when a combination of the run regresses
against the baseline beyond the thresholds AND beyond noise (`report/compare.py gate`), 0 when
nothing regresses, 2 on an error (no such run, nothing compared). Prints the comparison (table,
Markdown for a pull request's comment, or JSON) and which combinations regress, by how much.
With `--confirm N` the suspected combinations (those whose change could pass a threshold) are
measured again now, side by side: the baseline's artifact and the run's interleaved in one
confined process, N rounds (`ayci/paired.py`), judged on the paired ratio's interval; where the
baseline's artifact is not in this store, the regressed ones are re-measured alone N times (a
forced replay of their conversions) and judged on the median of the run and them.

Without RUN_ID the run is measured first, here, from the run options (`--model`, `--matrix`,
`--batch`, `--memory`, ...: those of `ayci run`), on the embedded default: its progress goes to
stderr, so stdout holds the comparison alone (Markdown for a comment, or JSON). A model unchanged
since the baseline is answered from the stored results (nothing measured twice: `--force` to
measure again); a run that measured nothing is an error (exit 2)."""

from __future__ import annotations

import argparse
import uuid
from datetime import UTC, datetime

from ayci.cli.common import settings_of
from ayci.cli.compare import add_output_options, compared, merged, show
from ayci.cli.console import UsageError, err, terminal
from ayci.cli.options import add_request_options

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
        "gate",
        help="exit 1 when a run (or one measured now from run options) regresses against a baseline beyond "
        "thresholds and noise (for CI)",
        conflict_handler="resolve",  # the gate's --min-agreement replaces the request's
    )
    gate.add_argument(
        "run_id",
        nargs="?",
        help="the run to judge; without it, a run is measured now from the run options (--model, --matrix, ...)",
    )
    add_request_options(gate)
    gate.add_argument(
        "--force", action="store_true", help="(measuring now) measure again even where results are stored"
    )
    gate.add_argument("--baseline", required=True, help="a baseline file (`ayci baseline`) or a run id")
    gate.add_argument("--max-p99-regression", type=percent, default=10.0, help="largest p99 increase (default 10%%)")
    gate.add_argument("--max-cost-regression", type=percent, default=5.0, help="largest cost increase (default 5%%)")
    gate.add_argument("--max-p50-regression", type=percent, help="largest p50 increase (default: p50 not gated)")
    gate.add_argument(
        "--min-agreement", type=float, help="lowest agreement allowed (default: the run's own --min-agreement)"
    )
    gate.add_argument(
        "--confirm",
        type=int,
        default=0,
        metavar="N",
        help="confirm by N paired rounds: each combination that regresses or could (its change plus its noise "
        "passes a threshold) is measured again now, the baseline's artifact and the run's alternately, and fails "
        "only if the paired ratio's 95 %% interval lies beyond the threshold (6 rounds or more for 95 %%); where "
        "the baseline's artifact is not stored here, the run's regressed combinations are re-measured N times "
        "and judged on their median",
    )
    gate.add_argument(
        "--confirm-time-cap",
        type=float,
        default=None,
        metavar="S",
        help="seconds of timing per side in each paired round (default 1)",
    )
    add_output_options(gate)
    gate.set_defaults(func=cmd_gate)


def cmd_gate(args: argparse.Namespace) -> int:
    from ayci.bootstrap import local_store
    from report.compare import (
        Thresholds,
        compare,
        confirmed,
        gate,
        judged_side_by_side,
        stored_history,
        suspected,
    )

    if args.confirm < 0:
        raise UsageError("--confirm takes a number of re-measurements, at least 0")
    if args.run_id and (args.model or args.inputs or args.force):
        raise UsageError("give a run id or run options (--model, --matrix, ...) to measure one now, not both")
    run_id = args.run_id or measure_run(args)
    comparison, summary, baseline, history = compared(args, args.baseline, run_id)
    if not comparison.combinations:
        show(comparison, args.format)
        raise UsageError(f"no combination of run {run_id} was measured in the baseline: nothing to gate")
    minimum = args.min_agreement if args.min_agreement is not None else summary.request.get("min_agreement")
    thresholds = Thresholds(
        max_p99_regression_pct=args.max_p99_regression,
        max_cost_regression_pct=args.max_cost_regression,
        max_p50_regression_pct=args.max_p50_regression,
        min_agreement=minimum,
    )
    result = gate(comparison, thresholds)
    if args.confirm:
        settings = settings_of(args)
        suspects = suspected(comparison, thresholds)
        paired = confirm_side_by_side(settings, baseline, summary, suspects, args.confirm, args.confirm_time_cap)
        result = judged_side_by_side(comparison, result, paired, thresholds)
        # where the baseline's artifact is not here: the run's regressed combinations re-measured, their median
        regressed = {
            r.combination
            for r in result.regressions
            if r.figure != "agreement" and (r.combination not in paired or paired[r.combination].unavailable)
        }
        if regressed:
            for label in sorted(regressed & paired.keys()):
                err.print(
                    f"gate: {label} not confirmed side by side ({paired[label].unavailable}): the run re-measured "
                    f"{args.confirm} time(s) instead, judged on the median",
                    highlight=False,
                    soft_wrap=True,
                )
            combo_keys = {c.key_b for c in comparison.combinations if c.combination in regressed and c.key_b}
            confirmations = remeasure(settings, run_id, combo_keys, args.confirm, verbose=args.verbose)
            history = merged(history, stored_history(local_store(settings), [summary]))
            comparison = compare(baseline, summary, history, b_repeats=[c.run_id for c in confirmations])
            fallback = confirmed(baseline, summary, confirmations, history, thresholds)
            result = result.model_copy(
                update={
                    "regressions": [r for r in result.regressions if r.combination not in regressed]
                    + [r for r in fallback.regressions if r.combination in regressed],
                    "unconfirmed": result.unconfirmed + [r for r in fallback.unconfirmed if r.combination in regressed],
                    "confirmations": max(result.confirmations, fallback.confirmations),
                }
            )
            result = result.model_copy(update={"passed": not result.regressions})
    show(comparison, args.format, result)
    if not result.passed:
        err.print(
            f"gate: {len(result.regressions)} regression(s) in "
            f"{len({r.combination for r in result.regressions})} of {result.compared} combinations",
            highlight=False,
        )
    return EXIT_PASSED if result.passed else EXIT_REGRESSED


def measure_run(args: argparse.Namespace, parts=None) -> str:
    """Submit the run the options describe on the embedded default and wait for it (progress on
    stderr): its id. `parts` replaces the embedded app's parts (tests: a fake measurement)."""
    from ayci.bootstrap import embedded
    from ayci.cli.common import checked_inputs, model_path_of, submit, warn_if_unconfined, workload_and_size
    from ayci.cli.follow import follow_embedded
    from ayci.cli.runlog import run_log
    from core.run_plan import measured_combos

    settings = settings_of(args)
    workload, input_size = workload_and_size(args)
    inputs_path = checked_inputs(args)
    # the request's minimum agreement (the recommendation's) is the gate's when given, else the default
    request_args = argparse.Namespace(**{**vars(args), "min_agreement": args.min_agreement or 0.99})
    run_id = str(uuid.uuid4())
    with run_log(settings.data_dir.parent / "logs" / f"run-{run_id}.log", terminal, verbose=args.verbose) as log:
        model_path = model_path_of(args, settings, workload, input_size)
        warn_if_unconfined()
        app = embedded(settings, parts=parts)
        model, request = submit(
            app.store, app.publisher, request_args, run_id, model_path, workload, input_size, inputs_path
        )
        what = f"{model_path.name} (sha256 {model.sha256[:12]}), to gate against {args.baseline}"
        summary = follow_embedded(app, run_id, len(measured_combos(request)), what)
    err.print(log.where(), highlight=False, soft_wrap=True)
    if not summary.results:
        reasons = "; ".join(f"{f.label}: {f.reason}" for f in summary.failures[:3])
        raise UsageError(f"run {run_id} measured nothing to gate ({reasons or summary.status})")
    err.print(f"gate: run {run_id} ({summary.status}) judged against {args.baseline}", highlight=False)
    return run_id


def confirm_side_by_side(settings, baseline, summary, labels: list[str], rounds: int, time_cap_s, measure=None) -> dict:
    """The suspected combinations measured now, the baseline's artifact and the run's
    alternately (`ayci/paired.py`), progress on stderr. `measure` replaces the launcher's (tests)."""
    from ayci.bootstrap import local_store
    from ayci.paired import PAIRED_TIME_CAP_S, side_by_side

    if not labels:
        return {}
    err.print(
        f"gate: confirming {len(labels)} combination(s) by {rounds} paired rounds: " + ", ".join(labels),
        highlight=False,
        soft_wrap=True,
    )
    options = {"measure": measure} if measure is not None else {}
    return side_by_side(
        local_store(settings),
        baseline,
        summary,
        labels,
        rounds,
        time_cap_s=time_cap_s or PAIRED_TIME_CAP_S,
        progress=lambda line: err.print(f"gate: {line}", highlight=False, soft_wrap=True),
        **options,
    )


def remeasure(settings, run_id: str, combo_keys: set[str], times: int, *, verbose: bool = False, parts=None) -> list:
    """`times` runs re-measuring `combo_keys` of run `run_id` (a replay from their conversions,
    forced, on the embedded default): their summaries. `parts` replaces the embedded app's
    parts (tests: a fake measurement)."""
    from ayci.bootstrap import embedded
    from ayci.cli.follow import follow_embedded
    from ayci.cli.runlog import run_log
    from services.request.replay import ReplayError, replay

    app = embedded(settings, parts=parts)
    summaries = []
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    with run_log(settings.data_dir.parent / "logs" / f"confirm-{stamp}.log", terminal, verbose=verbose) as log:
        for attempt in range(1, times + 1):
            try:
                envelopes = replay(app.store, run_id, "ModelConverted", force=True, only=combo_keys)
            except ReplayError as exc:
                raise UsageError(
                    f"--confirm: the regressed combinations of run {run_id} cannot be re-measured: {exc}"
                ) from None
            planned = next(e.payload for e in envelopes if e.type == "RunPlanned")
            app.publisher.publish(envelopes)
            what = f"run {run_id} re-measured to confirm its regressions ({attempt} of {times})"
            summaries.append(follow_embedded(app, envelopes[0].run_id, len(planned.combos), what))
    err.print(log.where(), highlight=False, soft_wrap=True)
    return summaries
