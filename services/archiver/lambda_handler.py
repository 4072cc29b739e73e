"""AWS Lambda entrypoint of the archiver service (SQS event source, partial batch responses)."""

from ayci.lambda_entry import make_handler

handler = make_handler("archiver")
