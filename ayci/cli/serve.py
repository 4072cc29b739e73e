"""`ayci serve`: the web page and HTTP API on the embedded default (every service in this
process), as `ayci/serve.py` starts it; `ayci example-model`: write an example model."""

from __future__ import annotations

import argparse
from pathlib import Path

from ayci.cli.common import parse_ints, settings_of
from ayci.cli.console import terminal
from ayci.cli.options import DATA_DIR_HELP


def register(sub) -> None:
    example = sub.add_parser("example-model", help="write an example model as .pt2")
    example.add_argument("--workload", default="image_classification")
    example.add_argument("--input-size")
    example.add_argument("--out", required=True)
    example.set_defaults(func=cmd_example_model)
    serve = sub.add_parser(
        "serve", help="the web page and HTTP API on the embedded default (every service in this process)"
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--data-dir", help=DATA_DIR_HELP)
    serve.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    from ayci.serve import serve_embedded

    settings = settings_of(args)
    if "results_url" not in settings.model_fields_set:  # the links in emails point at this server
        settings = settings.model_copy(update={"results_url": f"http://{args.host}:{args.port}"})
    return serve_embedded(settings, args.host, args.port)


def cmd_example_model(args: argparse.Namespace) -> int:
    from schemas.combos import Workload
    from workloads import workload_module
    from workloads.examples import export_example

    workload = Workload(args.workload)
    size = (
        parse_ints(args.input_size, "input-size") if args.input_size else workload_module(workload).DEFAULT_INPUT_SIZE
    )
    terminal.print(str(export_example(workload, size, Path(args.out))))
    return 0
