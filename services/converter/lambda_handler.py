"""AWS Lambda entrypoint of the converter service (SQS event source, partial batch responses)."""

from ayci.lambda_entry import make_handler
from engines.onnx_engine import warm_up_conversion

warm_up_conversion()  # in the init phase: the first message converts as fast as the later ones
handler = make_handler("converter")
