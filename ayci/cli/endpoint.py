"""`ayci endpoint RUNS`: serve runs' picks behind one HTTP endpoint (`serving/`: many models,
LRU, scaling workers) until interrupted."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from ayci.cli.common import settings_of, warn_if_unconfined
from ayci.cli.console import UsageError, err


def register(sub, serving: argparse.ArgumentParser) -> None:
    endpoint = sub.add_parser(
        "endpoint",
        parents=[serving],
        help="serve runs' picks behind one HTTP endpoint (many models, LRU, scaling workers)",
    )
    endpoint.add_argument("--host", default="127.0.0.1")
    endpoint.add_argument("--port", type=int, default=8080)
    add_lambda_like(endpoint)
    endpoint.set_defaults(func=cmd_endpoint)


def add_lambda_like(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--lambda-like",
        action="store_true",
        help="serve as a Lambda pool: one request per worker, a new worker (a cold start) for each request that "
        "finds none idle, up to --max-workers (the concurrency limit), every worker stopped after --idle-time idle",
    )


def build_endpoint(args: argparse.Namespace, work_dir: Path):
    """The endpoint of `ayci endpoint` / `ayci loadtest`: each run's pick (or chosen
    combination), refused with the reason when a run cannot be served."""
    from ayci.bootstrap import serving_endpoint
    from serving.models import NotServable

    specs = [s.strip() for s in args.runs.split(",") if s.strip()]
    if not specs:
        raise UsageError("name at least one run: RUN_ID[:COMBINATION][,RUN_ID...]")
    try:
        return serving_endpoint(
            settings_of(args),
            specs,
            work_dir,
            budget_mb=args.memory_budget,
            max_workers=args.max_workers,
            idle_s=args.idle_time,
            max_queue=args.max_queue,
            lambda_like=getattr(args, "lambda_like", False),
        )
    except (NotServable, ValueError) as exc:
        raise UsageError(str(exc)) from None


def cmd_endpoint(args: argparse.Namespace) -> int:
    import uvicorn

    from serving.app import create_app

    with tempfile.TemporaryDirectory(prefix="ayci-endpoint-") as tmp:
        endpoint = build_endpoint(args, Path(tmp))
        warn_if_unconfined()
        for model in endpoint.models.values():
            err.print(
                f"{model.name}: run {model.run_id}, {model.label} ({model.chosen_by}) at POST /invocations/{model.name}"
            )
        err.print(
            f"serving http://{args.host}:{args.port} (budget {endpoint.budget.budget_mb} MB, "
            f"up to {args.max_workers} workers a model{', Lambda-like' if args.lambda_like else ''}; "
            "GET /models, GET /metrics)"
        )
        endpoint.start()
        try:
            uvicorn.run(
                create_app(endpoint, max_body_bytes=int(args.max_body_mb * 2**20)),
                host=args.host,
                port=args.port,
                log_level="warning",
            )
        finally:
            endpoint.close()
    return 0
