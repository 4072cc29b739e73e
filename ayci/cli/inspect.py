"""`ayci inspect MODEL`: a model's signature as its file declares it, read without running it."""

from __future__ import annotations

import argparse
from pathlib import Path

from ayci.cli.console import UsageError, terminal


def register(sub) -> None:
    inspect = sub.add_parser(
        "inspect", help="a model's signature (inputs, outputs, dynamic dims), read without running it"
    )
    inspect.add_argument("model")
    inspect.add_argument("--json", action="store_true")
    inspect.set_defaults(func=cmd_inspect)


def cmd_inspect(args: argparse.Namespace) -> int:
    from engines.model_files import NotAModelError
    from engines.signature import read_signature
    from report.terminal import signature_view

    path = Path(args.model)
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    try:
        signature = read_signature(path)
    except NotAModelError as exc:
        raise UsageError(f"{path}: not an accepted model (a torch.export .pt2 or ONNX file): {exc}") from None
    if args.json:
        terminal.print(signature.model_dump_json(indent=2))
        return 0
    console = terminal.out()
    for part in signature_view(signature, path.name):
        console.print(part)
    return 0
