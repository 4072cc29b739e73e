"""The request service's HTTP API and web page: one FastAPI app, whatever hosts it (uvicorn
locally, Mangum in a Lambda behind API Gateway).

`create_app(deps)` only assembles: the routers (`routers/`: page, models, uploads, inputs, runs), the
API key gate (`auth.py`), the body size limit and the 422 format. The routes turn HTTP into
calls on the store, the uploader and the publisher in `deps` (`deps.py`), which the host wires
(`ayci/bootstrap.py`). Every route but the page and the OpenAPI document needs an API key
(`X-API-Key`: 401 without, 403 for a wrong one); the key names its owner, and a run of another
owner is a 404. Bodies are validated by pydantic and the contract (422 naming the field) and
size-limited (413).
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles

from services.request.auth import ApiKeyGate, parse_api_keys
from services.request.deps import RequestDeps, RequestLimits
from services.request.routers import compare, exports, inputs, models, page, runs, uploads

__all__ = ["RequestDeps", "RequestLimits", "create_app", "parse_api_keys"]


def create_app(deps: RequestDeps) -> FastAPI:
    """The API and the page over `deps`. No CDN: the interactive docs are off (they load
    from one); the OpenAPI document is at `/openapi.json`."""
    app = FastAPI(
        title="AYCI: All You Can Inference",
        version="1",
        description="Measure a PyTorch model under every optimizer x hardware x batch size x Lambda memory size.",
        docs_url=None,
        redoc_url=None,
    )
    app.state.deps = deps

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _jsonable_errors(exc.errors())}, status_code=422)

    app.add_middleware(BodySizeLimit, max_bytes=deps.limits.max_body_bytes, streamed_prefixes=("/uploads/", "/inputs"))
    app.add_middleware(ApiKeyGate, api_keys=deps.api_keys)  # outermost: nothing is read before the key
    app.include_router(page.router)
    app.mount("/static", StaticFiles(directory=page.WEB_DIR / "static"), name="static")
    app.include_router(models.router)
    if deps.uploader.receives_uploads:
        app.include_router(uploads.router)
    app.include_router(inputs.router)
    app.include_router(runs.router)
    app.include_router(exports.router)
    app.include_router(compare.router)
    return app


def _jsonable_errors(errors: list[dict]) -> list[dict]:
    """pydantic's errors without the parts that are not JSON (exception objects in `ctx`)."""
    return [
        {k: (str(v) if k == "ctx" else v) for k, v in e.items() if k in ("type", "loc", "msg", "ctx")} for e in errors
    ]


class BodySizeLimit:
    """ASGI middleware: a request body over `max_bytes` is a 413 before the app reads it,
    whether it announces its length or not. Paths under `streamed_prefixes` (uploads) are
    left to their route, which limits them itself while streaming."""

    def __init__(self, app: Callable, max_bytes: int, streamed_prefixes: tuple[str, ...] = ()) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.streamed_prefixes = streamed_prefixes

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope["path"].startswith(self.streamed_prefixes):
            return await self.app(scope, receive, send)
        too_large = JSONResponse(
            {"detail": f"the request body may have at most {self.max_bytes} bytes"}, status_code=413
        )
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            return await too_large(scope, receive, send)
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_bytes:
                return await too_large(scope, receive, send)
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
