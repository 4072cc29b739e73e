"""engines.tvm.race: how the race between builds estimates each from the records (no TVM
needed: kernels are names here, and the records a table of best times)."""

from __future__ import annotations

import pytest

from engines.tvm import race

BEST_S = {"conv-direct": 0.004, "conv-winograd": 0.002, "stem": 0.001, "gather": None}


@pytest.fixture(autouse=True)
def _kernels_are_names(monkeypatch):
    monkeypatch.setattr(race, "same_kernel", lambda one, other: one == other)
    monkeypatch.setattr(race, "best_s", lambda database, kernel: BEST_S.get(kernel))


USES = {
    "nhwc": [("stem", 1), ("conv-direct", 3), ("gather", 4)],
    "nhwc-winograd": [("stem", 1), ("conv-winograd", 3), ("gather", 4)],
}


def test_the_kernels_run_alike_are_those_every_build_runs_as_often():
    assert race.run_alike(USES, ["nhwc", "nhwc-winograd"]) == [("stem", 1), ("gather", 4)]
    other_calls = {**USES, "nhwc-winograd": [("stem", 1), ("conv-winograd", 3), ("gather", 2)]}
    assert race.run_alike(other_calls, ["nhwc", "nhwc-winograd"]) == [("stem", 1)]
    assert race.run_alike(USES, ["nhwc"]) == USES["nhwc"]


def test_a_kernel_without_records_that_every_build_runs_alike_is_left_out_of_each_estimate():
    alike = race.run_alike(USES, list(USES))
    costs = {build: race.kernel_costs(None, kernels, alike) for build, kernels in USES.items()}
    assert costs == {
        "nhwc": [("stem", 0.001), ("conv-direct", 0.012)],
        "nhwc-winograd": [("stem", 0.001), ("conv-winograd", 0.006)],
    }


def test_a_kernel_without_records_that_the_builds_run_differently_leaves_the_build_unestimated():
    assert race.kernel_costs(None, USES["nhwc"]) is None  # nothing alike: as before
    differently = [("stem", 1), ("conv-winograd", 3), ("gather", 2)]
    alike = race.run_alike({"nhwc": USES["nhwc"], "nhwc-winograd": differently}, ["nhwc", "nhwc-winograd"])
    assert race.kernel_costs(None, USES["nhwc"], alike) is None
    assert race.kernel_costs(None, differently, alike) is None
