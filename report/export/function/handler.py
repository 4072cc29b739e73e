"""The AWS Lambda handler of a model exported by AYCI (`ayci export`): the engine's runtime alone.

At init (outside the handler, once per execution environment, and before a SnapStart snapshot)
it reads `deployment.json` (the model's signature, the session settings AYCI measured, the input
limit) and loads the artifact beside it once, with `model_runner.py` (ONNX Runtime's session, TVM's
Relax VM or PyTorch's exported program: the runner of the combination exported). Each request is
then checked and answered:

- events: API Gateway REST (proxy, v1), HTTP API (v2), function URLs, and a direct invocation
  whose event is the JSON document itself;
- bodies: JSON `{"inputs": {name: nested lists}}`, or base64 `.npy` (a one-input model) /
  `.npz` (one array per input name). Arrays are never unpickled: every `.npy` header is read and
  the declared sizes summed against the limit before any data is (`npy_reader.py`);
- names, ranks, fixed and dynamic dims and dtypes are checked against the signature: a bad
  request is a 4xx whose body says why (`{"error": ...}`);
- outputs in kind: JSON answers `{"outputs": {name: nested lists}}`; a `.npy`/`.npz` request
  gets a base64 `.npz` of the outputs (a `.npy` when there is one output).

Your own pre- and post-processing go in `preprocess` and `postprocess` (marked HOOK below).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import logging
import os
import time
from pathlib import Path

import numpy as np
from model_runner import load_model
from npy_reader import ArrayFileError, ArraysTooLarge, read_arrays

HERE = Path(__file__).resolve().parent
DEPLOYMENT = json.loads((HERE / "deployment.json").read_text())
SIGNATURE = DEPLOYMENT["signature"]
MAX_INPUT_BYTES = int(DEPLOYMENT["max_input_bytes"])

log = logging.getLogger("inference")
log.setLevel(logging.INFO)


# --- HOOK: your pre- and post-processing ------------------------------------------------------
def preprocess(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The checked request arrays, by input name, before the model sees them (decode images,
    tokenize, normalize... here). Raise `BadRequest("why")` to answer 4xx."""
    return inputs


