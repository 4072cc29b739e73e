"""`ayci cancel RUN_ID`: cancel a run on the real path (a deployed stack: AYCI_BUCKET,
AYCI_BUS_NAME, or `--stack` on LocalStack); `ayci serve`'s runs are cancelled from its page or API."""

from __future__ import annotations

import argparse

from ayci.cli.console import UsageError, err
from ayci.settings import Settings
from schemas import keys


def register(sub) -> None:
    cancel = sub.add_parser("cancel", help="cancel a run on the real path (LocalStack with --localstack, or AWS)")
    cancel.add_argument("run_id")
    cancel.add_argument("--localstack", action="store_true", help="the stack on LocalStack")
    cancel.add_argument("--stack", default="ayci", help="stack name and resource prefix (with --localstack)")
    cancel.set_defaults(func=cmd_cancel)


def cmd_cancel(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from ayci.bootstrap import aws
    from ayci.cli.follow import stack_settings
    from schemas.documents import RunRecord
    from services.request.runs import cancel_run

    settings = Settings()
    endpoint = None
    if args.localstack:
        from infra.localstack import LOCALSTACK
        from infra.stack import read_stack

        endpoint = LOCALSTACK
        settings = stack_settings(settings, read_stack(args.stack, LOCALSTACK.url), args.stack)
    wiring = aws(settings, endpoint)
    try:
        record = RunRecord.read(wiring.store.get_bytes(keys.run_record(args.run_id))).to_dict()
    except Exception:
        raise UsageError(f"no run {args.run_id} in this stack") from None
    closing = cancel_run(wiring.store, record, datetime.now(UTC))
    if closing is None:
        raise UsageError(f"run {args.run_id} has ended already")
    wiring.publisher.publish([closing])
    err.print(
        f"run {args.run_id}: cancelled; its pending combinations fail as cancelled "
        "and it is archived with what was measured"
    )
    return 0
