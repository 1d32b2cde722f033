"""`benchmarks/window_sweep.py`'s arithmetic: the key blocks a sliding-window kernel computes and the line
fitted through the timings (the GPU part runs on the device machine)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.window_sweep import fit, key_blocks  # noqa: E402

CASES = [(1000, 64, 128, 128), (4096, 1024, 128, 128), (777, 1, 64, 32), (300, 5000, 128, 64)]


@pytest.mark.parametrize(("seqlen", "window", "bm", "bn"), CASES)
def test_key_blocks_are_the_blocks_with_a_kept_pair(seqlen: int, window: int, bm: int, bn: int):
    """Every (query tile, key block) with a pair kv ≤ q < kv + window, counted pair by pair."""
    want = 0
    for m in range(-(-seqlen // bm)):
        rows = range(m * bm, min(seqlen, (m + 1) * bm))
        for n in range(-(-seqlen // bn)):
            cols = range(n * bn, min(seqlen, (n + 1) * bn))
            want += any(max(cols.start, q - window + 1) <= min(cols.stop - 1, q) for q in rows)
    assert key_blocks(seqlen, window, bm, bn) == want


def test_the_fit_recovers_a_line():
    xs = [10.0, 20.0, 40.0, 80.0]
    a, b = fit(xs, [3.0 + 0.5 * x for x in xs])
    assert a == pytest.approx(3.0) and b == pytest.approx(0.5)
