"""`ayci replay RUN_ID --from STAGE`: re-run a stored run from one stage, as a new run linked to it."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from ayci.cli.common import settings_of
from ayci.cli.console import UsageError, err, terminal
from ayci.cli.follow import EXIT_STATUS, follow_embedded, follow_store, localstack_services
from ayci.cli.run import REPORT_WIDTH
from ayci.cli.runlog import run_log
from report import print_report
from schemas import keys


def register(sub, executing: argparse.ArgumentParser) -> None:
    replay = sub.add_parser(
        "replay", parents=[executing], help="re-run a stored run from one stage, as a new run linked to it"
    )
    replay.add_argument("run_id")
    replay.add_argument(
        "--from", dest="from_type", default="ModelConverted", help="RequestSubmitted | ComboPending | ModelConverted"
    )
    replay.set_defaults(func=cmd_replay)


def cmd_replay(args: argparse.Namespace) -> int:
    from ayci.bootstrap import embedded
    from core.run_plan import measured_combos
    from schemas.combos import combo_key
    from services.request.replay import ReplayError, replay

    settings = settings_of(args)

    def replayed(store) -> tuple[list, list[str]]:
        try:
            envelopes = replay(store, args.run_id, args.from_type, force=args.force)
        except ReplayError as exc:
            raise UsageError(str(exc)) from exc
        planned = next((e.payload for e in envelopes if e.type == "RunPlanned"), None)
        if planned is not None:
            return envelopes, list(planned.combos)
        request = envelopes[0].payload
        return envelopes, [combo_key(request.model, c, request.tuning) for c in measured_combos(request)]

    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    with run_log(settings.data_dir.parent / "logs" / f"replay-{stamp}.log", terminal, verbose=args.verbose) as log:
        if args.localstack:
            with localstack_services(args.stack, settings) as (wiring, processes):
                envelopes, combo_keys = replayed(wiring.store)
                wiring.publisher.publish(envelopes)
                summary = follow_store(wiring.store, envelopes[0].run_id, combo_keys, args.timeout, processes)
        else:
            app = embedded(settings)
            envelopes, combo_keys = replayed(app.store)
            app.publisher.publish(envelopes)
            what = f"a replay of run {args.run_id} from {args.from_type}"
            summary = follow_embedded(app, envelopes[0].run_id, len(combo_keys), what)
        print_report(summary, terminal.out(REPORT_WIDTH))
        if not args.localstack:
            err.print(f"results: {settings.data_dir / keys.summary(summary.run_id)}", highlight=False, soft_wrap=True)
    err.print(log.where(), highlight=False, soft_wrap=True)
    return EXIT_STATUS[summary.status]
