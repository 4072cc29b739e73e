"""Check the exported function where it will run: in a virtual environment made from
`function/requirements.txt` alone, call `handler.lambda_handler` with Lambda's event and
context shapes on the run's example inputs, and print (JSON) what it answered.

    python -m venv venv && venv/bin/pip install -r function/requirements.txt
    venv/bin/python check/invoke.py [--warm 200]

It reports: the cold start (this process's start to the first answer, as AYCI measures one:
imports, the model loaded at init, the first request), the warm latency of the handler
(API Gateway event in, answer out) over `--warm` requests, whether each kind of event (REST
API JSON, HTTP API `.npy`, function URL `.npz`, a direct invocation) agrees with base's outputs,
and how the function answers bad requests. Nothing here imports AYCI.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import sys
import time
import uuid
from pathlib import Path

STARTED = time.time()  # as early as this process can say; the parent's spawn time comes in --spawned-at

HERE = Path(__file__).resolve().parent
FUNCTION = HERE.parent / "function"


class FakeContext:
    """What Lambda passes as `context` (the fields a handler reads)."""

    def __init__(self, memory_mb: int, timeout_s: float = 30.0) -> None:
        self.function_name = "inference"
        self.function_version = "$LATEST"
        self.invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:inference"
        self.memory_limit_in_mb = str(memory_mb)
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = "/aws/lambda/inference"
        self.log_stream_name = "check"
        self._deadline = time.monotonic() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return int(max(0.0, self._deadline - time.monotonic()) * 1000)


def runtime_interface():
    """`invoke(handler_function, event) -> answer` through awslambdaric's runtime interface (what
    Lambda's Python runtime runs: the event's JSON bytes unmarshalled, a `LambdaContext` built
    from the invocation's headers, the answer marshalled to JSON), or None without awslambdaric.
    Only the runtime API's HTTP client is replaced, by one that keeps the posted answer."""
    try:
        from awslambdaric import bootstrap
        from awslambdaric.lambda_runtime_marshaller import LambdaMarshaller
    except ImportError:
        return None

    class Client:
        marshaller = LambdaMarshaller()
        posted: tuple = ()

        def post_invocation_result(self, invoke_id, result, content_type, *_) -> None:
            self.posted = ("result", result, content_type)

        def post_invocation_error(self, invoke_id, error, xray_fault, *_) -> None:
            self.posted = ("error", error, xray_fault)

    def invoke(handler_function, event: dict) -> dict:
        client = Client()
        bootstrap.handle_event_request(
            client,
            handler_function,
            str(uuid.uuid4()),
            json.dumps(event).encode(),
            "application/json",
            None,
            None,
            "arn:aws:lambda:us-east-1:123456789012:function:inference",
            int(time.time() * 1000) + 30_000,
            None,
            bootstrap.StandardLogSink(),
        )
        kind, body, _ = client.posted
        if kind != "result":
            raise RuntimeError(f"the runtime interface reports an error: {body}")
        return json.loads(body)

    return invoke


def rest_event(body: str, *, base64_encoded: bool = False, content_type: str = "application/json") -> dict:
    """An API Gateway REST API (v1) proxy event."""
    return {
        "resource": "/infer",
        "path": "/infer",
        "httpMethod": "POST",
        "headers": {"Content-Type": content_type},
        "multiValueHeaders": {"Content-Type": [content_type]},
        "queryStringParameters": None,
        "pathParameters": None,
        "stageVariables": None,
        "requestContext": {"resourcePath": "/infer", "httpMethod": "POST", "stage": "prod", "requestId": "r1"},
        "body": body,
        "isBase64Encoded": base64_encoded,
    }


def http_event(body: str | None, *, base64_encoded: bool, content_type: str, method: str = "POST") -> dict:
    """An HTTP API (v2) event; a function URL's has the same shape."""
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": "/infer",
        "rawQueryString": "",
        "headers": {"content-type": content_type},
        "requestContext": {
            "http": {"method": method, "path": "/infer", "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1"},
            "requestId": "r2",
            "stage": "$default",
        },
        "body": body,
        "isBase64Encoded": base64_encoded,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--warm", type=int, default=200, help="warm requests timed")
    parser.add_argument("--spawned-at", type=float, help="the parent's time.time() just before it started this process")
    args = parser.parse_args()

    sys.path.insert(0, str(FUNCTION))
    import numpy as np

    reference = np.load(HERE / "reference.npz", allow_pickle=False)
    inputs = {k.split(":", 1)[1]: reference[k] for k in reference.files if k.startswith("input:")}
    expected = [reference[f"output:{i}"] for i in range(sum(k.startswith("output:") for k in reference.files))]
    deployment = json.loads((FUNCTION / "deployment.json").read_text())
    names = [spec["name"] for spec in deployment["signature"]["inputs"]]
    if set(inputs) != set(names):  # the reference names the artifact's inputs: the signature's by position
        inputs = dict(zip(names, inputs.values(), strict=True))
    npy_event = _arrays_event(inputs, single=len(inputs) == 1)
    context = FakeContext(int(deployment["measured"]["memory_mb"]))

    import handler  # init: the model is loaded here, once

    first = handler.lambda_handler(npy_event, context)
    first_answer = time.time()
    report: dict = {
        "cold_start_ms": (first_answer - (args.spawned_at or STARTED)) * 1000,
        "cold_start_from": "the parent's spawn" if args.spawned_at else "this process's first line",
        "first_status": first["statusCode"],
    }
    warm = []
    for _ in range(args.warm):
        started = time.perf_counter()
        handler.lambda_handler(npy_event, context)
        warm.append((time.perf_counter() - started) * 1000)
    session_warm = []
    feed = handler.feed_of(handler.check_inputs(dict(inputs)))
    for _ in range(args.warm):
        started = time.perf_counter()
        handler.MODEL.run(feed)
        session_warm.append((time.perf_counter() - started) * 1000)
    report["warm_p50_ms"] = float(np.percentile(warm, 50)) if warm else None
    report["warm_p99_ms"] = float(np.percentile(warm, 99)) if warm else None
    report["session_p50_ms"] = float(np.percentile(session_warm, 50)) if session_warm else None
    through = runtime_interface()
    report["runtime_interface"] = "awslambdaric" if through else "direct call"

    def call(event: dict) -> dict:
        if through is not None:
            return through(handler.lambda_handler, event)
        return handler.lambda_handler(json.loads(json.dumps(event)), FakeContext(context.memory_limit_in_mb))

    # what the function's process loaded besides its runtime (torch only where torch is the runtime)
    report["loaded"] = sorted({"torch", "onnxruntime", "tvm", "report", "engines"} & set(sys.modules))
    report["agreement"] = _agreement(call, inputs, expected, npy_event, np)
    report["bad_requests"] = _bad_requests(call, inputs, np)
    print(json.dumps(report))
    return 0


