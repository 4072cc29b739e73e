"""Failure reasons: kept whole (bounded) where they are stored, shortened only where shown.

`whole(...)` is what a ComboFailed, a summary and the API carry: the full message without
Python or C++ backtraces, at most REASON_LIMIT characters. `decisive(...)` is what a table row,
the page's cell or an email line shows: the message on one line, cut at a sentence boundary.
"""

from __future__ import annotations

import re

REASON_LIMIT = 4000
SHOWN_LIMIT = 400
_FRAME = re.compile(
    r"^\s*(File \"|\d+: |at |Stack trace:|Traceback \(most recent call last\):|\^+$|~+$|During handling)"
)


def whole(text_or_exc: object) -> str:
    """The reason without backtrace frames, whole up to REASON_LIMIT characters."""
    if isinstance(text_or_exc, BaseException):
        text = f"{type(text_or_exc).__name__}: {text_or_exc}".strip()
    else:
        text = str(text_or_exc).strip()
    lines = [line.rstrip() for line in text.splitlines() if line.strip() and not _FRAME.match(line)]
    kept = "\n".join(lines) or text
    return kept if len(kept) <= REASON_LIMIT else kept[: REASON_LIMIT - 20] + " … (cut)"


def from_traceback(stderr: str) -> str:
    """The exception a Python process died of, whole (every line of its message), from its
    stderr; the last line if there is no traceback."""
    lines = stderr.strip().splitlines()
    start = max(
        (i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")), default=None
    )
    if start is None:
        tail = [line for line in lines if line.strip()]
        return whole(tail[-1] if tail else "no output")
    block = lines[start + 1 :]
    first = next((i for i, line in enumerate(block) if line and not line.startswith((" ", "\t"))), None)
    return whole("\n".join(block[first:]) if first is not None else block[-1] if block else "no output")


def decisive(reason: str, limit: int = SHOWN_LIMIT) -> str:
    """The reason on one line, at most `limit` characters, cut after a whole sentence."""
    line = " ".join(reason.split())
    if len(line) <= limit:
        return line
    cut = line[:limit]
    end = max(cut.rfind(". "), cut.rfind("; "), cut.rfind(": "))
    return (cut[: end + 1] if end > limit // 2 else cut.rstrip()) + " …"
