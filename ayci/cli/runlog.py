"""A run's log file, and a quiet terminal while it runs.

Inside `run_log(path)` everything but AYCI's own progress goes to the log file:
- structlog events as JSON lines (`-v` also echoes them to the terminal);
- the standard library's logging (torch, ONNX, TVM's MetaSchedule...) as JSON lines;
- Python warnings (`FutureWarning`, the torch exporter's "torchvision is not installed"...), through
  logging (`logging.captureWarnings`);
- whatever is written to file descriptors 1 and 2, when they are the process's own (not pytest's
  capture): C++ libraries' logs (TVM's `[INFO] TaskScheduler picks Task`), MetaSchedule's task
  tables (its logger writes to stdout), and every child process that inherits them (MetaSchedule's
  builders and runners). The terminal keeps copies of the two descriptors: `terminal.err` (the
  progress) and `terminal.out()` (the tables) write there.

Listeners (`listening`) see chosen structlog events before they are written, e.g. the tuning
progress bar follows `tvm.tuning.progress`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

import structlog

from ayci.cli.console import Terminal

LISTENERS: dict[str, list[Callable[[dict], None]]] = {}


@contextlib.contextmanager
def listening(event: str, callback: Callable[[dict], None]) -> Iterator[None]:
    """Call `callback(event_dict)` for each structlog event named `event` while inside."""
    LISTENERS.setdefault(event, []).append(callback)
    try:
        yield
    finally:
        LISTENERS[event].remove(callback)


def _dispatch(logger, method: str, event_dict: dict) -> dict:
    for callback in list(LISTENERS.get(event_dict.get("event"), ())):
        with contextlib.suppress(Exception):  # a progress bar never breaks a run
            callback(dict(event_dict))
    if method == "debug":
        raise structlog.DropEvent
    return event_dict


@dataclass
class RunLog:
    path: Path
    warnings: int = 0
    errors: int = 0

    def count(self, level: int) -> None:
        if level >= logging.ERROR:
            self.errors += 1
        elif level >= logging.WARNING:
            self.warnings += 1

    def where(self) -> str:
        """`log: PATH (N warnings, M errors)`: the line the CLI ends with."""
        counts = [
            f"{n} {what}{'s' if n != 1 else ''}"
            for n, what in ((self.warnings, "warning"), (self.errors, "error"))
            if n
        ]
        return f"log: {self.path}" + (f" ({', '.join(counts)})" if counts else "")


class _JsonLines(logging.Formatter):
    """A standard library record as one JSON line, like structlog's."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line)


class _Counting(logging.Filter):
    def __init__(self, log: RunLog) -> None:
        super().__init__()
        self.log = log

    def filter(self, record: logging.LogRecord) -> bool:
        self.log.count(record.levelno)
        return True


def _own(stream, fd: int) -> bool:
    """Whether `stream` writes to the process's descriptor `fd` (not a capture of it)."""
    try:
        return stream.fileno() == fd
    except (AttributeError, OSError, ValueError):
        return False


@contextlib.contextmanager
def _descriptors_to(handle: IO[str], terminal: Terminal) -> Iterator[None]:
    """Point fds 1 and 2 (those that are the process's own) at `handle`; the terminal writes
    to copies of them until the end."""
    saved: dict[int, int] = {}
    for fd, stream in ((1, sys.stdout), (2, sys.stderr)):
        if _own(stream, fd):
            stream.flush()
            saved[fd] = os.dup(fd)
    streams = {fd: open(copy, "w", buffering=1, encoding="utf-8", closefd=False) for fd, copy in saved.items()}  # noqa: SIM115
    terminal.use(out=streams.get(1), err=streams.get(2))
    for fd in saved:
        os.dup2(handle.fileno(), fd)
    try:
        yield
    finally:
        for fd, stream in ((1, sys.stdout), (2, sys.stderr)):
            if fd in saved:
                with contextlib.suppress(Exception):
                    stream.flush()
                os.dup2(saved[fd], fd)
        terminal.use(out=None, err=None)
        for fd, copy in saved.items():
            streams[fd].close()
            os.close(copy)


@contextlib.contextmanager
def run_log(path: Path, terminal: Terminal, *, verbose: bool = False) -> Iterator[RunLog]:
    """Everything but AYCI's own progress to the log file at `path` while inside (see above)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    log = RunLog(path)
    handle = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
    echo = structlog.dev.ConsoleRenderer(colors=False)

    def count(logger, method: str, event_dict: dict) -> dict:
        level = logging.ERROR if method == "exception" else logging.getLevelName(method.upper())
        log.count(level if isinstance(level, int) else logging.INFO)
        if verbose:
            terminal.err.print(echo(logger, method, dict(event_dict)), markup=False, highlight=False, soft_wrap=True)
        return event_dict

    before = structlog.get_config()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            _dispatch,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            count,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=structlog.WriteLoggerFactory(file=handle),
        cache_logger_on_first_use=False,
    )
    root = logging.getLogger()
    handler = logging.StreamHandler(handle)
    handler.setFormatter(_JsonLines())
    handler.addFilter(_Counting(log))
    root_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)
    try:
        with _descriptors_to(handle, terminal):
            yield log
    finally:
        logging.captureWarnings(False)
        root.removeHandler(handler)
        root.setLevel(root_level)
        structlog.configure(**before)
        handle.close()
