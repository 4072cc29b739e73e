"""A tile tuned at one batch size refitted to another's loop (`engines/tvm/seeding.adapted_tile`)."""

from __future__ import annotations

import math

import pytest

from engines.tvm.seeding import adapted_tile


@pytest.mark.parametrize(
    ("decision", "extent", "expected"),
    [
        ([2, 4, 8, 2], 128, [2, 4, 8, 2]),  # it fits: kept
        ([2, 4, 8, 2], 512, [8, 4, 8, 2]),  # batch 4: the outermost takes the growth, vector width and cache tiles kept
        ([1, 1, 1, 1], 4, [4, 1, 1, 1]),  # a batch loop of 1 at batch 1
        ([4, 1, 3, 2], 10, [5, 1, 1, 2]),  # 3 does not divide what is left: dropped to 1
        ([16, 8], 24, [3, 8]),
    ],
)
def test_inner_factors_that_still_divide_are_kept_and_the_outermost_takes_the_rest(decision, extent, expected):
    tile = adapted_tile(decision, extent)
    assert tile == expected and math.prod(tile) == extent
