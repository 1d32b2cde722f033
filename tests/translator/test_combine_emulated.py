"""The generated split-KV combine kernel, executed on the CPU (tests/translator/warp_emulator.py): its
LSE merge and weighted sum of the partial rows against a float64 reference, every element, with empty
splits (LSE −inf, partial rows NaN: never read), a row whose every split is empty (O = 0, LSE = +inf),
split counts from 2 to 128, head dims 64 to 256, every number of warps a row
(1, 2, 4, 8), at the output strides of a (batch, seqlen_q, heads,
d) tensor. On the GPU the whole decode is verified by benchmarks/verify_decode.py."""

from __future__ import annotations

import ctypes
import math
import re
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from warp_emulator import build

from pipeline.build import translate_text
from runner.abi import COMBINE_PARAMS, COMBINE_THREADS
from runner.decode import combine_warps_per_row

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "inference" / "paged_decode.tl"


@cache
def _combine(d: int) -> ctypes.CDLL:
    text = re.sub(r"(?m)^Param d = \d+", f"Param d = {d}", EXAMPLE.read_text())
    t = translate_text(text, Path(f"paged_decode_d{d}.tl"))
    assert t.spec.combine_name is not None
    return build(t.source, t.spec.combine_name, [(name, ctype) for name, ctype, _ in COMBINE_PARAMS])


def _reference(o_acc: np.ndarray, lse_acc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(O (rows, d), LSE (rows,)) from the splits' (splits, rows, d) partials and (splits, rows) LSEs."""
    kept = np.isfinite(lse_acc)
    m = np.where(kept, lse_acc, -np.inf).max(axis=0)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    w = np.where(kept, np.exp(np.where(kept, lse_acc, 0.0) - m_safe), 0.0)
    total = w.sum(axis=0)
    lse = np.where(total > 0, m_safe + np.log(np.where(total > 0, total, 1.0)), np.inf)
    w = w / np.where(total > 0, total, 1.0)
    o = np.einsum("sr,srd->rd", w, np.where(kept[..., None], o_acc, 0.0))
    return o, lse


@pytest.mark.parametrize("per_row", [1, 2, 4, 8, None], ids=lambda w: f"warps_per_row={w or 'auto'}")
@pytest.mark.parametrize(
    ("batch", "heads", "seqlen_q", "splits", "d"),
    [(1, 4, 1, 45, 128), (2, 3, 2, 5, 64), (1, 2, 1, 128, 256), (1, 3, 1, 33, 128), (2, 5, 1, 2, 128)],
)
def test_the_combine_merges_the_splits_by_their_lse(
    batch: int, heads: int, seqlen_q: int, splits: int, d: int, per_row: int | None
) -> None:
    """Every share of a row among the block's warps (None: the launch's choice); the row counts leave
    the last block part empty where a block holds several rows."""
    rng = np.random.default_rng(splits * 1000 + d)
    rows = batch * heads * seqlen_q
    lse_acc = rng.normal(0.0, 3.0, (splits, rows)).astype(np.float32)
    o_acc = rng.normal(0.0, 1.0, (splits, rows, d)).astype(np.float32)
    empty = rng.random((splits, rows)) < 0.3  # splits past a sequence's keys
    empty[:, rows - 1] = True  # a row that kept no key at all
    lse_acc[empty] = -np.inf
    o_acc[empty] = np.nan  # an empty split's partial row is never written: it must not be read
    o = np.full((batch, seqlen_q, heads, d), np.nan, dtype=np.float32)
    lse = np.full(rows, np.nan, dtype=np.float32)
    lib = _combine(d)
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    strides = [s // 4 for s in o.strides[:3]]  # elements: (batch, row, head)
    per_row = per_row or combine_warps_per_row(splits)
    grid = math.ceil(rows / (COMBINE_THREADS // 32 // per_row))
    lib.launch(grid, COMBINE_THREADS, ptr(o_acc), ptr(lse_acc), ptr(o), ptr(lse), batch, seqlen_q, heads,
               splits, *strides, per_row)  # fmt: skip
    want_o, want_lse = _reference(o_acc.astype(np.float64), lse_acc.astype(np.float64))
    got_o = o.transpose(0, 2, 1, 3).reshape(rows, d)  # row = (b · heads + h) · seqlen_q + i
    assert np.array_equal(np.isinf(lse), np.isinf(want_lse)) and np.isinf(lse[rows - 1]) and lse[rows - 1] > 0
    finite = np.isfinite(want_lse)
    np.testing.assert_allclose(lse[finite], want_lse[finite], rtol=0, atol=2e-5)
    np.testing.assert_allclose(got_o, want_o, rtol=2e-5, atol=2e-6)
    assert not np.isnan(got_o).any() and (got_o[rows - 1] == 0).all()
