"""`ayci run`: measure a matrix on a model (the example ResNet-18 by default) on the embedded
default, or on LocalStack with `--localstack`, and print the table and the recommendation.

The terminal shows AYCI's progress, the table and the recommendation; library warnings and
logs go to the run's log file (`.ayci/logs/run-RUN_ID.log`), whose path ends the output."""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path

from ayci.cli.common import (
    build_request,
    checked_inputs,
    model_path_of,
    settings_of,
    submit,
    warn_if_unconfined,
    workload_and_size,
)
from ayci.cli.console import err, terminal
from ayci.cli.follow import EXIT_STATUS, follow_embedded, follow_store, localstack_services
from ayci.cli.options import add_request_options
from ayci.cli.runlog import run_log
from ayci.settings import Settings
from report import print_report
from schemas import keys
from schemas.combos import ModelRef, Workload

REPORT_WIDTH = 200  # the results table's columns at least this wide, whatever the terminal (its note column readable)


def register(sub, executing: argparse.ArgumentParser) -> argparse.ArgumentParser:
    run = sub.add_parser(
        "run", parents=[executing], help="measure a matrix on the embedded default and print the table"
    )
    return run


def finish_options(run: argparse.ArgumentParser) -> None:
    """The request's options and `--profile` (added after `plan` exists: the help lists them so)."""
    add_request_options(run)
    run.add_argument(
        "--profile", action="store_true", help="after measuring, profile each combination (see `ayci profile`)"
    )
    run.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    workload, input_size = workload_and_size(args)
    inputs_path = checked_inputs(args)
    # validate the matrix before touching the model (an error here loses nothing)
    placeholder = ModelRef(
        sha256="0" * 64,
        size_bytes=1,
        format="pt2",
        workload=workload,
        input_size=input_size,
        inputs_sha256="0" * 64 if inputs_path else None,
    )
    build_request(args, placeholder)
    run_id = str(uuid.uuid4())
    with run_log(settings.data_dir.parent / "logs" / f"run-{run_id}.log", terminal, verbose=args.verbose) as log:
        model_path = model_path_of(args, settings, workload, input_size)
        warn_if_unconfined()
        if args.localstack:
            status = run_on_localstack(args, settings, run_id, model_path, workload, input_size, inputs_path)
        else:
            status = run_embedded(args, settings, run_id, model_path, workload, input_size, inputs_path)
    err.print(log.where(), highlight=False, soft_wrap=True)
    return status


def run_embedded(
    args: argparse.Namespace,
    settings: Settings,
    run_id: str,
    model_path: Path,
    workload: Workload,
    input_size: list[int],
    inputs_path: Path | None,
) -> int:
    from ayci.bootstrap import embedded
    from core.run_plan import measured_combos
    from services.inference.profiling import PROFILE_RUNS

    app = embedded(settings)
    model, request = submit(app.store, app.publisher, args, run_id, model_path, workload, input_size, inputs_path)
    what = f"{model_path.name} (sha256 {model.sha256[:12]})"
    summary = follow_embedded(app, run_id, len(measured_combos(request)), what)
    print_report(summary, terminal.out(REPORT_WIDTH))
    print_stopped(summary)
    err.print(f"results: {settings.data_dir / keys.summary(run_id)}", highlight=False, soft_wrap=True)
    if args.profile:  # measured combinations were profiled after their measurement; reused ones are now
        from ayci.cli.profile import profile_run

        profile_run(app.store, settings, run_id, None, runs=PROFILE_RUNS, only_missing=True)
    return EXIT_STATUS[summary.status]


def run_on_localstack(
    args: argparse.Namespace,
    settings: Settings,
    run_id: str,
    model_path: Path,
    workload: Workload,
    input_size: list[int],
    inputs_path: Path | None = None,
) -> int:
    from core.run_plan import measured_combos
    from schemas.combos import combo_key

    with localstack_services(args.stack, settings) as (wiring, processes):
        model, request = submit(
            wiring.store, wiring.publisher, args, run_id, model_path, workload, input_size, inputs_path
        )
        combos = [combo_key(model, c, request.tuning) for c in measured_combos(request)]
        summary = follow_store(wiring.store, run_id, combos, args.timeout, processes)
    print_report(summary, terminal.out(REPORT_WIDTH))
    print_stopped(summary)
    return EXIT_STATUS[summary.status]


def print_stopped(summary) -> None:
    """What the quick pass stopped as dominated (each pick's margin over the next is in the recommendation's
    lines, `report.terminal.recommendation_lines`)."""
    stopped = [r for r in summary.results if getattr(r, "dominated_by", None)]
    if stopped:
        terminal.out(REPORT_WIDTH).print(
            f"{len(stopped)} combination{'s' if len(stopped) != 1 else ''} stopped after the quick pass "
            f"(dominated: see the recommendation's excluded); --precision exact measures everything fully",
            highlight=False,
            soft_wrap=True,
        )
