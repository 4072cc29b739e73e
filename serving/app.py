"""The endpoint's HTTP layer: `POST /invocations/{model}`, `POST /echo/{model}`, `GET /models`,
`GET /metrics`.

`/echo/{model}` does all an invocation does but the inference: reads and decodes the body as the
model's inputs, encodes them back as the answer. Its latency is the per-request overhead (HTTP,
(de)serialization, the event loop) the load test measures and adds to the simulation.

Status codes: 404 an unknown model, 413 a body over the limit (or arrays that would decode past
`max_decoded_bytes`, or that ran out of memory decoding), 400/415 a body that is not a tensor
(or nested too deep), 422 a tensor the model does not take (naming the input) or one the model
raised on, 503 with `Retry-After` when the model cannot take the request now (its queue is full, no
memory can be made, its worker died twice, it failed to load), 504 past the request timeout.
Answers: JSON `{"outputs": {NAME: [...]}}`, or `.npz` to a binary request; the headers say
whether the request waited for a cold load (`X-Cold-Load`) and the worker that answered.

Decoding a body and encoding its answer run in threads, off the event loop; at most
`decode_threads` bodies are decoded at once, so decoding holds at most that many times
`max_decoded_bytes` whatever the number of requests.
"""

from __future__ import annotations

import asyncio
import time
from functools import partial

import anyio
import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.concurrency import run_in_threadpool

from serving import wire
from serving.endpoint import Endpoint
from serving.metrics import Metrics
from serving.models import ServedModel
from serving.pool import InferenceFailed, LoadFailed, Overloaded, Served, WorkerLost
from serving.tensors import BadTensor, decode, model_inputs


class BodyTooLarge(Exception):
    pass


class _Limits:
    def __init__(self, body_bytes: int, decoded_bytes: int, decoders: anyio.CapacityLimiter) -> None:
        self.body_bytes, self.decoded_bytes, self.decoders = body_bytes, decoded_bytes, decoders


def create_app(
    endpoint: Endpoint,
    *,
    max_body_bytes: int = 16 << 20,
    request_timeout_s: float = 120.0,
    max_decoded_bytes: int | None = None,
    decode_threads: int = 2,
) -> FastAPI:
    """The endpoint's app. A body may have `max_body_bytes` on the wire and decode to
    `max_decoded_bytes` (default 4 times that: a compressed .npz may legitimately expand)."""
    limits = _Limits(max_body_bytes, max_decoded_bytes or 4 * max_body_bytes, anyio.CapacityLimiter(decode_threads))
    app = FastAPI(title="AYCI endpoint", description="The picks of AYCI runs, behind one endpoint")
    metrics = Metrics(endpoint)
    app.state.endpoint, app.state.metrics = endpoint, metrics

    @app.get("/models")
    def list_models() -> dict:
        return {
            "budget_mb": endpoint.budget.budget_mb,
            "reserved_mb": endpoint.budget.used_mb,
            "confined": endpoint.confinement_reason is None,
            "confinement_reason": endpoint.confinement_reason,
            "max_workers": endpoint.policy.max_workers,
            "idle_s": endpoint.policy.idle_s,
            "models": endpoint.state(),
        }

    @app.get("/metrics")
    def metrics_text() -> Response:
        return Response(metrics.text(), media_type=CONTENT_TYPE_LATEST)

    @app.post("/invocations/{model}")
    async def invoke(model: str, request: Request) -> Response:
        started = time.perf_counter()
        response, cold = await _invoke(endpoint, model, request, limits, request_timeout_s)
        known = model if model in endpoint.models else "(unknown)"
        metrics.requests.labels(known, str(response.status_code)).inc()
        if response.status_code == 200:
            metrics.latency.labels(known, "true" if cold else "false").observe(time.perf_counter() - started)
        return response

    @app.post("/echo/{model}")
    async def echo(model: str, request: Request) -> Response:
        served = endpoint.models.get(model)
        if served is None:
            return _refusal(404, f"no model {model!r}")
        try:
            body = await _read_body(request, limits.body_bytes)
        except BodyTooLarge:
            return _refusal(413, f"the body is over the limit of {limits.body_bytes / 2**20:g} MB")
        try:
            inputs, from_json = await anyio.to_thread.run_sync(
                partial(_inputs, body, request.headers.get("content-type", ""), served, limits.decoded_bytes),
                limiter=limits.decoders,
            )
        except BadTensor as exc:
            return _refusal(exc.status, str(exc))
        echoed = Served(wire.pack(inputs), cold=False, worker_pid=None, queued_ms=0.0, infer_ms=0.0)
        return await run_in_threadpool(_answer, model, served, echoed, from_json)

    return app


