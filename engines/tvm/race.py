"""The race between builds (`nhwc` and `nhwc-winograd`) for the rest of a budget, after the first round.

In chunks of a quarter of the budget, each build's time is estimated from the records (its
kernels' best times x calls); a build more than RACE_MARGIN behind the best stops being tuned,
and the chunk goes to the kernels that matter of the builds still in. Once one is left, the rest
of the budget goes to it. A kernel every build runs alike whose candidates all failed is left
out of each estimate. docs/tvm.md has the measurements behind the margin.
"""

from __future__ import annotations

from collections.abc import Callable

from engines.tvm.records import best_s, same_kernel

# A build whose estimate is this much above the best's stops being tuned.
RACE_MARGIN = 0.15


def race(
    run: Callable[[list[int], int, int], None],
    measured: list[int],
    limit,
    database,
    uses: dict,
    kernels: list,
    budget: int,
    planned: int,
    progress: Callable[[str], None],
) -> dict[str, float]:
    """Spend what the first round left of `budget` (`measured[0]` counts the trials measured so
    far) on the builds of `uses` (`{build: [(kernel, calls)]}`, `tuning.extract_tasks`) while
    `limit` (`search.TimeLimit`) allows; `run(task indexes, trials, trials per round)` searches
    the tasks of `kernels` (their modules, in the search's task order). Returns each build's ms
    as last estimated ({} when no estimate was made)."""
    everything = list(range(len(kernels)))
    racing = list(uses)
    estimates: dict[str, float] = {}
    while (rest := budget - measured[0]) >= 4 and limit.allows(4):
        alike = run_alike(uses, racing)
        costs = {variant: c for variant in racing if (c := kernel_costs(database, uses[variant], alike)) is not None}
        if not costs:  # a kernel of every build has no record and they differ in it
            run(everything, rest, max(4, min(32, rest // len(everything) // 2)))
            break
        estimates = {variant: 1000 * sum(cost for _, cost in c) for variant, c in costs.items()}
        best = min(estimates.values())
        racing = [variant for variant, value in estimates.items() if value <= best * (1 + RACE_MARGIN)]
        focus = sorted({i for variant in racing for i in kernels_that_matter(costs[variant], kernels)})
        chunk = rest if len(racing) == 1 else min(rest, max(planned // 4, 4 * len(focus)))
        progress(
            f"tvm: estimated {', '.join(f'{k} {v:.1f} ms' for k, v in estimates.items())}; "
            f"{chunk} trials go to the {len(focus)} kernels that matter of {', '.join(racing)}"
        )
        before = measured[0]
        run(focus, chunk, max(4, min(32, chunk // len(focus) // 2)))
        if measured[0] == before:  # every task's search space is spent
            break
    return estimates


def kernel_costs(database, kernels: list, alike: list = ()) -> list | None:
    """A build's kernels (`kernels`: [(kernel, calls)]) each with its best recorded time x its
    calls, in seconds (their sum estimates the build); None when the records lack one of them
    (a guess for it would decide the estimate), unless it is one of `alike` (`run_alike`): it
    adds the same to every build raced, so leaving it out of each estimate keeps their order.
    After a first round that reached every kernel, a kernel without a record is one whose every
    candidate failed to run, such as the detector's gathers and takes (they index with an input,
    which MetaSchedule fills at random); it stays untuned whatever the race gives it."""
    costs = []
    for kernel, calls in kernels:
        seconds = best_s(database, kernel)
        if seconds is None:
            if runs_as_often(alike, kernel, calls):
                continue
            return None
        costs.append((kernel, calls * seconds))
    return costs


def run_alike(uses: dict, builds: list) -> list:
    """The kernels (`[(kernel, calls)]`) every one of `builds` runs, as often (`uses`: `extract_tasks`)."""
    first, *others = builds
    return [
        (kernel, calls)
        for kernel, calls in uses[first]
        if all(runs_as_often(uses[build], kernel, calls) for build in others)
    ]


def runs_as_often(kernels: list, kernel, calls: int) -> bool:
    """Whether `kernels` (`[(kernel, calls)]`) has `kernel`, called `calls` times."""
    return any(times == calls and same_kernel(kernel, other) for other, times in kernels)


def kernels_that_matter(costs: list, tasks: list) -> list[int]:
    """Indexes into `tasks` of a build's kernels (`costs`: [(kernel, seconds)], `kernel_costs`)
    that take at least 1% of its estimated time: the rest are done (an elementwise kernel takes
    0.01-0.1 ms of ResNet-18's 20+) and further trials would not show."""
    total = sum(cost for _, cost in costs) or 1.0
    chosen = [
        i
        for i, task in enumerate(tasks)
        if any(cost >= 0.01 * total and same_kernel(task, kernel) for kernel, cost in costs)
    ]
    return chosen or list(range(len(tasks)))


def best_estimate_ms(database, uses: dict) -> float | None:
    """The fastest build's time as the records estimate it, in ms (`kernel_costs`, a kernel
    every build runs alike left out when it has no record); None while no build has a record
    of each of its kernels."""
    alike = run_alike(uses, list(uses)) if len(uses) > 1 else []
    estimates = [
        1000 * sum(cost for _, cost in costs)
        for build in uses
        if (costs := kernel_costs(database, uses[build], alike)) is not None
    ]
    return min(estimates, default=None)
