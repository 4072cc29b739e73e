"""`ayci export RUN_ID [--combination KEY] --out DIR`: a finished run's combination (default: its
balanced pick) written as a deployable AWS Lambda function (`report/export`): the artifact, the
handler, pinned requirements, a SAM template, a README."""

from __future__ import annotations

import argparse
from pathlib import Path

from ayci.cli.common import settings_of
from ayci.cli.console import UsageError, err, terminal
from ayci.cli.options import DATA_DIR_HELP


def register(sub) -> None:
    export = sub.add_parser(
        "export", help="a finished run's pick (or --combination) as a deployable Lambda function: handler, SAM template"
    )
    export.add_argument("run_id")
    export.add_argument("--combination", help="a measured combination's label or key (default: the balanced pick)")
    export.add_argument("--out", required=True, help="the folder to write (new or empty)")
    export.add_argument("--data-dir", help=DATA_DIR_HELP)
    export.add_argument("--json", action="store_true", help="print the deployment's decisions as JSON")
    export.set_defaults(func=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    from ayci.bootstrap import local_store
    from report.export import ExportError, export_run

    settings = settings_of(args)
    out = Path(args.out)
    try:
        deployment = export_run(local_store(settings), args.run_id, out, args.combination)
    except ExportError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        terminal.print_json(deployment.as_dict())
        return 0
    serving = deployment.serving
    images = " --resolve-image-repos" if deployment.packaging == "image" else ""
    err.print(
        f"{deployment.combination} exported to {out}: {deployment.memory_mb} MB {deployment.architecture}, "
        f"timeout {deployment.timeout_s} s, {serving.option}"
        f"{f' ({serving.provisioned})' if serving.provisioned else ''}, {deployment.packaging} "
        f"({deployment.unzipped_bytes / 2**20:.0f} MB unzipped), {deployment.runtime}. See {out / 'README.md'}; "
        f"deploy with `sam build && sam deploy --guided{images}` there."
    )
    return 0
