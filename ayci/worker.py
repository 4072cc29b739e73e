"""`python -m services.<name>`: one service as its own process on the real path, consuming its
queue(s) until SIGTERM. Several processes of one service share its queue's work.

The archiver process also watches every DLQ (see `DeadLetterWatcher`)."""

from __future__ import annotations

import argparse
import asyncio
import logging

import structlog

from adapters.sqs_worker import DeadLetterWatcher, QueueWorker, run_until_signalled
from ayci.bootstrap import aws, aws_runner
from ayci.settings import Settings
from core.logs import configure_logging
from core.topology import BY_NAME, every_queue
from engines.targets import native_hardware

log = structlog.get_logger()


def main(service: str, argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=f"python -m services.{service}")
    if BY_NAME[service].per_hardware:
        parser.add_argument(
            "--hardware",
            choices=["intel", "arm"],
            default=native_hardware().value,
            help="which combinations this worker measures",
        )
    parser.add_argument(
        "--visibility", type=int, default=30, help="seconds a received message stays invisible between heartbeats"
    )
    args = parser.parse_args(argv)
    settings = Settings()
    configure_logging(settings.log_format if settings.log_format != "console" else "json", logging.INFO)
    wiring = aws(settings)
    runner = aws_runner(service, settings, wiring)
    spec = BY_NAME[service]
    queues = [f"{service}-{args.hardware}"] if spec.per_hardware else list(spec.queues)
    workers: list = [
        QueueWorker(runner, queues, settings.queue_prefix, visibility_s=args.visibility, batch_size=spec.batch_size)
    ]
    if service == "archiver":
        workers.append(DeadLetterWatcher(wiring.store, wiring.publisher, every_queue(), settings.queue_prefix))
    asyncio.run(run_until_signalled(*workers))
