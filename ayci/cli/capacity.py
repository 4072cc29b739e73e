"""`ayci capacity RUN_ID[:COMBINATION] --slo P99_MS`: start the endpoint for that combination, step
the open-loop request rate (doubling, then bisecting) until p99 breaks the SLO or errors appear,
and print each level and the highest rate within the SLO beside the simulation's
(`serving/capacity.py`)."""

from __future__ import annotations

import argparse
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from ayci.cli.common import warn_if_unconfined
from ayci.cli.console import UsageError, err, terminal
from ayci.cli.endpoint import add_lambda_like, build_endpoint


def register(sub, serving: argparse.ArgumentParser) -> None:
    from serving.capacity import DEFAULT_MAX_LEVELS, DEFAULT_MAX_RPS, DEFAULT_PRECISION

    capacity = sub.add_parser(
        "capacity",
        parents=[serving],
        help="the highest request rate one combination takes with p99 within an SLO (open loop, stepped)",
    )
    capacity.add_argument("--slo", type=float, required=True, help="p99 in ms each level must stay within")
    capacity.add_argument(
        "--start-rps", type=float, help="the first level's rate (default: a quarter of what the workers can answer)"
    )
    capacity.add_argument(
        "--max-rps", type=float, default=DEFAULT_MAX_RPS, help=f"the highest rate sent (default {DEFAULT_MAX_RPS:g})"
    )
    capacity.add_argument(
        "--precision",
        type=float,
        default=DEFAULT_PRECISION,
        help="stop when the highest rate within and the lowest that broke it are this close (default 0.1: 10%%)",
    )
    capacity.add_argument("--max-levels", type=int, default=DEFAULT_MAX_LEVELS, help="levels at most")
    capacity.add_argument("--level-duration", default="20s", help="each level's counted length, e.g. 20s, 1m")
    capacity.add_argument("--warmup", default="3s", help="each level's first seconds, sent and not counted")
    capacity.add_argument("--pattern", default="steady", choices=["steady", "spiky"], help="arrivals at each level")
    capacity.add_argument(
        "--max-error-share", type=float, default=0.0, help="errors a level may have and stay within (default 0: none)"
    )
    add_lambda_like(capacity)
    capacity.add_argument("--out", help="where the CSV, the plot and the report go (default .ayci/capacity/TIME)")
    capacity.add_argument("--json", action="store_true")
    capacity.set_defaults(func=cmd_capacity)


def cmd_capacity(args: argparse.Namespace) -> int:
    from core.lambda_model.arrivals import TrafficError, parse_duration
    from report.studies import capacity_level_line, capacity_view
    from serving.app import create_app
    from serving.capacity import CapacityPlan, Stepping, default_start_rps, run_capacity

    if "," in args.runs.strip(","):
        raise UsageError("capacity measures one combination: RUN_ID[:COMBINATION]")
    out = Path(args.out) if args.out else Path(".ayci") / "capacity" / datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    with tempfile.TemporaryDirectory(prefix="ayci-endpoint-") as tmp:
        endpoint = build_endpoint(args, Path(tmp))
        (name, model), *_ = endpoint.models.items()
        try:
            start = args.start_rps or default_start_rps(model.result.latency_ms.p50, endpoint.policy.max_workers)
            plan = CapacityPlan(
                slo_ms=args.slo,
                stepping=Stepping(
                    start_rps=start,
                    max_rps=max(args.max_rps, start),
                    precision=args.precision,
                    max_levels=args.max_levels,
                ),
                duration_s=parse_duration(args.level_duration, "level duration"),
                warmup_s=parse_duration(args.warmup, "warm-up"),
                pattern=args.pattern,
                max_error_share=args.max_error_share,
            )
        except (TrafficError, ValueError) as exc:
            raise UsageError(str(exc)) from None
        warn_if_unconfined()
        err.print(
            f"capacity of {model.label} (run {model.run_id}, {model.chosen_by}): p99 within {plan.slo_ms:g} ms, "
            f"{plan.pattern} open-loop levels of {plan.duration_s:g} s (+{plan.warmup_s:g} s warm-up) from "
            f"{start:.4g} req/s, after a calibration (service time, overhead, cold starts) ..."
        )
        endpoint.start()
        try:
            app = create_app(endpoint, max_body_bytes=int(args.max_body_mb * 2**20))
            report = run_capacity(
                endpoint, app, name, plan, out, on_level=lambda row: err.print(capacity_level_line(row, plan.slo_ms))
            )
        except RuntimeError as exc:  # the load generator failed
            err.print(f"error: {exc}")
            return 1
        finally:
            endpoint.close()
    if args.json:
        terminal.print_json(report)
        return 0
    console = terminal.out(170)
    for part in capacity_view(report):
        console.print(part)
    return 0
