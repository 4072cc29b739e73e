"""AWS Lambda entrypoint of the converter service (SQS event source, partial batch responses).

No warm-up at init: every conversion runs in a fresh sandboxed child process (measuring/sandbox.py),
so nothing the parent imports or compiles would speed it up."""

from ayci.lambda_entry import make_handler

handler = make_handler("converter")
