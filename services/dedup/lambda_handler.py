"""AWS Lambda entrypoint of the dedup service (SQS event source, partial batch responses)."""

from ayci.lambda_entry import make_handler

handler = make_handler("dedup")
