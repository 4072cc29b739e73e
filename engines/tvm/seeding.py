"""Schedules tuned at another batch size seed the search of this one.

A model's kernels at batch 4 are its kernels at batch 1 with a larger batch (or batch x sequence)
loop: the same blocks, the same loop nests, other extents. Their records do not match (a
workload is its exact shapes), but their traces (the schedule's steps: tile, reorder, parallel,
vectorize, unroll, compute-at) carry over: `transfer` replays a trace tuned for an analogous
kernel (same blocks, loops and buffer ranks; `analogous`) on this one, and where a tile's factors
no longer multiply to the loop's new extent, keeps the inner factors that still divide it and
gives the rest to the outermost (the batch loop grows; vector widths and cache tiles stay).

`seeds(database_dirs, kernel)` are those schedules, postprocessed, measured as a task's first
batch (`search.time_limited`): the evolutionary search then starts from them (it picks its
initial population from the best measured), so a second batch size needs fewer trials to reach
what the first reached. Kernels identical across batch sizes (a batch-independent one) are not
seeded: their records are taken whole (`tuning._borrow_schedules`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import structlog

from engines.tvm.records import open_records, read_meta, same_kernel

log = structlog.get_logger()

_NUMBER = re.compile(r"(?<![A-Za-z_])\d+(\.\d+)?(e[-+]?\d+)?")
SEEDS_PER_KERNEL = 8  # the best traces of an analogous kernel replayed on this one (at most a batch)


class Seeds:
    """The tuned traces of other batch sizes' records (same tuning target), read once per
    conversion; `for_kernel(mod)` are those of the analogous kernels, best first."""

    def __init__(self, folders: list[Path], tune_spec: dict) -> None:
        self.records: list[tuple[str, object, list]] = []  # (shape-free script, module, [traces best first])
        for folder in folders:
            if read_meta(Path(folder)).get("target") != tune_spec:
                continue
            database = open_records(Path(folder))
            if database is None:
                continue
            for workload, mod in _unique_workloads(database):
                best = database.get_top_k(workload, SEEDS_PER_KERNEL)
                if best:
                    self.records.append((shape_free(mod), mod, [record.trace for record in best]))

    def __bool__(self) -> bool:
        return bool(self.records)

    def for_kernel(self, mod) -> list:
        """The traces of the analogous kernels (not the same one: that one is borrowed whole)."""
        try:
            structure = shape_free(mod)
        except Exception:  # a kernel this TVM does not print: not seeded
            return []
        traces: list = []
        for other_structure, other, found in self.records:
            if other_structure == structure and not same_kernel(other, mod):
                traces.extend(found)
        return traces[:SEEDS_PER_KERNEL]


def _unique_workloads(database) -> list:
    """Each workload the records hold, once (with its module)."""
    import tvm_ffi

    found: dict[int, tuple] = {}
    for record in database.get_all_tuning_records():
        mod = record.workload.mod
        found.setdefault(int(tvm_ffi.structural_hash(mod)), (record.workload, mod))
    return list(found.values())


def shape_free(mod) -> str:
    """A kernel's TVMScript with every number left out: the same blocks, loops, buffers and
    operations, whatever their extents (and constants)."""
    return _NUMBER.sub("#", mod.script(show_meta=False))


def adapted_tile(decision: list[int], extent: int) -> list[int]:
    """Tile factors of `decision` made to multiply to `extent`: the inner factors kept while they
    still divide what is left of it (innermost first), the outermost takes the rest."""
    factors = [int(f) for f in decision]
    if math.prod(factors) == extent:
        return factors
    left = extent
    kept = [1] * len(factors)
    for index in range(len(factors) - 1, 0, -1):
        if left % factors[index] == 0:
            kept[index] = factors[index]
            left //= factors[index]
    kept[0] = left
    return kept


def transfer(trace, mod, postprocs):
    """`trace` replayed on `mod` (`adapted_tile` where a tile no longer fits) and postprocessed;
    None when it does not apply (a step names what this kernel lacks, a postprocessor refuses)."""
    import tvm

    schedule = tvm.s_tir.Schedule(mod, debug_mask="all")

    def decide(instruction, inputs, attrs, decision):
        if decision is not None and instruction.kind.name in ("SamplePerfectTile", "SamplePartitionedTile"):
            loop = schedule.get(inputs[0])
            extent = loop.extent
            if isinstance(extent, tvm.tirx.IntImm):
                return adapted_tile(list(decision), int(extent.value))
        return decision

    try:
        trace.apply_to_schedule(schedule, remove_postproc=True, decision_provider=decide)
        schedule.enter_postproc()
        if not all(postproc.apply(schedule) for postproc in postprocs):
            return None
    except Exception:
        return None
    return schedule


def seed_candidates(seeds: Seeds, context) -> list:
    """The measure candidates of `context`'s kernel (a TuneContext) transferred from `seeds`,
    each once."""
    from tvm.s_tir import meta_schedule as ms

    if not seeds:
        return []
    postprocs = list(context.space_generator.postprocs or [])
    candidates, seen = [], []
    for trace in seeds.for_kernel(context.mod):
        schedule = transfer(trace, context.mod, postprocs)
        if schedule is None or any(same_kernel(schedule.mod, other) for other in seen):
            continue
        seen.append(schedule.mod)
        # the arguments of the scheduled kernel: a weight's packed layout (`RewriteLayout`) is its argument
        candidates.append(
            ms.MeasureCandidate(schedule, ms.arg_info.ArgInfo.from_entry_func(schedule.mod, remove_preproc=True))
        )
    return candidates