def postprocess(outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model's outputs, by output name, before they are answered (softmax, top-k, labels...)."""
    return outputs


# --- the model: loaded once, outside the handler ---------------------------------------------
MODEL = load_model(HERE, DEPLOYMENT)
SESSION_INPUTS = MODEL.input_names
INPUT_SPECS = SIGNATURE["inputs"]
SIGNATURE_OUTPUTS = [o["name"] for o in SIGNATURE.get("outputs") or []]


def output_names(count: int) -> list[str]:
    """The outputs' names: the signature's, as the user exported the model; else the artifact's
    own when they differ in number; else output_0, output_1..."""
    for names in (SIGNATURE_OUTPUTS, MODEL.output_names):
        if len(names) == count:
            return list(names)
    return [f"output_{i}" for i in range(count)]


def infer(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model's outputs on checked inputs, by name."""
    outputs = MODEL.run(feed_of(inputs))
    return dict(zip(output_names(len(outputs)), outputs, strict=True))


def warm_up() -> None:
    """One inference on zeros of the measured shapes: the first run's allocations happen here,
    not in a user's request (and, with SnapStart, before the snapshot)."""
    example = {
        spec["name"]: np.zeros(shape, dtype=spec["dtype"])
        for spec, shape in zip(INPUT_SPECS, DEPLOYMENT["example_shapes"], strict=True)
    }
    MODEL.run(feed_of(example))


if DEPLOYMENT.get("snapstart"):  # SnapStart hooks only where the deployment enables SnapStart
    from snapshot_restore_py import register_after_restore, register_before_snapshot

    @register_before_snapshot
    def _before_snapshot() -> None:
        warm_up()

    @register_after_restore
    def _after_restore() -> None:
        np.random.seed(int.from_bytes(os.urandom(4), "little"))  # a restored snapshot shares its seed
        log.info("restored from snapshot")


# --- requests ---------------------------------------------------------------------------------
class BadRequest(Exception):
    """A request this model cannot answer: its status and the reason."""

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.reason, self.status = reason, status


def lambda_handler(event: dict, context) -> dict:
    """An API Gateway (REST v1, HTTP v2) or function URL event, or a direct invocation's JSON
    document: the outputs, or a 4xx saying what is wrong with the request."""
    http = isinstance(event, dict) and ("requestContext" in event or "httpMethod" in event or "body" in event)
    started = time.perf_counter()
    try:
        if http and _method(event) == "GET":
            return _answer(200, {"signature": SIGNATURE, "measured": DEPLOYMENT["measured"]})
        if http and _method(event) not in ("POST", None):
            raise BadRequest(f"{_method(event)} is not answered: POST the inputs", 405)
        inputs, kind = parse_request(event) if http else (json_inputs(event), "json")
        inputs = preprocess(check_inputs(inputs))
        outputs = postprocess(infer(inputs))
    except BadRequest as exc:
        log.info("bad request", extra={"status": exc.status, "reason": exc.reason})
        return _answer(exc.status, {"error": exc.reason}) if http else {"statusCode": exc.status, "error": exc.reason}
    log.info(
        "inference",
        extra={
            "ms": round((time.perf_counter() - started) * 1000, 3),
            "request_id": getattr(context, "aws_request_id", None),
        },
    )
    if not http:
        return {"outputs": {name: value.tolist() for name, value in outputs.items()}}
    if kind == "json":
        return _answer(200, {"outputs": {name: np.asarray(value).tolist() for name, value in outputs.items()}})
    return _arrays_answer(outputs)


def _method(event: dict) -> str | None:
    return event.get("httpMethod") or (event.get("requestContext") or {}).get("http", {}).get("method")


def _headers(event: dict) -> dict[str, str]:
    return {k.lower(): v for k, v in (event.get("headers") or {}).items()}


def parse_request(event: dict) -> tuple[dict[str, np.ndarray], str]:
    """The request's arrays by name and the body's kind (`json`, `npy`, `npz`)."""
    body = event.get("body")
    if not body:
        raise BadRequest('no body: POST JSON {"inputs": {name: values}} or a base64 .npy/.npz')
    content_type = _headers(event).get("content-type", "").split(";")[0].strip().lower()
    if event.get("isBase64Encoded"):
        if len(body) > (MAX_INPUT_BYTES + 64 * 1024) * 4 // 3 + 4:
            raise BadRequest(f"the body is over the {MAX_INPUT_BYTES:,} bytes of inputs this function reads", 413)
        try:
            raw = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise BadRequest(f"the body is not valid base64: {exc}") from None
    else:
        raw = body.encode() if isinstance(body, str) else body
    if raw[:6] == b"\x93NUMPY" or raw[:4] == b"PK\x03\x04":
        try:
            arrays = read_arrays(raw, max_bytes=MAX_INPUT_BYTES, max_arrays=max(1, len(INPUT_SPECS)))
        except ArraysTooLarge as exc:
            raise BadRequest(str(exc), 413) from None
        except ArrayFileError as exc:
            raise BadRequest(str(exc)) from None
        if "" in arrays:  # a .npy: the model's one input
            if len(INPUT_SPECS) != 1:
                names = ", ".join(spec["name"] for spec in INPUT_SPECS)
                raise BadRequest(f"a .npy holds one array; this model takes {len(INPUT_SPECS)} ({names}): send an .npz")
            return {INPUT_SPECS[0]["name"]: arrays[""]}, "npy"
        return arrays, "npz"
    if content_type and content_type != "application/json" and not content_type.endswith("+json"):
        raise BadRequest(f"content type {content_type} is not read: send application/json or a .npy/.npz", 415)
    if len(raw) > MAX_INPUT_BYTES * 8:  # JSON numbers take more bytes than their arrays
        raise BadRequest(f"the JSON body is over {MAX_INPUT_BYTES * 8:,} bytes", 413)
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"the body is not JSON: {exc}") from None
    return json_inputs(document), "json"


def json_inputs(document) -> dict[str, np.ndarray]:
    """`{"inputs": {name: nested lists}}` as arrays of the signature's dtypes."""
    if not isinstance(document, dict) or not isinstance(document.get("inputs"), dict):
        raise BadRequest('the JSON must be {"inputs": {name: nested lists of numbers}}')
    _check_names(document["inputs"])
    arrays = {}
    for name, values in document["inputs"].items():
        spec = next(s for s in INPUT_SPECS if s["name"] == name)
        try:
            array = np.asarray(values)
        except (ValueError, TypeError) as exc:
            raise BadRequest(f"{name}: not a regular nested list of numbers: {exc}") from None
        if array.dtype.kind not in "biuf":
            raise BadRequest(f"{name}: not numbers (read as {array.dtype})")
        wanted = np.dtype(spec["dtype"])
        whole = array.dtype.kind != "f" or (np.all(np.isfinite(array)) and np.all(array == np.round(array)))
        if wanted.kind in "iub" and not whole:
            raise BadRequest(f"{name} takes {wanted.name}: the values are not whole numbers")
        arrays[name] = array.astype(wanted)
        if arrays[name].nbytes > MAX_INPUT_BYTES:
            raise BadRequest(f"{name} is {arrays[name].nbytes:,} bytes; at most {MAX_INPUT_BYTES:,} are read", 413)
    return arrays


def _check_names(inputs: dict) -> None:
    names = [spec["name"] for spec in INPUT_SPECS]
    missing = [n for n in names if n not in inputs]
    unknown = sorted(n for n in inputs if n not in names)
    if missing or unknown:
        parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"unknown {', '.join(unknown)}"] if unknown else []
        )
        raise BadRequest(f"the model takes {', '.join(names)}: {'; '.join(parts)}", 422)


