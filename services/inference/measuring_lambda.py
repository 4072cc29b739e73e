"""AWS Lambda entrypoint of the measuring functions: one combination per synchronous
invocation, through a memory-size alias (`services/inference/measuring_function.py`)."""

from ayci.lambda_entry import make_measuring_handler

handler = make_measuring_handler()
