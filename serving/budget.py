"""The endpoint's memory budget: every worker reserves its model's memory size (the cap its
cgroup enforces), and a model that needs room takes it from the least recently used models
that are idle (nothing queued, nothing running)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable


class MemoryBudget:
    def __init__(self, budget_mb: int) -> None:
        if budget_mb <= 0:
            raise ValueError(f"memory budget: above 0 MB, got {budget_mb}")
        self.budget_mb = budget_mb
        self._reserved: OrderedDict[str, int] = OrderedDict()  # least recently used first

    @property
    def used_mb(self) -> int:
        return sum(self._reserved.values())

    @property
    def free_mb(self) -> int:
        return self.budget_mb - self.used_mb

    def reserved_mb(self, model: str) -> int:
        return self._reserved.get(model, 0)

    def holds(self, model: str) -> bool:
        return model in self._reserved

    def touch(self, model: str) -> None:
        """`model` was just used: the last to be evicted."""
        if model in self._reserved:
            self._reserved.move_to_end(model)

    def evictions_for(self, model: str, need_mb: int, idle: Callable[[str], bool]) -> list[str] | None:
        """The models to evict, least recently used first, so that `need_mb` more fits for
        `model`: [] when it fits already, None when even evicting every idle model would not do."""
        free = self.free_mb
        if need_mb <= free:
            return []
        chosen = []
        for other, reserved in self._reserved.items():
            if other == model or not idle(other):
                continue
            chosen.append(other)
            free += reserved
            if need_mb <= free:
                return chosen
        return None

    def reserve(self, model: str, mb: int) -> None:
        if mb > self.free_mb:
            raise ValueError(f"{model}: {mb} MB do not fit in the {self.free_mb} MB left of the budget")
        self._reserved[model] = self._reserved.get(model, 0) + mb
        self._reserved.move_to_end(model)

    def release(self, model: str, mb: int) -> None:
        left = self._reserved.get(model, 0) - mb
        if left > 0:
            self._reserved[model] = left
        else:
            self._reserved.pop(model, None)

    def drop(self, model: str) -> int:
        """Release all of `model`'s memory (it is evicted); the MB it held."""
        return self._reserved.pop(model, 0)
