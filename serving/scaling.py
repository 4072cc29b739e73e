"""When a model's pool grows and shrinks: out by one worker while requests wait beyond what the
workers already starting will take, up to `max_workers`; in by one worker idle longer than
`idle_s`, down to one (a model with no worker at all is evicted, not scaled in).

`lambda_like`: the pool a Lambda function is (and the traffic simulation models): a request that
finds no idle worker starts one of its own at once (a cold start it waits for), up to
`max_workers` (the concurrency limit; past it requests queue); every worker idle longer than
`idle_s` is reclaimed, down to none. The scaler's ticks add no worker then (`scale_out` is False):
the pool starts them as requests come (`pool.ModelPool.submit`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScalingPolicy:
    max_workers: int = 2
    requests_per_worker: int = 1  # queued requests a starting worker is counted to take
    idle_s: float = 30.0
    lambda_like: bool = False

    def __post_init__(self) -> None:
        if self.max_workers < 1:
            raise ValueError(f"max workers: at least 1, got {self.max_workers}")
        if self.idle_s <= 0:
            raise ValueError(f"idle time: above 0 s, got {self.idle_s}")

    def scale_out(self, *, queued: int, idle_workers: int, starting: int, workers: int) -> bool:
        """Start one more worker? `workers` counts the running and the starting ones."""
        if self.lambda_like or workers >= self.max_workers:
            return False
        waiting = queued - idle_workers
        return waiting > starting * self.requests_per_worker

    def scale_in(self, *, idle_for_s: list[float], workers: int) -> int:
        """How many idle workers to stop (their idle times in `idle_for_s`): the ones idle
        longer than `idle_s`, keeping at least one worker (none when `lambda_like`)."""
        expired = sum(1 for s in idle_for_s if s > self.idle_s)
        return max(0, min(expired, workers - (0 if self.lambda_like else 1)))