def _arrays_event(inputs: dict, *, single: bool) -> dict:
    import numpy as np

    buffer = io.BytesIO()
    if single:
        np.save(buffer, next(iter(inputs.values())), allow_pickle=False)
    else:
        np.savez(buffer, **inputs)
    return http_event(
        base64.b64encode(buffer.getvalue()).decode(), base64_encoded=True, content_type="application/octet-stream"
    )


def _outputs_of(answer: dict, np) -> list:
    if answer.get("isBase64Encoded"):
        loaded = np.load(io.BytesIO(base64.b64decode(answer["body"])), allow_pickle=False)
        return [loaded] if isinstance(loaded, np.ndarray) else [loaded[name] for name in loaded.files]
    document = json.loads(answer["body"]) if "body" in answer else answer
    return [np.asarray(value) for value in document["outputs"].values()]


def _agreement(call, inputs: dict, expected: list, npy_event: dict, np) -> dict:
    """Each kind of event's largest difference from base's outputs (None: shapes differ)."""
    as_json = json.dumps({"inputs": {name: value.tolist() for name, value in inputs.items()}})
    buffer = io.BytesIO()
    np.savez(buffer, **inputs)
    npz = base64.b64encode(buffer.getvalue()).decode()
    events = {
        "rest_json": rest_event(as_json),
        "http_npy" if len(inputs) == 1 else "http_npz": npy_event,
        "function_url_npz": http_event(npz, base64_encoded=True, content_type="application/octet-stream"),
        "direct_json": json.loads(as_json),
    }
    found = {}
    for kind, event in events.items():
        answer = call(event)
        status = answer.get("statusCode", 200)
        if status != 200:
            found[kind] = {
                "status": status,
                "error": json.loads(answer["body"]).get("error") if "body" in answer else answer,
            }
            continue
        outputs = _outputs_of(answer, np)
        diffs = [
            float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) if got.shape == want.shape else None
            for got, want in zip(outputs, expected, strict=False)
        ]
        found[kind] = {"status": status, "outputs": len(outputs), "max_abs_diff": None if None in diffs else max(diffs)}
    return found


def _bad_requests(call, inputs: dict, np) -> dict:
    """How the function answers what it must refuse: status and reason, by case."""
    name, value = next(iter(inputs.items()))
    pickled = io.BytesIO()
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    huge = io.BytesIO()
    huge.write(b"\x93NUMPY\x01\x00")
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (100000, 100000), }"
    header = header + " " * (63 - len(header) % 64) + "\n"
    huge.write(len(header).to_bytes(2, "little") + header.encode())
    cases = {
        "not_json": rest_event("{not json"),
        "wrong_name": rest_event(json.dumps({"inputs": {"nope": value.tolist()}})),
        "wrong_rank": rest_event(json.dumps({"inputs": {name: value.reshape(-1).tolist()}})),
        "wrong_dtype_npy": _arrays_event({name: value.astype(np.float64)}, single=True),
        "wrong_size": rest_event(
            json.dumps({"inputs": {name: np.zeros([*value.shape[:-1], value.shape[-1] + 1]).tolist()}})
        ),
        "pickled_npy": http_event(
            base64.b64encode(pickled.getvalue()).decode(), base64_encoded=True, content_type="application/octet-stream"
        ),
        "declares_40_gb": http_event(
            base64.b64encode(huge.getvalue()).decode(), base64_encoded=True, content_type="application/octet-stream"
        ),
        "no_body": http_event(None, base64_encoded=False, content_type="application/json"),
        "text_plain": rest_event("hello", content_type="text/plain"),
        "put": http_event("{}", base64_encoded=False, content_type="application/json", method="PUT"),
    }
    found = {}
    for case, event in cases.items():
        answer = call(event)
        found[case] = {"status": answer["statusCode"], "error": json.loads(answer["body"]).get("error")}
    return found


if __name__ == "__main__":
    sys.exit(main())
