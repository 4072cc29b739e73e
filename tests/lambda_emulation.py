"""Lambda for tests, without Docker: moto's control plane (functions, configuration updates,
versions, aliases), two of its gaps filled as AWS behaves, and `Invoke` answered in-process by
our own handler with a real Lambda event and context.

- moto 5.2 ignores `EphemeralStorage` in `UpdateFunctionConfiguration`, and accepts any memory
  size: `fill_moto_gaps` applies the storage, and refuses sizes above `max_memory_mb` with
  Lambda's `InvalidParameterValueException` (an account limited to 3,008 MB gets it so).
- moto runs `Invoke` in Docker: `run_invocations_in_process` answers a client's `Invoke`
  before it is sent (botocore's `before-call`, which can stand in for the response), calling
  `handler(event, context)` in this process with the invoked version's memory size in the context and in
  `AWS_LAMBDA_FUNCTION_MEMORY_SIZE`, as the Lambda runtime sets them. The request still goes
  through botocore's parameter validation and serialization, and is recorded by
  `adapters/aws_calls.py`.
"""

from __future__ import annotations

import io
import json
import os
import uuid
from contextlib import contextmanager

from botocore.awsrequest import AWSResponse
from botocore.response import StreamingBody


class LambdaContext:
    """The attributes of the Python runtime's context object (`awslambdaric`'s LambdaContext)."""

    def __init__(self, function_name: str, version: str, memory_mb: int, arn: str, timeout_s: int = 900) -> None:
        import time

        self.function_name = function_name
        self.function_version = version
        self.invoked_function_arn = arn
        self.memory_limit_in_mb = str(memory_mb)  # the runtime reads it from the environment: a string
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = f"2026/12/04/[{version}]{uuid.uuid4().hex}"
        self.identity = None
        self.client_context = None
        self._deadline = time.monotonic() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        import time

        return max(0, int((self._deadline - time.monotonic()) * 1000))


def fill_moto_gaps(monkeypatch, max_memory_mb: int = 10240) -> None:
    from moto.awslambda.exceptions import InvalidParameterValueException
    from moto.awslambda.models import LambdaFunction

    original = LambdaFunction.update_configuration

    def update_configuration(self, config_updates):
        memory = config_updates.get("MemorySize")
        if memory is not None and memory > max_memory_mb:
            raise InvalidParameterValueException(
                "'MemorySize' value failed to satisfy constraint: "
                f"Member must have value less than or equal to {max_memory_mb}"
            )
        if "EphemeralStorage" in config_updates:
            self.ephemeral_storage = config_updates["EphemeralStorage"]["Size"]
        return original(self, config_updates)

    monkeypatch.setattr(LambdaFunction, "update_configuration", update_configuration)


@contextmanager
def run_invocations_in_process(lambda_client, handler, control_client=None, extra_env: dict | None = None):
    """While open, `lambda_client.invoke(FunctionName, Qualifier, Payload)` runs `handler`
    here, in the invoked version's environment (its variables, its memory size, plus
    `extra_env`). The version's configuration is read from moto through `control_client`."""
    control = control_client or lambda_client

    def answer(model, params, **_):
        if model.name != "Invoke":
            return None
        # botocore's serialized request: POST /2015-03-31/functions/{name}/invocations?Qualifier=...
        from urllib.parse import unquote

        name = unquote(params["url_path"].split("/functions/", 1)[1].split("/", 1)[0])
        qualifier = (params.get("query_string") or {}).get("Qualifier", "$LATEST")
        config = control.get_function_configuration(FunctionName=name, Qualifier=qualifier)
        event = json.loads(params.get("body") or b"{}")
        context = LambdaContext(
            name,
            config["Version"],
            config["MemorySize"],
            f"{config['FunctionArn']}:{qualifier}",
            config.get("Timeout", 900),
        )
        env = {
            **((config.get("Environment") or {}).get("Variables") or {}),
            **(extra_env or {}),
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(config["MemorySize"]),
            "AWS_LAMBDA_FUNCTION_NAME": name,
            "AWS_LAMBDA_FUNCTION_VERSION": config["Version"],
        }
        saved = {key: os.environ.get(key) for key in env}
        os.environ.update(env)
        parsed = {"StatusCode": 200, "ExecutedVersion": config["Version"]}
        try:
            body = json.dumps(handler(event, context)).encode()
        except Exception as exc:  # an unhandled error: Lambda answers 200 with X-Amz-Function-Error
            body = json.dumps({"errorMessage": str(exc), "errorType": type(exc).__name__}).encode()
            parsed["FunctionError"] = "Unhandled"
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        parsed["Payload"] = StreamingBody(io.BytesIO(body), len(body))
        return AWSResponse(params.get("url_path", ""), 200, {}, None), parsed

    # as general as the call recorder (adapters/aws_calls.py) and registered after it, so the
    # call is recorded first (botocore calls more specific event names first)
    lambda_client.meta.events.register("before-call", answer)
    try:
        yield
    finally:
        lambda_client.meta.events.unregister("before-call", answer)


def fill_moto_cloudformation_gaps(monkeypatch) -> None:
    """moto 5.2's CloudFormation resolves `!Ref` of an `AWS::Events::EventBus` to the object,
    not its name as AWS does (its rules then fail to attach): give the bus its name as Ref."""
    from moto.events.models import EventBus

    monkeypatch.setattr(EventBus, "physical_resource_id", property(lambda self: self.name), raising=False)
