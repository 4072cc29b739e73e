"""The command line assembled: each command's module adds its parser (`register`), `main` runs
the chosen one and turns bad input into `error: ...` and exit status 2."""

from __future__ import annotations

import argparse
import logging

from pydantic import ValidationError

from ayci.cli import (
    cancel,
    capacity,
    coldstart,
    compare,
    endpoint,
    export,
    gate,
    inspect,
    loadtest,
    plan,
    profile,
    replay,
    run,
    serve,
    traffic,
)
from ayci.cli.common import validation_message
from ayci.cli.console import UsageError, err
from ayci.cli.options import executing, serving
from core.logs import configure_logging
from engines.model_files import NotAModelError


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="ayci", description="All You Can Inference: which compiler, hardware, batch and Lambda memory size?"
    )
    top.add_argument("-v", "--verbose", action="store_true", help="log every event")
    sub = top.add_subparsers(dest="command", required=True)
    runs = executing()
    run_parser = run.register(sub, runs)
    plan_parser = plan.register(sub)
    inspect.register(sub)
    run.finish_options(run_parser)
    plan.finish_options(plan_parser)
    replay.register(sub, runs)
    cancel.register(sub)
    traffic.register(sub)
    coldstart.register(sub)
    profile.register(sub)
    export.register(sub)
    compare.register(sub)
    gate.register(sub)
    endpoints = serving()
    endpoint.register(sub, endpoints)
    loadtest.register(sub, endpoints)
    capacity.register(sub, endpoints)
    serve.register(sub)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    configure_logging("console", logging.INFO if args.verbose else logging.WARNING)
    try:
        return args.func(args)
    except UsageError as exc:
        err.print(f"error: {exc}")
        return 2
    except ValidationError as exc:
        err.print(f"error: {validation_message(exc)}")
        return 2
    except NotAModelError as exc:
        err.print(f"error: --model is not an accepted model: {exc}")
        return 2