def check_inputs(inputs: dict) -> dict[str, np.ndarray]:
    """`inputs` as the model takes them, or `BadRequest` (422) naming what differs from the
    signature: a missing or unknown name, a dtype, a rank, a fixed dim, a dynamic dim outside its
    range or inconsistent across inputs, an index out of its table."""
    _check_names(inputs)
    sizes: dict[str, tuple[int, str]] = {}
    total = 0
    for spec in INPUT_SPECS:
        name, array = spec["name"], inputs[spec["name"]]
        if array.dtype != np.dtype(spec["dtype"]):
            raise BadRequest(f"{name} takes {spec['dtype']}; the request's is {array.dtype}", 422)
        total += array.nbytes
        dims = spec.get("dims")
        if dims is None:
            continue
        if array.ndim != len(dims):
            raise BadRequest(f"{name} has {len(dims)} dims {_shape_text(dims)}; the request's {list(array.shape)}", 422)
        for axis, (dim, size) in enumerate(zip(dims, array.shape, strict=True)):
            if isinstance(dim, int):
                if dim != size:
                    raise BadRequest(
                        f"{name} has a fixed size {dim} on axis {axis} {_shape_text(dims)}: the request's is {size}",
                        422,
                    )
                continue
            allowed = (SIGNATURE.get("dim_ranges") or {}).get(dim) or {}
            low, high = allowed.get("min"), allowed.get("max")
            if (low is not None and size < low) or (high is not None and size > high):
                raise BadRequest(
                    f"{name}'s dim {dim} (axis {axis}) accepts {'' if low is None else low}.."
                    f"{'' if high is None else high}: the request's is {size}",
                    422,
                )
            if dim in sizes and sizes[dim][0] != size:
                raise BadRequest(f"{name}'s dim {dim} is {size}; {sizes[dim][1]}'s is {sizes[dim][0]}", 422)
            sizes.setdefault(dim, (size, name))
        bound = spec.get("index_bound")
        if bound is not None and array.size and (array.min() < 0 or array.max() >= bound):
            raise BadRequest(f"{name} indexes a table of {bound} rows: its values must be in 0..{bound - 1}", 422)
    if total > MAX_INPUT_BYTES:
        raise BadRequest(f"the inputs are {total:,} bytes; at most {MAX_INPUT_BYTES:,} are read", 413)
    return {spec["name"]: inputs[spec["name"]] for spec in INPUT_SPECS}


def _shape_text(dims: list) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


def feed_of(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model's feed: by name when the artifact keeps the signature's names, else in order."""
    if set(inputs) == set(SESSION_INPUTS):
        return inputs
    return dict(zip(SESSION_INPUTS, inputs.values(), strict=True))


def _answer(status: int, document: dict) -> dict:
    return {
        "statusCode": status,
        "headers": {"Content-Type": "application/json"},
        "body": json.dumps(document, allow_nan=True),
        "isBase64Encoded": False,
    }


def _arrays_answer(outputs: dict[str, np.ndarray]) -> dict:
    buffer = io.BytesIO()
    if len(outputs) == 1:
        np.save(buffer, np.asarray(next(iter(outputs.values()))), allow_pickle=False)
        content_type = "application/x-npy"
    else:
        np.savez(buffer, **{name: np.asarray(value) for name, value in outputs.items()})
        content_type = "application/x-npz"
    return {
        "statusCode": 200,
        "headers": {"Content-Type": content_type},
        "body": base64.b64encode(buffer.getvalue()).decode(),
        "isBase64Encoded": True,
    }
