"""TVM's own output kept off the terminal, and the tuning's progress as structlog events.

MetaSchedule prints its task tables and `[INFO] TaskScheduler picks Task ...` lines through
Python's logging (each search adds a handler on `sys.stdout` to `tvm.s_tir.meta_schedule`), and
TVM's C++ code writes its warnings (e.g. "Fast mode segfaults when there are out-of-bounds
indices") straight to the process's stderr. During a conversion (`captured`), MetaSchedule's logs
and Python warnings go to a log file. When the caller names the run's log file
(`send_output_to`), the process's stderr (file descriptor 2) goes there too while TVM works, so
TVM's C++ warnings, and those of its builder processes, land in it. Otherwise the log is a file in
the conversion's work dir, and stderr is left alone (a service's stderr is its log stream).

Progress: `PROGRESS_EVENT` (`tvm.tuning.progress`, level info) after every batch of trials
measured, with `trials_done`, `trials_total`, `best_ms` and `finished`.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import structlog

from engines.tvm import PROGRESS_EVENT

META_SCHEDULE_LOGGER = "tvm.s_tir.meta_schedule"

log = structlog.get_logger()
_run_log: Path | None = None  # named by the caller: every conversion of this process writes there
_current: Path | None = None  # the log file of the conversion under way


def send_output_to(path: Path | str | None) -> None:
    """Send TVM's output (MetaSchedule's tables and logs, TVM's warnings, the process's stderr
    while TVM converts) to `path`, appended, for every conversion of this process from now on;
    None: back to a log file in each conversion's work dir, stderr untouched."""
    global _run_log
    _run_log = None if path is None else Path(path)


def output_path() -> Path | None:
    """The run's log file named by `send_output_to`, if any."""
    return _run_log


@contextmanager
def captured(default: Path) -> Iterator[Path]:
    """While open, TVM's output goes to the run's log file, or to `default` when none is named
    (see the module's docstring); yields the file used."""
    global _current
    path = _run_log or default
    path.parent.mkdir(parents=True, exist_ok=True)
    previous, _current = _current, path
    with open(path, "a", encoding="utf-8") as out, warnings.catch_warnings():

        def show(message, category, filename, lineno, file=None, line=None) -> None:
            out.write(warnings.formatwarning(message, category, filename, lineno, line))
            out.flush()

        warnings.showwarning = show
        saved = _redirect_stderr(out) if _run_log is not None else None
        try:
            yield path
        finally:
            if saved is not None:
                sys.stderr.flush()
                os.dup2(saved, 2)
                os.close(saved)
            _detach_meta_schedule(path)
            _current = previous


def _redirect_stderr(out) -> int:
    """File descriptor 2 pointed at `out`; returns a duplicate of what it was, to restore."""
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(out.fileno(), 2)
    return saved


@contextmanager
def meta_schedule_logs() -> Iterator[None]:
    """Around the creation of a search's tune contexts (which configures MetaSchedule's loggers):
    its console handler printing to stdout is replaced by the conversion's log file."""
    logger = logging.getLogger(META_SCHEDULE_LOGGER)
    logger.setLevel(logging.CRITICAL)  # the console handler the loggers' configuration adds takes this level
    try:
        yield
    finally:
        for handler in list(logger.handlers):
            if type(handler) is logging.StreamHandler:  # the console (a FileHandler is a StreamHandler too)
                logger.removeHandler(handler)
        if _current is not None and not _handler_for(logger, _current):
            handler = logging.FileHandler(_current, encoding="utf-8")
            handler.setLevel(logging.INFO)
            handler.setFormatter(logging.Formatter("%(asctime)s [%(levelname)s] %(message)s"))
            logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)


def _handler_for(logger: logging.Logger, path: Path) -> logging.Handler | None:
    target = os.path.abspath(path)
    return next((h for h in logger.handlers if getattr(h, "baseFilename", None) == target), None)


def _detach_meta_schedule(path: Path) -> None:
    logger = logging.getLogger(META_SCHEDULE_LOGGER)
    handler = _handler_for(logger, path)
    if handler is not None:
        logger.removeHandler(handler)
        handler.close()


def progress(trials_done: int, trials_total: int, best_ms: float | None, *, finished: bool = False, **context) -> None:
    """One `tvm.tuning.progress` event: the trials measured of those asked (stored records
    included), and the model's time as the records estimate it (`best_ms`: the fastest build's
    kernels' best times x calls; None until every kernel of a build has a record)."""
    log.info(
        PROGRESS_EVENT,
        trials_done=trials_done,
        trials_total=trials_total,
        best_ms=None if best_ms is None else float(f"{best_ms:.4g}"),  # 4 significant digits: a tiny kernel is µs
        finished=finished,
        **context,
    )
