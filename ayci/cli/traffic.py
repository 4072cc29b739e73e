"""`ayci traffic RUN_ID --rps N`: a finished run's combinations under a traffic profile
(`core/lambda_model/traffic.py`): cold-start share, p50/p99/p99.9 with cold starts, peak
instances, the bill; and the cheapest meeting the SLO."""

from __future__ import annotations

import argparse

from ayci.cli.common import archived_summary, settings_of
from ayci.cli.console import UsageError, terminal
from ayci.cli.options import DATA_DIR_HELP


def register(sub) -> None:
    traffic = sub.add_parser(
        "traffic", help="a finished run's combinations under a traffic profile: cold starts, tail latency, the bill"
    )
    traffic.add_argument("run_id")
    traffic.add_argument("--rps", type=float, required=True, help="requests per second (the base rate for spiky)")
    traffic.add_argument(
        "--pattern",
        default="steady",
        help="steady | spiky (10x bursts of 30 s every 10 min) | a CSV of arrival times or minute,count",
    )
    traffic.add_argument("--idle-timeout", default="10m", help="how long an idle instance is kept, e.g. 5m")
    traffic.add_argument("--duration", default="30d", help="the period billed, e.g. 30d")
    traffic.add_argument("--slo", type=float, help="p99 in ms, cold starts included")
    traffic.add_argument(
        "--concurrency-limit",
        type=int,
        help="the account's concurrency limit (default: Lambda's default, 1,000; data/lambda_limits.json); "
        "requests past it or past the scaling rate (1,000 environments per 10 s) are throttled",
    )
    traffic.add_argument("--data-dir", help=DATA_DIR_HELP)
    traffic.add_argument("--json", action="store_true")
    traffic.set_defaults(func=cmd_traffic)


def cmd_traffic(args: argparse.Namespace) -> int:
    from ayci.bootstrap import local_store
    from core.lambda_model.arrivals import Traffic, TrafficError, parse_duration
    from core.lambda_model.traffic import traffic_report
    from report.studies import traffic_view

    settings = settings_of(args)
    try:
        traffic = Traffic(
            rps=args.rps,
            pattern=args.pattern,
            idle_timeout_s=parse_duration(args.idle_timeout, "idle-timeout"),
            duration_s=parse_duration(args.duration, "duration"),
            concurrency_limit=args.concurrency_limit,
        )
        summary = archived_summary(local_store(settings), args.run_id, settings)
        report = traffic_report(summary, traffic, args.slo)
    except TrafficError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        terminal.print_json(report)
        return 0
    days = traffic.duration_s / 86400
    title = (
        f"run {args.run_id} under {traffic.rps:g} req/s ({traffic.pattern}), "
        f"idle timeout {traffic.idle_timeout_s:g} s, {days:g} days, concurrency limit {traffic.limit:,}"
    )
    table, cheapest = traffic_view(report, title, days, args.slo)
    terminal.out(150).print(table)
    terminal.print(cheapest.plain)
    return 0
