"""AWS Lambda entrypoint of the converter service (SQS event source, partial batch responses)."""

from ayci.lambda_entry import make_handler

handler = make_handler("converter")
