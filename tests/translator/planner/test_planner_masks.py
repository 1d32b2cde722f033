"""The planner's view of a mask region (`translator.planner.masks`): key blocks per query tile and kept
pairs from the kernels' own block classification, and a ranking of key tiles that agrees with the H200's
A/B measurements of the catalogue's masked variants."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from kernel_ir import passes
from kernel_ir.expr import I32, Load, Var, const, op
from tl_language import analyze
from translator.planner import Shape, plan
from translator.planner.masks import blocks, kept_pairs, masks_of

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "docs" / "results"


def _text(variant: str, bn: str | None = None) -> str:
    sys.path.insert(0, str(ROOT))
    from benchmarks.variant_cases import for_shape

    text = for_shape((ROOT / "examples" / "variants" / f"{variant}.tl").read_text(), "bf16", 128)
    return text if bn is None else re.sub(r"(?m)^Param BN = \d+", f"Param BN = {bn}", text)


def test_evaluate_is_three_valued():
    q, k = Var("q_idx", I32), Var("kv_idx", I32)
    table = op("ne", Load("t", (k,), I32), const(0))
    assert passes.evaluate(op("mod", op("sub", const(-7), q), const(3)), {"q_idx": 0}) == -1  # C's remainder
    assert passes.evaluate(op("or", op("le", k, q), table), {"q_idx": 5, "kv_idx": 3}) is True
    assert passes.evaluate(op("or", op("le", k, q), table), {"q_idx": 1, "kv_idx": 3}) is None
    assert passes.evaluate(op("and", op("le", k, q), table), {"q_idx": 1, "kv_idx": 3}) is False


def test_a_program_without_a_mask_region_has_none():
    assert masks_of(analyze(_text("softcap")).model) is None
    assert masks_of(analyze(_text("sliding_window")).model) is not None


def test_the_sliding_windows_blocks_and_kept_pairs():
    masks = masks_of(analyze(_text("sliding_window")).model)
    assert masks is not None
    s, w = 4096, dict(masks.scalars)["window_size"]
    exact = sum(min(q + 1, w) for q in range(s))
    assert abs(kept_pairs(masks, s, s) - exact) / exact < 0.05
    # tile m runs the blocks from its first row's window start to its last row's diagonal (the mean over
    # sampled tiles against every tile's)
    per_tile = [(m * 128 + 127) // 128 - max(0, m * 128 - w + 1) // 128 + 1 for m in range(s // 128)]
    b = blocks(masks, 128, 128, s, s)
    assert abs(b.computed - sum(per_tile) / len(per_tile)) < 0.5
    assert 1.0 <= b.masked <= 3.0  # the diagonal's block and the window's first, each cut


def _measured() -> list[tuple[str, int, dict[int, float]]]:
    """(variant, seqlen, {BN: TFLOPS}) from the H200 runs that timed BN A/Bs of the catalogue files (their
    BN was 96 then: the `tl` column)."""
    out = []
    for name in ("2026-12-01-h200-variants-tile-ab.json", "2026-12-01-h200-variants-congruences.json"):
        for r in json.loads((RESULTS / name).read_text())["rows"]:
            by = {int(k.split("=")[1]): v for k, v in r.items() if k.startswith("tl BN=")}
            if by:
                out.append((r["variant"], r["seqlen"], {96: r["tl"], **by}))
    return out


MEASURED = _measured()


@pytest.mark.parametrize(("variant", "seqlen", "tflops"), MEASURED, ids=[f"{v}-{s}" for v, s, _ in MEASURED])
def test_the_ranking_picks_the_measured_key_tile(variant: str, seqlen: int, tflops: dict[int, float]):
    """Among the key tiles the H200 timed (BN 64 / 96 / 128, BM 128, two stages), the model ranks the
    measured fastest first. (It orders BN 64 above 96 for the banded masks, where the H200 had 96 ahead
    by 4-5 %: a fixed cost per key block the model does not see; docs/performance.md.)"""
    if variant == "learnable_sink":
        pytest.skip("no mask region: the header's causal mask, planned as the plain kernel")
    model = analyze(_text(variant, "?")).model
    shape = Shape(16384 // seqlen, 16, seqlen, seqlen)
    scores = {}
    for c in plan(model, shape, sms=132).candidates:
        t = c.tiling
        if t.block_m == 128 and t.stages == 2 and t.block_n in tflops:
            scores.setdefault(t.block_n, c.score)
    assert set(scores) == set(tflops)
    assert max(scores, key=scores.__getitem__) == max(tflops, key=tflops.__getitem__), (scores, tflops)


def _d64_rows() -> list[tuple[str, dict[int, dict[int, float]]]]:
    """(variant, {seqlen: {BM: TFLOPS}}) from the H200 run that timed the catalogue at d 64 on 128 rows
    (the files' tile) and 192 (`--ab BM=192`, three consumer groups) in one process."""
    by: dict[str, dict[int, dict[int, float]]] = {}
    for r in json.loads((RESULTS / "2026-12-04-h200-variants-d64-bm192.json").read_text())["rows"]:
        by.setdefault(r["variant"], {})[r["seqlen"]] = {128: r["tl"], 192: r["tl BM=192"]}
    return sorted(by.items())


D64 = _d64_rows()
# 192 rows measured faster, but the rules keep 128: masks that read side tensors (global + sliding's flags)
# and a window whose 192-row tiles compute 11 % more key blocks (sink + window, unlike the plain window).
MISSED_AT_D64 = {"global_sliding", "sink_tokens_window"}


@pytest.mark.parametrize(("variant", "tflops"), D64, ids=[v for v, _ in D64])
def test_the_d64_query_rows_follow_the_measurements(variant: str, tflops: dict[int, dict[int, float]]):
    """At d 64 the planner ranks first the rows `query_rows.hopper_rows` gives a region: never a tile the
    H200 measured slower at both lengths, and 192 wherever it measured faster, but for the named misses."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.variant_cases import for_shape

    text = for_shape((ROOT / "examples" / "variants" / f"{variant}.tl").read_text(), "bf16", 64)
    rows = int(re.search(r"(?m)^Param BM = (\d+)", text).group(1))
    assert re.search(r"(?m)^Param consumers = (\d+)", text).group(1) == str(rows // 64)
    faster = {s: max(t, key=t.__getitem__) for s, t in tflops.items()}
    if rows == 192:
        assert set(faster.values()) == {192}, tflops
    elif set(faster.values()) == {192}:
        assert variant in MISSED_AT_D64, tflops
    else:
        assert variant not in MISSED_AT_D64


def test_the_d64_key_tile_is_within_two_per_cent_of_the_fastest_measured():
    """At d 64 every file moved there gets BN 128 (`hopper_tile`'s), which the H200 measured against 96, 176
    and the files' own (160 for softcap and sigmoid attention) on each file's d 64 query rows."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.variant_cases import for_shape

    rows = json.loads((RESULTS / "2026-12-04-h200-variants-d64-bn.json").read_text())["rows"]
    assert len(rows) == 26
    for r in rows:
        source = (ROOT / "examples" / "variants" / f"{r['variant']}.tl").read_text()
        bn = int(re.search(r"(?m)^Param BN = (\d+)", for_shape(source, "bf16", 64)).group(1))
        written = int(re.search(r"(?m)^Param BN = (\d+)", source).group(1))
        by = {int(k.split("=")[1]): v for k, v in r.items() if k.startswith("tl BN=")}
        by.setdefault(written if written != 64 else 128, r["tl"])  # the sm_80 files' BN 64 was re-planned
        assert bn == 128 and by[bn] >= 0.98 * max(by.values()), (r["variant"], r["seqlen"], by)
