"""AWS Lambda entrypoint of the notifier service (SQS event source, partial batch responses)."""

from ayci.lambda_entry import make_handler

handler = make_handler("notifier")
