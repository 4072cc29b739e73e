"""The API key: every route but the page and the OpenAPI document needs one (`X-API-Key`:
401 without, 403 for a wrong one); the key names its owner."""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, HTTPException, Request, Security
from fastapi.responses import JSONResponse
from fastapi.security import APIKeyHeader

API_KEY_HEADER = "X-API-Key"
OWNER_PATTERN = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
PUBLIC_PATHS = ("/", "/openapi.json")  # and /static/: the page needs no key


def parse_api_keys(text: str) -> dict[str, str]:
    """`"key1:owner1,key2:owner2"` -> `{"key1": "owner1", "key2": "owner2"}`."""
    keys = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, owner = item.partition(":")
        if not sep or len(key) < 8 or not OWNER_PATTERN.match(owner):
            raise ValueError(
                "an API key entry must be KEY:OWNER (key of 8+ characters, owner [A-Za-z0-9_.@-]), "
                f"got {item[:12]!r}..."
            )
        keys[key] = owner
    return keys


api_key_header = APIKeyHeader(name=API_KEY_HEADER, auto_error=False, description="your API key (it names your user)")


def auth_problem(api_keys: dict[str, str], key: str | None) -> tuple[int, str] | str:
    """The owner that `key` names, or (HTTP status, reason)."""
    if not key:
        return 401, f"an API key is needed: send it in the {API_KEY_HEADER} header"
    for known, owner in api_keys.items():
        if hmac.compare_digest(known.encode(), key.encode(errors="replace")):
            return owner
    return 403, "this API key is not valid"


def owner_of(request: Request, key: Annotated[str | None, Security(api_key_header)] = None) -> str:
    found = auth_problem(request.app.state.deps.api_keys, key)
    if isinstance(found, tuple):
        raise HTTPException(found[0], found[1], headers={"WWW-Authenticate": "ApiKey"} if found[0] == 401 else None)
    return found


Owner = Annotated[str, Depends(owner_of)]


class ApiKeyGate:
    """ASGI middleware: every path but the page's and the OpenAPI document's needs a valid key
    before anything else happens (routing, body parsing, size checks), so a caller without
    one learns nothing but 401/403. The routes' `Owner` dependency then names the owner (and
    documents the key in the OpenAPI document)."""

    def __init__(self, app: Callable, api_keys: dict[str, str]) -> None:
        self.app = app
        self.api_keys = api_keys

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope["path"] in PUBLIC_PATHS or scope["path"].startswith("/static/"):
            return await self.app(scope, receive, send)
        key = next((v.decode("latin-1") for k, v in scope["headers"] if k == API_KEY_HEADER.lower().encode()), None)
        found = auth_problem(self.api_keys, key)
        if isinstance(found, tuple):
            headers = {"WWW-Authenticate": "ApiKey"} if found[0] == 401 else None
            return await JSONResponse({"detail": found[1]}, status_code=found[0], headers=headers)(scope, receive, send)
        await self.app(scope, receive, send)
