"""engines.tvm.search.TimeLimit: when a TVM search stops starting batches (no TVM needed)."""

from __future__ import annotations

from engines.tvm import search


def test_a_batch_is_started_only_if_it_ends_before_the_limit_at_the_pace_so_far(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(search.time, "perf_counter", lambda: clock[0])
    limit = search.TimeLimit(60, started=100.0)  # ends at 160
    clock[0] = 110.0
    assert limit.allows(32)  # no pace yet: the first batch starts while time is left
    limit.started_batch(32)
    clock[0] = 142.0  # 32 trials in 32 s: 1 s a trial
    assert limit.allows(18)  # would end at 160
    assert not limit.allows(19)  # would end at 161
    assert limit.reached and not limit.allows(1)  # once reached, the search has ended


def test_the_first_batch_does_not_start_past_the_limit_and_no_limit_allows_everything(monkeypatch):
    clock = [200.0]
    monkeypatch.setattr(search.time, "perf_counter", lambda: clock[0])
    assert not search.TimeLimit(60, started=100.0).allows(1)
    unlimited = search.TimeLimit(None, started=0.0)
    unlimited.started_batch(10)
    clock[0] = 1e9
    assert unlimited.allows(10**6) and not unlimited.reached
