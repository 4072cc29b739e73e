"""Lambda entrypoints: one per service, for an SQS event. Powertools' batch utility reports
only the failed records back (`batchItemFailures`), so one bad message never fails a batch."""

from __future__ import annotations

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from adapters.aws import envelope_from_sqs_body
from ayci.settings import Settings
from core.logs import configure_logging


def make_handler(service: str):
    """`handler(event, context)` for `service`'s SQS event source mapping."""
    processor = BatchProcessor(event_type=EventType.SQS)
    runner = None

    def record_handler(record: SQSRecord) -> None:
        nonlocal runner
        if runner is None:
            from ayci.bootstrap import aws_runner

            configure_logging("json")
            runner = aws_runner(service, Settings())
        runner.handle(envelope_from_sqs_body(record.body))

    def handler(event: dict, context) -> dict:
        return process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )

    return handler


def make_dead_letter_handler():
    """`handler(event, context)` for the event source mappings of every service's DLQ: each
    dead letter is kept and ends what it stood for (its combination or its run), as the
    `DeadLetterWatcher` does for worker processes."""
    processor = BatchProcessor(event_type=EventType.SQS)
    settings, wiring = Settings(), None

    def record_handler(record: SQSRecord) -> None:
        nonlocal wiring
        from adapters.sqs_worker import report_dead_letter

        if wiring is None:
            from ayci.bootstrap import aws

            configure_logging("json")
            wiring = aws(settings)
        queue_name = record.event_source_arn.rsplit(":", 1)[-1]  # "<prefix>-<queue>-dlq"
        queue = queue_name.removeprefix(f"{settings.queue_prefix}-").removesuffix("-dlq")
        reason = (record.message_attributes.get("reason") or {}).get("stringValue")
        report_dead_letter(wiring.store, wiring.publisher, queue, record.body, record.message_id, reason)

    def handler(event: dict, context) -> dict:
        return process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )

    return handler


def make_measuring_handler():
    """`handler(event, context)` of the measuring functions (`MeasureIntelFunction`,
    `MeasureArmFunction`): the event is a `MeasureRequest`, invoked synchronously through a
    memory-size alias by the inference service; the answer is a `MeasureAnswer`."""
    store = None

    def handler(event: dict, context) -> dict:
        nonlocal store
        from pydantic import ValidationError

        from schemas.measuring import MeasureAnswer, MeasureRequest
        from services.inference.measuring_function import measure_in_this_function

        if store is None:
            from adapters.aws import S3Store

            configure_logging("json")
            store = S3Store(Settings().bucket)
        try:
            request = MeasureRequest.model_validate(event)
        except ValidationError as exc:
            return MeasureAnswer(failed=f"not a measuring request: {exc}").model_dump(mode="json", exclude_none=True)
        memory = getattr(context, "memory_limit_in_mb", None)
        answer = measure_in_this_function(request, store, memory_limit_mb=int(memory) if memory else None)
        return answer.model_dump(mode="json", exclude_none=True)

    return handler
