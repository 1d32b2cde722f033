"""The rank statistics of the planner benchmark (the GPU part itself runs only on a device)."""

from __future__ import annotations

import pytest

from translator.planner.measure import ranks, spearman


def test_ranks_largest_first_ties_share() -> None:
    assert ranks([10.0, 30.0, 20.0, 30.0]) == [4.0, 1.5, 3.0, 1.5]


def test_spearman() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [40, 30, 20, 10]) == pytest.approx(-1.0)
    # d² = 1 + 1 + 0 + 0 for ranks (1,2,3,4) vs (2,1,3,4): 1 − 6·2 / (4·15) = 0.8
    assert spearman([4, 3, 2, 1], [3, 4, 2, 1]) == pytest.approx(0.8)
    assert spearman([1], [2]) is None and spearman([1, 1], [1, 2]) is None
