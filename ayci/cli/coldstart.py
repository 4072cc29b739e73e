"""`ayci coldstart RUN_ID`: cold-start levers for a finished run's measured `onnx` and `base`
combinations, each variant measured confined to the combination's memory size
(`measuring/levers.py`)."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from ayci.cli.common import archived_summary, settings_of, warn_if_unconfined
from ayci.cli.console import UsageError, err, terminal
from ayci.cli.options import DATA_DIR_HELP
from schemas.combos import ModelFormat, Optimizer
from schemas.documents import SummaryResult


def register(sub) -> None:
    coldstart = sub.add_parser(
        "coldstart",
        help="cold-start levers (pre-optimized ONNX, ORT format, arena, AOTInductor) of a finished run, measured",
    )
    coldstart.add_argument("run_id")
    coldstart.add_argument("--repeat", type=int, default=3, help="cold starts per variant (the median is shown)")
    coldstart.add_argument("--data-dir", help=DATA_DIR_HELP)
    coldstart.add_argument("--json", action="store_true")
    coldstart.set_defaults(func=cmd_coldstart)


def levers_of(result: SummaryResult) -> bool:
    """Whether the levers apply: measured natively, `onnx`, or `base` on a .pt2."""
    optimizer = result.combo.optimizer
    return (
        not result.predicted
        and not result.emulated
        and result.model is not None
        and optimizer in (Optimizer.onnx, Optimizer.base)
        and not (optimizer == Optimizer.base and result.model.format == ModelFormat.onnx)
    )


def cmd_coldstart(args: argparse.Namespace) -> int:
    from ayci.bootstrap import local_store
    from measuring.levers import base_variants, measure_levers, onnx_variants
    from report.studies import coldstart_tables
    from services.inference.profiling import fetch_measured

    settings = settings_of(args)
    store = local_store(settings)
    summary = archived_summary(store, args.run_id, settings)
    chosen = [r for r in summary.results if levers_of(r)]
    if not chosen:
        raise UsageError(f"run {args.run_id} has no natively measured onnx or base (.pt2) combination to try levers on")
    warn_if_unconfined()
    report = {}
    for result in chosen:
        combo, model, label = result.combo, result.model, result.label
        err.print(f"{label}: preparing the variants ...")
        with tempfile.TemporaryDirectory(prefix="ayci-levers-") as tmp:
            work = Path(tmp)
            artifact, reference = fetch_measured(store, result, work)
            threads = result.threads or 1
            variants = (
                onnx_variants(artifact, threads, work)
                if combo.optimizer == Optimizer.onnx
                else base_variants(artifact, work)
            )
            err.print(f"{label}: measuring {len(variants)} variants x {args.repeat} cold starts ...")
            report[label] = measure_levers(
                variants,
                workload=model.workload.value,
                reference=reference,
                memory_mb=combo.memory_mb,
                repeat=args.repeat,
            )
    if args.json:
        terminal.print_json(report)
        return 0
    console = terminal.out(150)
    for table in coldstart_tables(report, args.repeat):
        console.print(table)
    return 0
