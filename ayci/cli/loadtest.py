"""`ayci loadtest RUNS --rps N`: start the endpoint (`--lambda-like`: as a Lambda pool), drive it
with open-loop arrivals (`serving/loadtest.py`, `serving/open_loop.py`) and print what it did
beside the traffic simulation of the same arrivals, fed this machine's calibration: pass or fail.
Exit 0 on a pass, 1 when a figure fails or requests failed, 2 on a usage error."""

from __future__ import annotations

import argparse
import json
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from ayci.cli.common import warn_if_unconfined
from ayci.cli.console import UsageError, err, terminal
from ayci.cli.endpoint import add_lambda_like, build_endpoint


def register(sub, serving: argparse.ArgumentParser) -> None:
    loadtest = sub.add_parser(
        "loadtest",
        parents=[serving],
        help="start the endpoint, drive it with open-loop arrivals, compare with the traffic simulation",
    )
    loadtest.add_argument(
        "--rps", type=float, required=True, help="requests per second (the base rate for spiky), over all the models"
    )
    loadtest.add_argument("--duration", default="60s", help="how long to drive it, e.g. 90s, 5m")
    loadtest.add_argument(
        "--pattern",
        default="steady",
        help="steady (Poisson), spiky (10x bursts in the middle of each half) or a CSV file of arrival times (s)",
    )
    loadtest.add_argument("--seed", type=int, default=0, help="of the arrivals (and which model each goes to)")
    add_lambda_like(loadtest)
    loadtest.add_argument("--out", help="where the plot, the requests and the report go (default .ayci/loadtest/TIME)")
    loadtest.add_argument("--json", action="store_true")
    loadtest.set_defaults(func=cmd_loadtest)


def cmd_loadtest(args: argparse.Namespace) -> int:
    from core.lambda_model.arrivals import TrafficError, parse_duration
    from report.studies import loadtest_view
    from serving.app import create_app
    from serving.loadtest import LoadPlan, run_loadtest

    try:
        plan = LoadPlan(
            rps=args.rps,
            duration_s=parse_duration(args.duration, "duration"),
            pattern=args.pattern,
            seed=args.seed,
            lambda_like=args.lambda_like,
        )
    except (TrafficError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    out = Path(args.out) if args.out else Path(".ayci") / "loadtest" / datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    with tempfile.TemporaryDirectory(prefix="ayci-endpoint-") as tmp:
        endpoint = build_endpoint(args, Path(tmp))
        warn_if_unconfined()
        err.print(
            f"load test ({'Lambda-like pool' if plan.lambda_like else 'endpoint'}, open loop): {plan.pattern}, "
            f"{plan.rps:g} req/s for {plan.duration_s:g} s "
            f"against {', '.join(endpoint.models)} ..."
        )
        endpoint.start()
        try:
            app = create_app(endpoint, max_body_bytes=int(args.max_body_mb * 2**20))
            report = run_loadtest(endpoint, plan, out, app)
        finally:
            endpoint.close()
    failed = any(
        row["comparison"].get("verdict") == "fail" or row["observed"]["errors"] for row in report["models"].values()
    )
    if args.json:
        terminal.print_json(report)
        return 1 if failed else 0
    samples = json.loads((out / "samples.json").read_text())
    files = f"plot: {report['plot']}  requests: {out / 'requests.csv'}  report: {out / 'report.json'}"
    console = terminal.out(150)
    for part in loadtest_view(report, samples, files):
        console.print(part)
    regimes = ", ".join(f"{name}: {row['regime']['regime']}" for name, row in report["models"].items())
    console.print(
        f"waited {report['machine']['lock_wait_s']:.1f} s for the machine's measurement lock; "
        f"where each p99 lies (warm tail, cold starts, or the edge between them): {regimes}"
    )
    for name, row in report["models"].items():
        needed, sent = row["regime"].get("p99_determined_at"), row["observed"]["requests"]
        if row["regime"]["regime"] is not None and (needed is None or needed > sent):
            console.print(
                f"{name}: its p99 is not pinned by {sent:,} requests: "
                + ("no number of requests pins it" if needed is None else f"about {needed:,.0f} would")
                + " (the share that waited for a cold start is that close to 1 %: the p99 may lie among those"
                " requests or the warm ones from one run to the next)"
            )
    return 1 if failed else 0
