"""The tuning records of a conversion: MetaSchedule's JSON database and AYCI's meta beside it.

A folder of records holds `database_workload.json`, `database_tuning_record.json` (MetaSchedule)
and `ayci_tuning.json` (`TUNING_META`: tuning target, trials measured, trials asked, tasks).
Kernels that share their anchor block (one matmul with different fused epilogues) are one
workload (`MODULE_EQUALITY`). `Tuning` is what a conversion's tuning comes to.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

TUNING_META = "ayci_tuning.json"
MODULE_EQUALITY = "anchor-block"
MIN_TRIALS_PER_TASK = 8


class Tuning:
    """What a tuning came to: the records to apply and what the details report of it."""

    def __init__(
        self,
        database=None,
        trials: int = 0,
        tasks: int = 0,
        seconds: float = 0.0,
        reused: bool = False,
        scratch: str | None = None,
        borrowed: int = 0,
        estimates: dict | None = None,
        time_limited: bool = False,
        seeded: int = 0,
    ):
        self.database, self.trials, self.tasks, self.seconds, self.reused = database, trials, tasks, seconds, reused
        self.time_limited = time_limited  # the time limit, not the trials, ended the search
        self.estimates = estimates or {}  # each build's ms as the race last estimated it (`search`)
        self.borrowed = borrowed  # kernels whose schedules came from other models' records
        self.seeded = seeded  # kernels whose search started from schedules tuned at another batch size
        self._scratch = scratch

    def close(self) -> None:
        if self._scratch and not os.environ.get("AYCI_TVM_KEEP_LOGS"):  # debugging: keep MetaSchedule's logs
            shutil.rmtree(self._scratch, ignore_errors=True)


def read_meta(directory: Path) -> dict:
    """The meta (`TUNING_META`) of the records in `directory`; empty when it does not read."""
    try:
        return json.loads((directory / TUNING_META).read_text())
    except (OSError, ValueError):
        return {}


@dataclass
class Records:
    """The tuning records a search adds to: MetaSchedule's database in `folder`, and what its
    meta (TUNING_META) said before: trials measured, trials asked for, tasks searched."""

    database: object
    folder: Path
    have: int = 0
    asked: int = 0
    tasks: int = 0

    def write_meta(self, tune_spec: dict, measured: int, asked: int, tasks: int) -> None:
        meta = {
            "target": tune_spec,
            "trials": self.have + measured,
            "trials_asked": max(self.asked, self.have + asked),
            "tasks": self.tasks + tasks,
        }
        (self.folder / TUNING_META).write_text(json.dumps(meta))


def open_records(folder: Path):
    """MetaSchedule's JSON database in `folder`, or None when its files do not load."""
    from tvm.s_tir import meta_schedule as ms

    try:
        return ms.database.JSONDatabase(work_dir=str(folder), module_equality=MODULE_EQUALITY)
    except Exception:
        return None


def same_kernel(one, other) -> bool:
    """Whether two tasks' modules are the same kernel (the same computation at the same shapes)."""
    import tvm_ffi

    return bool(tvm_ffi.structural_equal(one, other))


def best_s(database, kernel) -> float | None:
    """The best time the records hold for `kernel` (a task's module), None if none."""
    if not database.has_workload(kernel):
        return None
    best = database.get_top_k(database.commit_workload(kernel), 1)
    return float(np.mean([float(s) for s in best[0].run_secs])) if best else None
