"""`ayci profile RUN_ID`: where the time goes in a finished run: each combination profiled
(Chrome trace, operator table), the optimizers side by side per hardware, batch and memory size."""

from __future__ import annotations

import argparse

from ayci.cli.common import archived_summary, settings_of, warn_if_unconfined
from ayci.cli.console import UsageError, err, terminal
from ayci.cli.options import DATA_DIR_HELP
from ayci.settings import Settings


def register(sub) -> None:
    from services.inference.profiling import PROFILE_RUNS

    profile = sub.add_parser(
        "profile", help="where the time goes: a finished run's combinations profiled (traces, operators side by side)"
    )
    profile.add_argument("run_id")
    profile.add_argument("--combination", help="the key of one combination (default: every measured one)")
    profile.add_argument("--runs", type=int, default=PROFILE_RUNS, help="profiled inferences per combination")
    profile.add_argument("--data-dir", help=DATA_DIR_HELP)
    profile.add_argument("--json", action="store_true")
    profile.set_defaults(func=cmd_profile)


def cmd_profile(args: argparse.Namespace) -> int:
    from ayci.bootstrap import local_store

    settings = settings_of(args)
    profile_run(local_store(settings), settings, args.run_id, args.combination, runs=args.runs, as_json=args.json)
    return 0


def profile_run(
    store,
    settings: Settings,
    run_id: str,
    combo_key: str | None,
    *,
    runs: int,
    as_json: bool = False,
    only_missing: bool = False,
) -> None:
    """Profile a finished run's combinations (all, or `combo_key`; with `only_missing`, those
    not profiled yet), each confined as it was measured (`services/inference/profiling.py`),
    and print them side by side."""
    from core.results import stored_profile
    from measuring.launcher import MeasurementFailed
    from report.profiles import NotProfilable, chosen_results, print_profile_tables, profile_tables
    from services.inference.profiling import profile_result

    summary = archived_summary(store, run_id, settings)
    try:
        chosen = chosen_results(summary, combo_key)
    except NotProfilable as exc:
        raise UsageError(str(exc)) from None
    warn_if_unconfined()
    profiles = []
    for result in chosen:
        result = result.model_copy(update={"run_id": run_id})  # the pass is this run's, also on a reused result
        stored = stored_profile(store, result) if only_missing else None
        if stored is not None:
            profiles.append(stored.to_dict())
            continue
        err.print(f"profiling {result.combo_key} ({runs} inferences) ...")
        try:
            profiles.append(profile_result(store, result, runs=runs).to_dict())
        except MeasurementFailed as exc:
            err.print(f"[yellow]{result.combo_key}: profiling failed: {exc.reason}[/yellow]")
    tables = profile_tables(profiles, trace_url=lambda p: str(settings.data_dir / p["trace_key"]))
    if as_json:
        terminal.print_json({"profiles": profiles, "tables": tables})
    else:
        print_profile_tables(tables, terminal.out(170))
