"""Where the CLI writes: `terminal.err` (progress, messages: stderr) and `terminal.out(...)`
(tables, JSON: stdout). While a run's log takes the process's stdout and stderr
(`ayci/cli/runlog.py`), both still reach the user's terminal through the descriptors it saved."""

from __future__ import annotations

import json
from typing import IO

from rich.console import Console


class UsageError(Exception):
    """Bad input, named: printed as `error: ...`, exit status 2."""


class Terminal:
    def __init__(self) -> None:
        self.err = Console(stderr=True)
        self._out: IO[str] | None = None  # None: whatever sys.stdout is at the time (pytest's capture)

    def use(self, out: IO[str] | None, err: IO[str] | None) -> None:
        """Write to these streams (the terminal's, saved before a run's log took fds 1 and 2);
        None: back to sys.stdout / sys.stderr."""
        self._out = out
        self.err.file = err

    def out(self, min_width: int = 0) -> Console:
        """A console on stdout at least `min_width` wide (wide tables stay readable in a pipe)."""
        width = Console(file=self._out).width
        return Console(file=self._out, width=max(width, min_width))

    def print(self, text: str) -> None:
        """Plain text on stdout (JSON documents: no markup, no wrapping)."""
        print(text, file=self._out, flush=True)

    def print_json(self, document, indent: int = 1) -> None:
        self.print(json.dumps(document, indent=indent))


terminal = Terminal()
err = terminal.err
