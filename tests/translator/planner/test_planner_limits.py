"""Every candidate the planner returns respects the GPU model's limits, for every target, and a document
filled with it draws no error and no resource diagnostic from the checker."""

from __future__ import annotations

import pytest

from tl_language import analyze, gpu
from tl_language.diagnostics import Severity
from translator import make_plan
from translator.llm.request import Request
from translator.llm.template import render_sketch
from translator.planner import fill_analysis, plan_candidates

CASES = [
    (arch, d, dtype)
    for arch, t in gpu.TARGETS.items()
    for d in (64, 128, 256)
    for dtype in ("fp16", "bf16")
    if dtype in t.dtypes
]


@pytest.mark.parametrize(("arch", "d", "dtype"), CASES, ids=[f"{a}-hd{d}-{t}" for a, d, t in CASES])
@pytest.mark.parametrize("mask", ["none", "causal"])
def test_every_candidate_respects_the_limits(arch: str, d: int, dtype: str, mask: str) -> None:
    target = gpu.TARGETS[arch]
    sketch = render_sketch(Request(text="test", mask=mask, d_qk=d, d_v=d, dtype=dtype, arch=arch))
    analysis = analyze(sketch)
    cands = plan_candidates(analysis)
    assert cands, f"no candidate for {arch} hd{d} {dtype}"
    mma = target.mma[dtype]
    elem = gpu.DTYPE_BYTES[dtype]
    for c in cands:
        t = c.tiling
        assert t.block_m % (mma.m * t.warps) == 0 and t.block_m % (16 * t.warps) == 0
        assert t.block_n % 16 == 0 and t.block_n % mma.n == 0 and t.block_n % mma.k == 0
        smem = elem * (t.block_m * d + t.stages * t.block_n * 2 * d)
        if target.wgmma:
            # the sm_90 kernel: + mbarriers, 1 KB alignment pad, 1 KB static; 64 rows per consumer group
            consumers = t.block_m // 64
            assert 1 <= consumers <= 3 and c.resources.threads == 128 * (consumers + 1)
            smem += 8 * (2 + 4 * t.stages) + 2048  # Q full/empty, K/V full/empty per stage
            assert c.resources.registers <= (160 if consumers == 3 else 240)
        else:
            assert c.resources.registers <= target.regs_per_thread
            assert c.resources.threads == 32 * t.warps <= target.max_threads_per_block
        assert c.resources.shared_bytes == smem <= target.smem_per_block
        assert c.resources.blocks_per_sm >= 1
        assert 0.0 < c.score <= 1.0
        assert set(c.holes) == {"BM", "BN", "warps", "stages"}
    assert [c.rank for c in cands] == list(range(1, len(cands) + 1))
    # sm_90: the measured default tile (if it is a candidate) comes first, the rest by predicted score
    measured = [c for c in cands if c.measured]
    assert measured == cands[: len(measured)] and (target.wgmma or not measured)
    rest = [c.score for c in cands[len(measured) :]]
    assert rest == sorted(rest, reverse=True)
    for c in cands:
        filled = fill_analysis(analysis, candidate=c)
        # Errors, resource warnings and hole hints: what would make a candidate a limit's victim.
        bad = [
            x
            for x in filled.diagnostics
            if x.severity == Severity.ERROR or x.code in ("TL303", "TL304", "TL450", "TL451")
        ]
        assert bad == [], (c.summary(), [(x.code, x.message) for x in bad])
        # …and the translator plans it (its own tile and copy rules: TL501 otherwise).
        after = analyze(filled.text)
        make_plan(after.model, after.text)


def test_unsupported_dtype_gives_no_candidate_and_says_why() -> None:
    sketch = render_sketch(Request(text="t", dtype="bf16", arch="sm_75"))
    from translator.planner import plan

    result = plan(analyze(sketch).model)
    assert result.candidates == []
    assert result.problems == ["sm_75 tensor cores do not take bf16 (they take fp16)"]