def _refusal(status: int, detail: str, retry_after_s: int | None = None) -> JSONResponse:
    headers = {"Retry-After": str(retry_after_s)} if retry_after_s is not None else None
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


async def _invoke(
    endpoint: Endpoint, name: str, request: Request, limits: _Limits, timeout_s: float
) -> tuple[Response, bool]:
    model = endpoint.models.get(name)
    if model is None:
        return _refusal(
            404, f"no model {name!r}; this endpoint serves {', '.join(sorted(endpoint.models))} (GET /models)"
        ), False
    try:
        body = await _read_body(request, limits.body_bytes)
    except BodyTooLarge:
        return _refusal(413, f"the body is over the limit of {limits.body_bytes / 2**20:g} MB"), False
    content_type = request.headers.get("content-type", "")
    try:
        inputs, from_json = await anyio.to_thread.run_sync(
            partial(_inputs, body, content_type, model, limits.decoded_bytes), limiter=limits.decoders
        )
    except BadTensor as exc:
        return _refusal(exc.status, str(exc)), False
    try:
        future = endpoint.infer(name, inputs)
        served = await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)
    except Overloaded as exc:
        return _refusal(503, str(exc), exc.retry_after_s), False
    except (WorkerLost, LoadFailed) as exc:
        return _refusal(503, str(exc), 1), False
    except InferenceFailed as exc:
        return _refusal(422, f"the model could not run on these inputs: {exc}"), False
    except TimeoutError:
        return _refusal(504, f"no answer within {timeout_s:g} s"), False
    return await run_in_threadpool(_answer, name, model, served, from_json), served.cold


def _inputs(body: bytes, content_type: str, model: ServedModel, max_bytes: int) -> tuple[dict[str, np.ndarray], bool]:
    """The model's inputs from a body (in a thread: decoding blocks); `BadTensor` with the status."""
    try:
        arrays, from_json = decode(body, content_type, max_bytes)
        return model_inputs(arrays, from_json, model.signature, model.fixed_batch), from_json
    except MemoryError:
        raise BadTensor(413, "decoding the body ran out of memory: send a smaller batch") from None
    except RecursionError:
        raise BadTensor(400, "the body is nested too deep to decode") from None


def _answer(name: str, model: ServedModel, served: Served, from_json: bool) -> Response:
    """The answer to a served request: JSON to JSON, `.npz` to binary (in a thread: encoding blocks)."""
    outputs = list(wire.unpack(served.payload).values())
    specs = model.signature.outputs if model.signature and len(model.signature.outputs) == len(outputs) else []
    names = [s.name for s in specs] or [f"output_{i}" for i in range(len(outputs))]
    headers = {
        "X-Cold-Load": "1" if served.cold else "0",
        "X-Worker-Pid": str(served.worker_pid),
        "X-Queued-Ms": f"{served.queued_ms:.3f}",
        "X-Inference-Ms": f"{served.infer_ms:.3f}",
    }
    if served.entered_at is not None:
        # when it entered the model's pool, on this host's monotonic clock (s): a load test on this host places
        # it against the time it was sent (`open_loop.RequestTiming.entered_s`)
        headers["X-Pool-Entered-At"] = f"{served.entered_at:.6f}"
    if from_json:
        return JSONResponse(
            {"model": name, "outputs": {n: np.asarray(o).tolist() for n, o in zip(names, outputs, strict=True)}},
            headers=headers,
        )
    return Response(wire.pack(dict(zip(names, outputs, strict=True))), media_type="application/x-npz", headers=headers)


class ServerThread:
    """The app served by uvicorn in a thread of this process on a free loopback port (the load
    test's endpoint; the tests')."""

    def __init__(self, app: FastAPI) -> None:
        import threading

        import uvicorn

        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, name="endpoint-http", daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the endpoint's HTTP server did not start")
            time.sleep(0.05)
        return f"http://127.0.0.1:{self.server.servers[0].sockets[0].getsockname()[1]}"

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)
