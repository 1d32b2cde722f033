"""The sm_90 A/B catalogue that `benchmarks/sm90_device_check.py` compiles, verifies and times.

Each variant is an ordinary TL document (`Target sm_90`), so it goes through the language core, the plan
and the backend exactly as a user's file would. The tiles follow FlashAttention 3's table (`tile_size.h`):
head dim 64 → 192 × 128 (3 consumer warp groups), 128 → 128 × 128 or 128 × 176, 256 → 128 × 80.

The groups of `VARIANTS` and the patches are labelled by the sweep ("round N", "Nth round") that measured
them: the labels are the keys of `rounds` in the JSON `docs/results/2026-11-30-h200-sm90-sweeps*.json`
(3-6 in `…-sweeps.json`, 7-11 `…-evening`, 12-17 `…-night`, 18-19 `…-late`, 20-21 `…-sixth`), and of the
"Round N" paragraphs of docs/hopper.md, where each measurement and its outcome are written up.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    dtype: str = "bf16"
    block_m: int = 128
    block_n: int = 128
    d_qk: int = 128
    d_v: int = 128
    mask: str = "none"  # "none" | "causal" | "window(L, R)"
    stages: int = 2
    overlap: bool = True  # intra-warp-group pipelining (`Param overlap`)
    pingpong: bool = False  # the consumer groups take turns issuing their GEMMs, a ring (`Param pingpong`)
    persistent: bool = False  # one block per SM walks the tiles (`Param persistent`)
    # Regex edits (pattern, replacement) of the generated source, for A/B experiments on code the TL has
    # no switch for (`sm90_device_check.translate` emits patched variants without #line directives; each
    # pattern must match).
    patches: tuple[tuple[str, Any], ...] = ()
    # Read only by the plan's sm_80 checks (a cp.async split of the tiles); the sm_90 kernel ignores it.
    warps: int | None = None

    @property
    def mask_kind(self) -> str:
        return self.mask.split("(", 1)[0]


def tl_text(v: Variant) -> str:
    """A Target sm_90 TL document for `v` (the attention pattern of examples/mha_fwd.tl)."""
    same = v.d_qk == v.d_v
    dims = [f"Param d = {v.d_qk}"] if same else [f"Param d_qk = {v.d_qk}", f"Param d_v = {v.d_v}"]
    dq, dv = ("d", "d") if same else ("d_qk", "d_v")
    return "\n".join(
        [
            f"# {v.name}: Hopper variant, {v.dtype}, {v.block_m} × {v.block_n}, d {v.d_qk}/{v.d_v}",
            f"Kernel {v.name}",
            "Target sm_90",
            f"Dtype {v.dtype}",
            f"Param BM = {v.block_m}",
            f"Param BN = {v.block_n}",
            *dims,
            f"Param stages = {v.stages}",
            f"Param overlap = {int(v.overlap)}",
            f"Param pingpong = {int(v.pingpong)}",
            f"Param persistent = {int(v.persistent)}",
            *([f"Param warps = {v.warps}"] if v.warps else []),
            f"Mask {v.mask}",
            "",
            f"Allocate Q in global (seqlen_q, {dq}) with offset q_offset",
            f"Allocate K in global (seqlen_k, {dq}) with offset kv_offset",
            f"Allocate V in global (seqlen_k, {dv}) with offset kv_offset",
            f"Allocate O in global (seqlen_q, {dv}) with offset o_offset",
            "",
            f"Copy Q (BM, {dq}) in coordinate [L = block_m] from global to shared",
            "Copy Q from shared to register",
            "Allocate S in register (BM, BN)",
            f"Allocate acc_o in register (BM, {dv})",
            "for j = 0: seqlen_k / BN",
            f"    Copy K (BN, {dq}) in coordinate [L = j] from global to shared",
            "    Copy K from shared to register",
            "    Compute GEMM Q, K and get S",
            "    Compute Multiply S, scale and get new S",
            "    Compute Softmax S",
            "    Reshape S from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_N_new)",
            f"    Copy V (BN, {dv}) in coordinate [L = j] from global to shared",
            "    Copy V from shared to register",
            "    Compute GEMM S, V and accumulate acc_o",
            "end",
            "Compute Divide acc_o, rowsum and get new acc_o",
            f"Copy acc_o (BM, {dv}) in coordinate [L = block_m] from register to global as O",
            "",
        ]
    )


_NO_BOUNDARY = (r"tl::block_boundary\(seqlen_k >> 30\);", "")
# Before round 8 every consumer thread arrived on the K/V empty barriers (256 arrivals per buffer); now one
# elected lane per warp does. This restores the old way, for the A/B.
_EVERY_THREAD_ARRIVES = (
    (
        r"EmptyBarrier::init\(&empty_(k|v)\[s\], kConsumerWarps\);",
        r"EmptyBarrier::init(&empty_\1[s], kConsumerThreads);",
    ),
    (
        r"if \(cute::elect_one_sync\(\)\) EmptyBarrier::arrive\(&empty_(k|v)\[",
        r"EmptyBarrier::arrive(&empty_\1[",
    ),
)
# Before round 10 the producer loaded K(n) then V(n) with the pipelined loop too, so the next K waited for
# the V buffer that P·V frees last; this restores that order, for the A/B.
_V_WITH_ITS_K = (
    (
        r"load_k\(n_block_max - 1\);\n(?P<i>[ ]*)load_q\(\);\n[ ]*CUTE_NO_UNROLL\n"
        r"(?P<f>[ ]*for \(int n_block = n_block_max - 2; n_block >= n_block_min; --n_block\) \{\n)"
        r"(?P<j>[ ]*)load_k\(n_block\);\n[ ]*load_v\(n_block \+ 1\);\n"
        r"(?P<c>[ ]*\}\n)[ ]*load_v\(n_block_min\);\n",
        r"load_k(n_block_max - 1);\n\g<i>load_q();\n\g<i>load_v(n_block_max - 1);\n\g<i>CUTE_NO_UNROLL\n"
        r"\g<f>\g<j>load_k(n_block);\n\g<j>load_v(n_block);\n\g<c>",
    ),
)
# Before round 11 the shared-memory operands were partitioned by the thread's slice: Q's descriptors then
# lived in regular registers (two R2UR before every Q·Kᵀ wgmma). This restores that, for the A/B: Q's
# slice from the thread index, not the warp-uniform one (the descriptors are written out since; K's and
# Vᵀ's never depended on the slice).
_THREAD_SLICED_OPERANDS = (
    (r"smem_q \+ consumer_wg % Traits::kConsumers \*", "smem_q + ctid / 128 % Traits::kConsumers *"),
)
# FA4's row max on sm_90: four independent FMNMX chains per row (the sum stays one chain). Round 5 measured
# four chains for the max *and* the sum as slower; the ncu source page (round 11's profile) still shows our
# FMNMX chain waiting on itself more than FA4's (6.6 % of stall samples against 5.0 %).
_MAX_IN_FOUR_CHAINS = (
    (
        r"float m = row_max\(r\);\n(?P<i>[ ]*)CUTE_UNROLL\n"
        r"[ ]*for \(int c = 0; c < size<1>\(scores\); \+\+c\) m = fmaxf\(m, scores\(r, c\)\);\n",
        r"float m0 = row_max(r), m1 = m0, m2 = m0, m3 = m0;\n\g<i>CUTE_UNROLL\n"
        r"\g<i>for (int c = 0; c < size<1>(scores); c += 4) {\n"
        r"\g<i>  m0 = fmaxf(m0, scores(r, c)); m1 = fmaxf(m1, scores(r, c + 1));\n"
        r"\g<i>  m2 = fmaxf(m2, scores(r, c + 2)); m3 = fmaxf(m3, scores(r, c + 3));\n"
        r"\g<i>}\n\g<i>float m = fmaxf(fmaxf(m0, m1), fmaxf(m2, m3));\n",
    ),
)
# Before round 13 a masked tile took its coordinates from the grid (m_block fastest, longest first within
# each head); the emitter now numbers tiles in FA4's order (L2 sections of heads, longest first across a
# section). This restores the grid's order, for the A/B.
_GRID_ORDER = (
    (
        r"(?P<i>[ ]*)const int num_m_blocks = gridDim\.x;\n(?:[^\n]*\n)*?"
        r"[ ]*const int m_block = num_m_blocks - 1 - in_section / width;[^\n]*\n",
        "\\g<i>const int bidb = blockIdx.y;     // batch\n"
        "\\g<i>const int bidh = blockIdx.z;     // query head\n"
        "\\g<i>const int m_block = gridDim.x - 1 - blockIdx.x;\n",
    ),
)
# Round 1's rescale placement: after P·V drains (outside the ping-pong turn) instead of between the Q·Kᵀ
# and P·V issues; the last P·V then needs no rescale of its own.
_RESCALE_AFTER_PV = (
    (
        r"[ ]*// TL:\d+  Compute Softmax S  — rescale O for the last row max while[^\n]*\n"
        r"[ ]*rescale_o\(\);\n",
        "",
    ),
    (
        r"(?P<keep>— P·V has drained: free V\n(?P<ind>[ ]*)warpgroup_wait<0>\(\);\n"
        r"[ ]*warpgroup_fence_operand\(acc_o\);\n[ ]*(?:if \(cute::elect_one_sync\(\)\) )?"
        r"EmptyBarrier::arrive\(&empty_v\[v_stage\]\);\n)",
        r"\g<keep>\g<ind>rescale_o();\n",
    ),
    (r"[ ]*// TL:\d+  Compute Softmax S  — the last rescale, before the last P·V\n[ ]*rescale_o\(\);\n", ""),
)

# FA4's row max (round 14): every row's max first, each in four chains, then the quad shuffles of all rows
# together, then the exps; the emitter's loop finishes one row (one chain, its shuffles, its exps) before
# the next, which the ncu source page shows as a serial FMNMX chain stalled on itself.
_ROW_MAXES_FIRST = (
    (
        r"(?P<i>[ ]*)CUTE_UNROLL\n[ ]*for \(int r = 0; r < size<0>\(scores\); \+\+r\) \{\n"
        r"[ ]*float m = row_max\(r\);\n[ ]*CUTE_UNROLL\n"
        r"[ ]*for \(int c = 0; c < size<1>\(scores\); \+\+c\) m = fmaxf\(m, scores\(r, c\)\);\n"
        r"[ ]*m = tl::quad_max\(m\);\n",
        "\\g<i>Tensor row_max_new = make_fragment_like(row_max);\n"
        "\\g<i>CUTE_UNROLL\n"
        "\\g<i>for (int r = 0; r < size<0>(scores); ++r) {\n"
        "\\g<i>  float m0 = scores(r, 0), m1 = scores(r, 1), m2 = scores(r, 2), m3 = scores(r, 3);\n"
        "\\g<i>  CUTE_UNROLL\n"
        "\\g<i>  for (int c = 4; c < size<1>(scores); c += 4) {\n"
        "\\g<i>    m0 = fmaxf(m0, scores(r, c)); m1 = fmaxf(m1, scores(r, c + 1));\n"
        "\\g<i>    m2 = fmaxf(m2, scores(r, c + 2)); m3 = fmaxf(m3, scores(r, c + 3));\n"
        "\\g<i>  }\n"
        "\\g<i>  row_max_new(r) = fmaxf(fmaxf(fmaxf(m0, m1), fmaxf(m2, m3)), row_max(r));\n"
        "\\g<i>}\n"
        "\\g<i>CUTE_UNROLL\n"
        "\\g<i>for (int r = 0; r < size<0>(scores); ++r) row_max_new(r) = tl::quad_max(row_max_new(r));\n"
        "\\g<i>CUTE_UNROLL\n"
        "\\g<i>for (int r = 0; r < size<0>(scores); ++r) {\n"
        "\\g<i>  float m = row_max_new(r);\n",
    ),
)

# FA4's arrangement of the row sum (round 16): the exps alone between the two waits, and the row sums
# after P·V has drained, where they interleave with P's conversion (and, with `_r1`, O's rescale). The
# emitter sums each exp as it comes out of MUFU, and after the wait only the 32-64 conversions remain,
# back to back (the profile's F2FP stalls: 4.9 % of our samples against FA4's 1.8 % at d64).
_SUMS_AFTER_PV = (
    (
        r"[ ]*float sum = 0\.f;\n"
        r"(?=[ ]*CUTE_UNROLL\n[ ]*for \(int c = 0; c < size<1>\(scores\); \+\+c\) \{\n)",
        "",
    ),
    (r"[ ]*sum \+= scores\(r, c\);[^\n]*\n", ""),
    (r"row_sum\(r\) = row_sum\(r\) \* correction\(r\) \+ sum;", "row_sum(r) *= correction(r);"),
    (
        r"(?P<i>[ ]*)auto softmax_step = \[&\]\(auto& acc_s\) \{\n",
        "\\g<i>auto add_row_sums = [&](auto& acc_s) {\n"
        "\\g<i>  Tensor scores = make_tensor(acc_s.data(), tl::acc_rowcol(acc_s.layout()));\n"
        "\\g<i>  CUTE_UNROLL\n"
        "\\g<i>  for (int r = 0; r < size<0>(scores); ++r) {\n"
        "\\g<i>    float sum = 0.f;\n"
        "\\g<i>    CUTE_UNROLL\n"
        "\\g<i>    for (int c = 0; c < size<1>(scores); ++c) sum += scores(r, c);\n"
        "\\g<i>    row_sum(r) += sum;\n"
        "\\g<i>  }\n"
        "\\g<i>};\n"
        "\\g<0>",
    ),
    (
        r"(?P<i>[ ]*)Tensor (?P<p>rP|rP_next) = tl::convert_fragment<Element>\((?P<s>acc_s|acc_s_next)\);\n",
        "\\g<0>\\g<i>add_row_sums(\\g<s>);\n",
    ),
)

# Before round 18 the wgmma loop stepped CuTe's descriptor iterator (a 32-bit add to the low word and a
# move of the constant high word per wgmma: UIADD3 + 2 UMOV); the emitter now steps the whole 64-bit
# descriptor (one UIADD3.64). This restores CuTe's iterator, for the A/B.
_DESCRIPTOR_LOW_WORD = (
    (r"auto tA_k = desc64\(tA\);", "auto& tA_k = tA;"),
    (r"auto tB_k = desc64\(tB\);", "auto& tB_k = tB;"),
)
# Before round 18 a masked block computed every score's row and column and compared both (bottom-right
# causal mask and the seqlen_k tail); the emitter now takes each row's column bound relative to the
# thread's first column, one compare against an immediate per score. This restores the per-score form
# (causal kernels only), for the A/B.
_PER_SCORE_CAUSAL_MASK = (
    (
        r"(?P<i>[ ]*)Tensor scores = make_tensor\(acc_s\.data\(\), tl::acc_rowcol\(acc_s\.layout\(\)\)\);"
        r"  // \(rows, cols\)\n[ ]*Tensor coords = (?:[^\n]*\n)*?"
        r"[ ]*if \(col >= col_end\) scores\(r, c\) = -__int_as_float\(0x7f800000\);\n[ ]*\}\n[ ]*\}\n",
        "\\g<i>CUTE_UNROLL\n"
        "\\g<i>for (int i = 0; i < size(acc_s); ++i) {\n"
        "\\g<i>  const int row = m_block * kBlockM + get<0>(tScS(i));\n"
        "\\g<i>  const int col = n_block * kBlockN + get<1>(tScS(i));\n"
        "\\g<i>  if (col >= seqlen_k || col > row + seqlen_k - seqlen_q)"
        " acc_s(i) = -__int_as_float(0x7f800000);\n"
        "\\g<i>}\n",
    ),
)

# FA4's SASS waits for P·V in the middle of the exps (ptxas placed it there), so P's conversion and O's
# rescale interleave with the rest of the MUFU stream; the emitter's block boundary keeps the wait below
# the whole softmax, and the conversions then come as one burst after it (the F2FP stalls of the
# profile). Round 19: the softmax of the first half of each thread's rows, the wait, then the second half
# (and, where round 1's rescale is applied first, O's rescale after it).
_WAIT_MID_SOFTMAX = (
    (
        r"(?P<h>auto softmax_step = \[&\]\(auto& acc_s)\) \{\n(?P<b>(?:[^\n]*\n)*?[ ]*)"
        r"for \(int r = 0; r < size<0>\(scores\); \+\+r\) \{",
        r"\g<h>, int r_begin = 0, int r_end = Traits::kRowsPerThread) {\n"
        r"\g<b>for (int r = r_begin; r < r_end; ++r) {",
    ),
    (
        r"(?P<i>[ ]*)softmax_step\(acc_s_next\);\n[ ]*tl::block_boundary\(seqlen_k >> 30\);[^\n]*\n"
        r"(?P<w>[ ]*// [^\n]*\n[ ]*warpgroup_wait<0>\(\);\n[ ]*warpgroup_fence_operand\(acc_o\);\n"
        r"[ ]*if \(cute::elect_one_sync\(\)\) EmptyBarrier::arrive\(&empty_v\[v_stage\]\);\n)"
        r"(?P<rs>[ ]*rescale_o\(\);\n)?",
        "\\g<i>softmax_step(acc_s_next, 0, kRowsPerThread / 2);\n"
        "\\g<i>tl::block_boundary(seqlen_k >> 30);\n"
        "\\g<w>\\g<i>softmax_step(acc_s_next, kRowsPerThread / 2, kRowsPerThread);\n\\g<rs>",
    ),
)

# Before round 20 the pipelined loop ran the whole softmax one row at a time (max, shuffles, exps and
# sum) before P·V's wait and converted P in one pass after it; the emitter now splits it around the wait
# in FA4's order at d_v <= 128 (`HopperConfig.split_softmax`). This restores the one pass, for the A/B.
_ONE_PASS_SOFTMAX = (
    (
        r"(?P<i>[ ]*)softmax_before_wait\(acc_s_next\);\n[ ]*tl::block_boundary\(seqlen_k >> 30\);[^\n]*\n",
        "\\g<i>softmax_step(acc_s_next);\n\\g<i>tl::block_boundary(seqlen_k >> 30);\n",
    ),
    (
        r"(?P<i>[ ]*)softmax_after_wait\(acc_s_next, rP\);\n",
        "\\g<i>Tensor rP_next = tl::convert_fragment<Element>(acc_s_next);\n\\g<i>CUTE_UNROLL\n"
        "\\g<i>for (int i = 0; i < size(rP); ++i) rP(i) = rP_next(i);\n",
    ),
)


def _exps_before_wait(cols: int) -> tuple[tuple[str, str], ...]:
    """Round 21: the split softmax with `cols` columns' exps before P·V's wait instead of the emitter's
    `HopperConfig.split_softmax_cols` (FA4's SASS has ten to twelve exps there: five or six columns)."""
    return (
        (r"if \(c < \d+\) scores", f"if (c < {cols}) scores"),
        (r"if \(c >= \d+\) \{", f"if (c >= {cols}) {{"),
    )


# The d64 and d128 defaults (with and without a causal mask) that the later rounds measure against.
_DEFAULTS = (
    Variant("h64_bf16_pp3", block_m=192, d_qk=64, d_v=64, pingpong=True),
    Variant("h64_bf16_causal_pp3", block_m=192, d_qk=64, d_v=64, mask="causal", pingpong=True),
    Variant("h128_bf16_bn160_pp", block_n=160, pingpong=True),
    Variant("h128_bf16_causal_pp", mask="causal", pingpong=True),
)


def _on_the_defaults(suffix: str, patches: tuple[tuple[str, Any], ...]) -> tuple[Variant, ...]:
    """Each default with `patches` (NAME_suffix), and with round 1's rescale and then them (NAME_suffix_r1:
    the rescale's patch goes first, so `patches` may move the rescale it put after P·V's wait). The rounds
    that use this (14, 16, 19) measured against the one-pass softmax, so that is restored before both."""
    return tuple(
        replace(v, name=f"{v.name}_{suffix}{tag}", patches=_ONE_PASS_SOFTMAX + extra + patches)
        for v in _DEFAULTS
        for tag, extra in (("", ()), ("_r1", _RESCALE_AFTER_PV))
    )


# What the device run compiles, verifies and times. Names are kernel names (C identifiers).
VARIANTS: tuple[Variant, ...] = (
    Variant("h128_bf16"),
    Variant("h128_bf16_plain", overlap=False),
    Variant("h128_bf16_bn176", block_n=176),
    Variant("h128_bf16_pp", pingpong=True),
    Variant("h128_bf16_causal_pp", mask="causal", pingpong=True),
    Variant("h128_bf16_causal", mask="causal"),
    Variant("h128_fp16", dtype="fp16"),
    Variant("h128_fp16_causal", dtype="fp16", mask="causal"),
    Variant("h128_bf16_window", mask="window(100, 30)"),
    Variant("h64_bf16", block_m=192, d_qk=64, d_v=64),
    Variant("h64_bf16_causal", block_m=192, d_qk=64, d_v=64, mask="causal"),
    Variant("h256_bf16", block_n=80, d_qk=256, d_v=256, warps=4),
    Variant("h256_bf16_causal", block_n=80, d_qk=256, d_v=256, mask="causal", warps=4),
    Variant("mla_bf16_causal", block_n=128, d_qk=192, d_v=128, mask="causal"),
    # Second round (after the first H200 run): ping-pong with FA3's wide tile, and head dim 64 on two
    # consumer warp groups so that ping-pong applies.
    Variant("h128_bf16_pp_bn176", block_n=176, pingpong=True),
    Variant("h64_bf16_m128_pp", d_qk=64, d_v=64, pingpong=True),
    Variant("h64_bf16_causal_m128_pp", d_qk=64, d_v=64, mask="causal", pingpong=True),
    # Third round: a persistent grid (one block per SM walking the tiles; O in its own buffer when it
    # fits, else in Q's), and the rescale of O moved under Q·Kᵀ (all overlapped variants).
    Variant("h128_bf16_pers_bn176", block_n=176, pingpong=True, persistent=True),
    Variant("h128_bf16_pers_bn160", block_n=160, pingpong=True, persistent=True),
    Variant("h128_bf16_pers_bn128", pingpong=True, persistent=True),
    Variant("h128_fp16_pers_bn128", dtype="fp16", pingpong=True, persistent=True),
    Variant("h128_bf16_causal_pers", mask="causal", pingpong=True, persistent=True),
    Variant("h128_bf16_window_pers", mask="window(100, 30)", pingpong=True, persistent=True),
    Variant("h64_bf16_pers", block_m=192, d_qk=64, d_v=64, persistent=True),
    Variant("h64_bf16_m128_pp_pers", d_qk=64, d_v=64, pingpong=True, persistent=True),
    Variant("h256_bf16_pers", block_n=80, d_qk=256, d_v=256, warps=4, persistent=True),
    Variant("mla_bf16_pers", block_n=128, d_qk=192, d_v=128, persistent=True),
    # Fourth round: with ping-pong, does the softmax's own overlap with P·V (the block boundary that keeps
    # ptxas from hoisting the wait) still pay, and does ping-pong still pay once the overlap is real?
    Variant("h128_bf16_pers_nobb", block_n=176, pingpong=True, persistent=True, patches=(_NO_BOUNDARY,)),
    Variant("h128_bf16_pers_nopp", block_n=176, persistent=True),
    Variant("h128_bf16_pers_bn128_nobb", pingpong=True, persistent=True, patches=(_NO_BOUNDARY,)),
    Variant("h128_bf16_causal_pp_nobb", mask="causal", pingpong=True, patches=(_NO_BOUNDARY,)),
    Variant("h64_bf16_pers_nobb", block_m=192, d_qk=64, d_v=64, persistent=True, patches=(_NO_BOUNDARY,)),
    Variant(
        "h256_bf16_pers_nobb",
        block_n=80,
        d_qk=256,
        d_v=256,
        warps=4,
        persistent=True,
        patches=(_NO_BOUNDARY,),
    ),
    # Fifth round measured one max/sum chain against four (four lost 1–4% everywhere: the emitter is back
    # to one) and the ping-pong turn before/after the K wait (no difference). Sixth: tiles once more.
    Variant("h128_bf16_pers_bn192", block_n=192, pingpong=True, persistent=True),
    Variant("h128_bf16_pers_bn128_s3", pingpong=True, persistent=True, stages=3),
    Variant("h128_bf16_pers_bn144", block_n=144, pingpong=True, persistent=True),
    # Seventh round: d64 causal lost 5–8 % against round 1; the suspect was the rescale inside the ping-pong
    # turn. Each pair: the default schedule, and the same with round 1's rescale. Measured: within ±1 %.
    Variant("h64_bf16_causal_pp", d_qk=64, d_v=64, mask="causal", pingpong=True),
    Variant(
        "h64_bf16_causal_pp_r1", d_qk=64, d_v=64, mask="causal", pingpong=True, patches=_RESCALE_AFTER_PV
    ),
    Variant("h128_bf16_bn160_pp", block_n=160, pingpong=True),
    Variant("h128_bf16_bn160_pp_r1", block_n=160, pingpong=True, patches=_RESCALE_AFTER_PV),
    Variant("h128_bf16_causal_pp_r1", mask="causal", pingpong=True, patches=_RESCALE_AFTER_PV),
    # Eighth round, after the ncu profile beside FA4: the pipelined loop without a per-score mask (ptxas had
    # if-converted the last-block check into a compare and select per score), and ping-pong passed around
    # three consumer groups (FA4's 192 × 128 schedule at head dim 64).
    Variant("h64_bf16_pp3", block_m=192, d_qk=64, d_v=64, pingpong=True),
    Variant("h64_bf16_causal_pp3", block_m=192, d_qk=64, d_v=64, mask="causal", pingpong=True),
    # Ninth: the K/V empty barriers take one arrive per consumer warp (CUTLASS's pipelines arrive once per
    # warp group) instead of one per thread; `_all` is the same kernel with every thread arriving.
    Variant("h128_bf16_bn160_pp_all", block_n=160, pingpong=True, patches=_EVERY_THREAD_ARRIVES),
    Variant("h64_bf16_pp3_all", block_m=192, d_qk=64, d_v=64, pingpong=True, patches=_EVERY_THREAD_ARRIVES),
    Variant(
        "h64_bf16_causal_pp3_all",
        block_m=192,
        d_qk=64,
        d_v=64,
        mask="causal",
        pingpong=True,
        patches=_EVERY_THREAD_ARRIVES,
    ),
    Variant("h64_bf16_pp3_s3", block_m=192, d_qk=64, d_v=64, pingpong=True, stages=3),
    # Tenth: the producer loads in the consumers' order (V trails K by one block); `_kv` is the old order.
    Variant("h128_bf16_bn160_pp_kv", block_n=160, pingpong=True, patches=_V_WITH_ITS_K),
    Variant("h64_bf16_pp3_kv", block_m=192, d_qk=64, d_v=64, pingpong=True, patches=_V_WITH_ITS_K),
    Variant("h128_bf16_causal_pp_kv", mask="causal", pingpong=True, patches=_V_WITH_ITS_K),
    Variant("h256_bf16_kv", block_n=80, d_qk=256, d_v=256, warps=4, patches=_V_WITH_ITS_K),
    Variant("h128_bf16_pers_bn128_kv", pingpong=True, persistent=True, patches=_V_WITH_ITS_K),
    # Eleventh: Q/K/V descriptors from a warp-group slice by a warp-uniform index; `_thr` is the old slicing.
    Variant("h128_bf16_bn160_pp_thr", block_n=160, pingpong=True, patches=_THREAD_SLICED_OPERANDS),
    Variant("h64_bf16_pp3_thr", block_m=192, d_qk=64, d_v=64, pingpong=True, patches=_THREAD_SLICED_OPERANDS),
    Variant("h128_bf16_causal_pp_thr", mask="causal", pingpong=True, patches=_THREAD_SLICED_OPERANDS),
    Variant("h256_bf16_thr", block_n=80, d_qk=256, d_v=256, warps=4, patches=_THREAD_SLICED_OPERANDS),
    # Twelfth (prepared, not run: no device time left): FA4's four-chain row max, and round 1's rescale
    # placement (FA4's for d ≤ 128) once more, now that the loop has changed; each against the plain default.
    Variant(
        "h128_bf16_bn160_pp_max4", block_n=160, pingpong=True, patches=_ONE_PASS_SOFTMAX + _MAX_IN_FOUR_CHAINS
    ),
    Variant(
        "h64_bf16_pp3_max4",
        block_m=192,
        d_qk=64,
        d_v=64,
        pingpong=True,
        patches=_ONE_PASS_SOFTMAX + _MAX_IN_FOUR_CHAINS,
    ),
    Variant(
        "h64_bf16_causal_pp3_max4",
        block_m=192,
        d_qk=64,
        d_v=64,
        mask="causal",
        pingpong=True,
        patches=_ONE_PASS_SOFTMAX + _MAX_IN_FOUR_CHAINS,
    ),
    Variant("h64_bf16_pp3_r1", block_m=192, d_qk=64, d_v=64, pingpong=True, patches=_RESCALE_AFTER_PV),
    # Thirteenth: FA4's longest-first order over L2 sections of heads for masked tiles (now the emitter's;
    # `_grid` is the grid's own order, measured as the baseline then), and FA3's d128 key tiles.
    Variant("h128_bf16_causal_pp_grid", mask="causal", pingpong=True, patches=_GRID_ORDER),
    Variant(
        "h64_bf16_causal_pp3_grid",
        block_m=192,
        d_qk=64,
        d_v=64,
        mask="causal",
        pingpong=True,
        patches=_GRID_ORDER,
    ),
    Variant(
        "h256_bf16_causal_grid", block_n=80, d_qk=256, d_v=256, mask="causal", warps=4, patches=_GRID_ORDER
    ),
    Variant("h128_bf16_bn176_pp", block_n=176, pingpong=True),
    Variant("h128_bf16_causal_bn144_pp", block_n=144, mask="causal", pingpong=True),
    # Fourteenth: FA4's row max (all rows' maxes in four chains, then their shuffles), alone and with round
    # 1's rescale placement (FA4's for d <= 128), against the plain defaults.
    *_on_the_defaults("mf", _ROW_MAXES_FIRST),
    # Fifteenth: the persistent grid walking the masked tiles in the same longest-first order (block b takes
    # tiles b, b + gridDim.x, …, so every block's tiles shrink at the same pace), against one block per tile.
    Variant(
        "h64_bf16_causal_pp3_pers",
        block_m=192,
        d_qk=64,
        d_v=64,
        mask="causal",
        pingpong=True,
        persistent=True,
    ),
    Variant("h128_bf16_causal_pp_pers", mask="causal", pingpong=True, persistent=True),
    Variant("h256_bf16_causal_pers", block_n=80, d_qk=256, d_v=256, mask="causal", warps=4, persistent=True),
    Variant("h64_bf16_pp3_pers", block_m=192, d_qk=64, d_v=64, pingpong=True, persistent=True),
    Variant("h128_bf16_bn160_pp_pers", block_n=160, pingpong=True, persistent=True),
    # Sixteenth: the row sums after P·V drains (FA4's arrangement), alone and with round 1's rescale.
    *_on_the_defaults("sa", _SUMS_AFTER_PV),
    # Eighteenth: the defaults now step 64-bit descriptors and mask with per-row bounds; `_d32` is CuTe's
    # descriptor iterator, `_sm` the per-score causal mask. And FA4's d128 tile, 128 × 128, once more.
    *(replace(v, name=f"{v.name}_d32", patches=_DESCRIPTOR_LOW_WORD) for v in _DEFAULTS),
    *(
        replace(v, name=f"{v.name}_sm", patches=_PER_SCORE_CAUSAL_MASK)
        for v in _DEFAULTS
        if v.mask == "causal"
    ),
    Variant("h256_bf16_d32", block_n=80, d_qk=256, d_v=256, warps=4, patches=_DESCRIPTOR_LOW_WORD),
    Variant(
        "h256_bf16_causal_d32",
        block_n=80,
        d_qk=256,
        d_v=256,
        mask="causal",
        warps=4,
        patches=_DESCRIPTOR_LOW_WORD,
    ),
    # Nineteenth: the wait for P·V between the two halves of the softmax, with the rescale where it is and
    # after the second half (round 1's place), against the defaults.
    *_on_the_defaults("mid", _WAIT_MID_SOFTMAX),
    # Twentieth: FA4's softmax schedule is the emitter's at d_v <= 128; `_1p` is the one-pass softmax before
    # it (round 20 measured the schedule as a patch on the one pass: docs/hopper.md, "Sixth round").
    *(replace(v, name=f"{v.name}_1p", patches=_ONE_PASS_SOFTMAX) for v in _DEFAULTS),
    # Twenty-first: 2, 4, 6, 8 and 10 columns' exps before P·V's wait (the emitter's: 4 at d64, 6 at d128).
    *(
        replace(v, name=f"{v.name}_pre{c}", patches=_exps_before_wait(c))
        for v in _DEFAULTS
        for c in (2, 4, 6, 8, 10)
    ),
)
