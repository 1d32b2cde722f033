"""The sm_90 backward (`translator.backends.sm90_bwd`): chosen by default for a Target sm_90 program it
covers (the sm_80 skeleton otherwise, and on request), the wgmma atoms it names, the five GEMMs of FA3's
dataflow, dQ's atomics in the order the shared convert kernel reads, the masks' block classes, the
transposed score rows, and one NVRTC compile (marked) of the plain kernel and ALiBi with learnable slopes
for sm_90a."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from pipeline.backward import BackwardBuildError, translate_backward
from translator.backends.sm90.gmma import EXT_INCLUDES

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = ROOT / "examples" / "variants"
MHA = ROOT / "examples" / "mha_fwd.tl"
LEARN = {"alibi": ("slopes",), "relative_bias": ("rel",), "learnable_sink": ("sinks",)}


def _sm90(tl: Path | str, **kw):
    return translate_backward(tl, arch="sm_90", skeleton="sm90", **kw)


def _d256(d: int = 256) -> str:
    """mha_fwd.tl at head dim `d` (one stage, BM 64 so it checks): 256 is the wgmma skeleton's head-split
    tile, 192 beyond it."""
    text = (
        MHA.read_text()
        .replace("Param d = 128", f"Param d = {d}")
        .replace("Param stages = 2", "Param stages = 1")
    )
    return text.replace("Param BM = 128", "Param BM = 64")


def _main(source: str) -> str:
    return source.split("_bwd_dq_dk_dv(")[1].split("_bwd_convert_dq(")[0]


def _in_order(text: str, *items: str) -> None:
    """Each of `items` occurs in `text` after the one before it (its first occurrence there)."""
    at = 0
    for item in items:
        assert item in text[at:], f"{item!r} not after the items before it"
        at = text.index(item, at) + len(item)


def _signature(source: str, kernel: str) -> list[str]:
    m = re.search(rf"void __launch_bounds__\([\d, ]+\) {kernel}\((.*?)\) {{", source, re.S)
    assert m, f"no kernel {kernel}"
    return [p.strip().split()[-1] for p in m.group(1).split(",")]


def test_the_default_backward_follows_the_target():
    hopper = translate_backward(ROOT / "examples" / "hopper_mha_fwd.tl")
    assert hopper.spec.arch == "sm_90a" and "GMMA" in hopper.source
    assert translate_backward(MHA, arch="sm_90").source == _sm90(MHA).source
    ampere = translate_backward(MHA)  # Target sm_80
    assert ampere.spec.arch == "sm_80" and "GMMA" not in ampere.source
    forced = translate_backward(MHA, arch="sm_90", skeleton="sm80")
    assert forced.spec.arch == "sm_90" and forced.spec.threads == 256
    assert "SM80_16x8x16_F32BF16BF16F32_TN" in forced.source and "GMMA" not in forced.source


def test_auto_falls_back_to_the_mma_sync_skeleton_where_wgmma_does_not_cover_the_program():
    b = translate_backward(_d256(192), arch="sm_90")
    assert b.spec.head_dim == 192 and "GMMA" not in b.source and b.spec.arch == "sm_90"
    wide = translate_backward(_d256(), arch="sm_90")
    assert wide.spec.head_dim == 256 and wide.spec.arch == "sm_90a" and "GMMA" in wide.source


def test_d256_splits_the_head_dim_between_the_warp_groups():
    """FA3's d 256 tile: 64 key rows shared by both warp groups, each computing Sᵀ and dPᵀ for half of
    the query columns and dK, dV, dQ for half of the head dim; Pᵀ joins dSᵀ in shared memory, so dV and
    dK are SS wgmma with MN-major A; both warp groups meet once a block, after the stores."""
    from translator.backends.sm90_bwd import shared_bytes

    b = _sm90(_d256())
    src, main = b.source, _main(b.source)
    assert (b.spec.block_m, b.spec.block_n, b.spec.shared_bytes) == (64, 64, shared_bytes(256))
    assert shared_bytes(256) <= 232448  # sm_90: 227 KB a block, opt-in
    assert "MMA_64x32x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>{}, Layout<Shape<_1, _2, _1>>" in src
    dkv = "MMA_64x128x16_F32BF16BF16_SS<GMMA::Major::MN, GMMA::Major::MN>{}, Layout<Shape<_1, _2, _1>>"
    assert dkv in src
    assert "acc_to_A" not in main
    _in_order(
        main,
        "Element* smem_p = smem_ds + 2 * kBlockM * kBlockN;",
        "tl::stsm_x4_t(ds_addr[i] + ds_stage + kPOffset, tPrP(4 * i), tPrP(4 * i + 1)",
        "tl::stsm_x4_t(ds_addr[i] + ds_stage, tdSrdS(4 * i), tdSrdS(4 * i + 1)",
        "tl::fence_async_shared();",
        "tl::consumer_sync(1, Traits::kNThreads);  // Pᵀ and dSᵀ of both warp groups",
        "tl::wgmma<false, false>(tiled_mma_dkv, tdVrPt, tdVrdO, acc_dv);",
        "tl::wgmma<true, false>(tiled_mma_dq, tdQrdS, tdQrKt, acc_dq);",
        "tl::wgmma<false, false>(tiled_mma_dkv, tdKrdSt, tdKrQ, acc_dk);",
    )
    assert main.count("tl::consumer_sync(1, Traits::kNThreads);") == 3  # once a block, twice in the epilogue
    with pytest.raises(BackwardBuildError, match="overlap_p at head dim 256"):
        _sm90(_d256(), options={"overlap_p": True})
    with pytest.raises(BackwardBuildError, match="shared memory"):
        _sm90(_d256(), options={"dq_bulk": True})


def test_the_sm90_skeleton_targets_sm_90a_with_the_same_launch_shape():
    b = _sm90(MHA)
    s = b.spec
    assert (s.arch, s.block_m, s.block_n, s.threads, s.preprocess_rows) == ("sm_90a", 64, 128, 256, 32)
    # K, V (128 × 128), dS twice (64 × 128), two stages of Q and dO (64 × 128), bf16; LSE and D; six
    # mbarriers (the stages' and K/V's full and empty); the 1 KB rounding. One warp group more (the
    # producer) for dq_dk_dv only. At d = 128, dQ's fp32 tile for the bulk add (`dq_bulk`'s default).
    tiles, dq = 2 * (2 * 128 * 128 + 2 * 64 * 128 + 4 * 64 * 128), 64 * 128 * 4
    assert s.shared_bytes == tiles + 2 * 2 * 64 * 4 + 48 + 1024 + dq
    assert s.main_threads == 384
    assert "verified on the H200" in b.source


@pytest.mark.parametrize("name", sorted(p.stem for p in VARIANTS.glob("*.tl")))
def test_every_catalogue_variant_keeps_the_backward_abi(name):
    """The sm_80 skeleton's parameters, and after them dq_dk_dv's TMA descriptors of Q and dO (the
    producer's loads); row_grads, launched with dq_dk_dv's other arguments, takes none."""
    from runner.abi import BACKWARD_TMA_PARAMS

    learn = LEARN.get(name, ())
    sm80 = translate_backward(VARIANTS / f"{name}.tl", arch="sm_90", learnable=learn, skeleton="sm80")
    sm90 = _sm90(VARIANTS / f"{name}.tl", learnable=learn)
    assert sm90.spec.params == sm80.spec.params + BACKWARD_TMA_PARAMS and sm90.spec.uses_tma
    assert not sm80.spec.uses_tma and sm90.spec.row_sums == sm80.spec.row_sums
    for part in ("dq_dk_dv", "dot_do_o", "convert_dq") + (("row_grads",) if sm90.spec.row_sums else ()):
        kernel = sm90.spec.kernel(part)
        extra = list(BACKWARD_TMA_PARAMS) if part == "dq_dk_dv" else []
        assert _signature(sm90.source, kernel) == _signature(sm80.source, kernel) + extra


@pytest.mark.parametrize(
    ("d", "sdp", "dkv", "dq"),
    [
        (128, "64x64x16", "64x128x16", "64x64x16"),
        (64, "64x64x16", "64x64x16", "64x32x16"),
    ],
)
def test_the_wgmma_atoms_follow_the_tiles(d, sdp, dkv, dq):
    """The 64-row query tile's atoms (d = 64 takes 128 rows unless told: `default_block_m`)."""
    text = MHA.read_text().replace("Param d = 128", f"Param d = {d}")
    src = _sm90(text, options={"block_m": 64}).source
    k, mn = "GMMA::Major::K", "GMMA::Major::MN"
    assert f"MMA_{sdp}_F32BF16BF16_SS<{k}, {k}>{{}}, Layout<Shape<_2, _1, _1>>" in src
    assert f"MMA_{dkv}_F32BF16BF16_RS<{k}, {mn}>{{}}, Layout<Shape<_2, _1, _1>>" in src
    assert f"MMA_{dq}_F32BF16BF16_SS<{k}, {mn}>{{}}, Layout<Shape<_1, _2, _1>>" in src
    # K's swizzle atom divides d / 2, each warp group's MN-major slice of Kᵀ in dQ's GEMM
    k_atom = "SW128" if d // 2 % 64 == 0 else "SW64"
    assert f"SmemLayoutK = decltype(tile_to_shape(GMMA::Layout_K_{k_atom}_Atom<Element>" in src


def test_fp16_names_the_fp16_atoms():
    src = _sm90(MHA, dtype="fp16").source
    assert "MMA_64x128x16_F32F16F16_RS" in src and "BF16" not in src


@pytest.mark.parametrize(
    ("dq_bulk", "dq_out"),
    [
        (False, "atomicAdd(dq_tile + i * 128, make_float4(acc_dq(4 * i), acc_dq(4 * i + 1),"),
        (None, "dq_tile_s[i * 128] = make_float4(acc_dq(4 * i), acc_dq(4 * i + 1),"),  # d = 128's default
    ],
)
def test_the_five_gemms_in_fa3_order_with_dq_out_under_dk(dq_bulk, dq_out):
    """dQ leaves (by atomics, or into shared memory for the bulk add) while dK's wgmma still runs."""
    main = _main(_sm90(MHA, options={} if dq_bulk is None else {"dq_bulk": dq_bulk}).source)
    gemms = [
        "tl::wgmma<true, false>(tiled_mma_sdp, tSrK, tSrQ, acc_s);",  # Sᵀ = K·Qᵀ
        "tl::wgmma<true, false>(tiled_mma_sdp, tdPrV, tdPrdO, acc_dp);",  # dPᵀ = V·dOᵀ
        "tl::wgmma<false, true>(tiled_mma_dkv, tdVrP, tdVrdO, acc_dv);",  # dV += Pᵀ·dO (RS)
        "tl::wgmma<true, false>(tiled_mma_dq, tdQrdS, tdQrKt, acc_dq);",  # dQ = dS·K
        "tl::wgmma<false, true>(tiled_mma_dkv, tdKrdS, tdKrQ, acc_dk);",  # dK += dSᵀ·Q (RS)
        "warpgroup_wait<1>();",
        dq_out,
        "warpgroup_wait<0>();",
    ]
    at = [main.index(gemms[0])]
    for g in gemms[1:]:
        at.append(main.index(g, at[-1]))  # each after the one before it
    assert "Tensor tdVrP = make_tensor(rP.data(), tl::acc_to_A(rP.layout()));" in main
    assert "Tensor tdKrdS = make_tensor(rdS.data(), tl::acc_to_A(rdS.layout()));" in main
    # dSᵀ reaches shared memory by stmatrix (the generic proxy): fenced before the barrier dQ's wgmma
    # waits on
    # at stage 0's addresses, computed once, plus the stage's offset (whole 1 KB swizzle atoms)
    assert "for (int i = 0; i < Traits::kWgQueries / 16; ++i) ds_addr[i] = base + i * 2048;" in main
    assert "kBlockM * kBlockN * sizeof(Element) % 1024 == 0" in main
    store = main.index("tl::stsm_x4_t(ds_addr[i] + ds_stage, tdSrdS(4 * i), tdSrdS(4 * i + 1)")
    fence = main.index("tl::fence_async_shared();", store)
    assert fence < main.index("tl::consumer_sync(1, Traits::kNThreads);", store) < at[3]


def test_dq_accum_is_added_as_float4_and_converted_in_that_order():
    sm90, sm80 = _sm90(MHA, options={"dq_bulk": False}).source, translate_backward(MHA, arch="sm_90").source
    # one contiguous part per warp group: with n float4s a thread, thread t = 128 g + u adds its element i
    # at ((g · n + i / 4) · 128 + u) · 4 + i % 4, on both sides
    main = _main(sm90)
    assert (
        "float4* dq_tile = reinterpret_cast<float4*>(dq_head + m_block * (kBlockM * kHeadDim)) "
        "+ wg * (size(acc_dq) / 4) * 128 + tidx % 128;" in main
    )
    assert "for (int i = 0; i < size(acc_dq) / 4; ++i) {" in main
    conv = sm90.split("_bwd_convert_dq(")[1]
    assert "(kBlockM * kHeadDim);" in conv and "constexpr int kGroup = Traits::kNThreads / 2;" in conv
    assert "constexpr int kVectors = decltype(size(tdQcdQ))::value / 4;" in conv
    assert "float4*>(src + s * slice + ((group * kVectors + j) * kGroup + rank) * 4)" in conv
    assert "sdQ[get<0>(tdQcdQ(j * 4 + 3))][get<1>(tdQcdQ(j * 4 + 3))] = " in conv  # float4 j is elements 4j …
    # the sm_80 skeleton's tile keeps its thread-interleaved order: one part, scalars
    mma_sync = translate_backward(MHA, arch="sm_90", skeleton="sm80").source
    assert "atomicAdd(dq_tile + i * Traits::kNThreads, acc_dq(i));" in mma_sync
    assert "src[s * slice + (group * kVectors + j) * kGroup + rank]" in mma_sync
    # over Traits::TiledMmadQ's fragment order: here the wgmma one, its thrfrg_C layout from the traits
    assert "tl::partition_C(tiled_mma_dq.get_thread_slice(threadIdx.x), make_identity_tensor(" in conv
    assert "typename Traits::CoordLayoutdQ{});" in conv
    assert "tiled_mma_dq.get_thread_slice(threadIdx.x).partition_C(" in mma_sync.split("_bwd_convert_dq(")[1]
    assert "using TiledMmadQ = decltype(make_tiled_mma(SM90::GMMA::" in sm90
    # the D kernel is the default's
    assert sm90.split("_bwd_dot_do_o(")[1].split("}\n")[0] == sm80.split("_bwd_dot_do_o(")[1].split("}\n")[0]


def _wide(tl: Path | str = MHA, **kw):
    return _sm90(tl, options={"block_m": 80, **kw.pop("options", {})}, **kw)


def test_an_80_row_query_tile_computes_dq_transposed_and_converts_it_back():
    """FA3's non-causal d = 128 tile: 80 query rows are no whole number of warp groups, so dQᵀ = Kᵀ·dSᵀ
    takes the head dim as its M (warp group g: head-dim rows 64g …) and the convert kernel reads the
    tile as (column, row)."""
    b = _wide()
    src, main = b.source, _main(b.source)
    assert b.spec.block_m == 80 and b.spec.shared_bytes <= 227 * 1024
    assert "static constexpr int kBlockM = 80;" in src
    k, mn = "GMMA::Major::K", "GMMA::Major::MN"
    # N = 80 is outside CuTe's base shapes: the atoms are defined in the source, not included
    assert "struct SM90_64x80x16_F32BF16BF16_SS {" in src
    assert not any(inc.split("  ")[0] in src for inc in EXT_INCLUDES)
    assert f"tl::SM90_64x80x16_F32BF16BF16_SS<{k}, {k}>{{}}, Layout<Shape<_2, _1, _1>>" in src  # Sᵀ, dPᵀ
    assert f"TiledMmadQ = decltype(make_tiled_mma(tl::SM90_64x80x16_F32BF16BF16_SS<{mn}, {k}>{{}}, " in src
    assert "Layout<Shape<_2, _1, _1>>{}));" in src.split("using TiledMmadQ")[1].split("\n")[0]
    # Kᵀ is A (each warp group 64 head-dim rows, at its M coordinate), dS is B (shared)
    kt = "tl::gmma_desc<GMMA::LayoutType::B128>(smem_k + get<1>(wg_mma_dq.thr_vmnk_) * 8192, 0, 64)}"
    assert f"Tensor tdQrKt = make_tensor(GMMA::DescriptorIterator{{{kt}" in main
    ds = "tl::gmma_desc<GMMA::LayoutType::B128>(smem_ds_stage, 1, 64)}"
    assert f"Tensor tdQrdS = make_tensor(GMMA::DescriptorIterator{{{ds}" in main
    _in_order(
        main,
        "tl::wgmma<false, true>(tiled_mma_dkv, tdVrP, tdVrdO, acc_dv);",
        "make_tensor<float>(typename Traits::AccLayoutdQ{});  // (kHeadDim, kBlockM)  // dQᵀ",
        "tl::wgmma<true, false>(tiled_mma_dq, tdQrKt, tdQrdS, acc_dq);",
        "tl::wgmma<false, true>(tiled_mma_dkv, tdKrdS, tdKrQ, acc_dk);",
        "dq_tile_s[i * 128] = make_float4(",  # dq_bulk: d = 128's default
    )
    conv = src.split("_bwd_convert_dq(")[1]
    assert "make_identity_tensor(Shape<Int<kHeadDim>, Int<kBlockM>>{}), " in conv
    assert "typename Traits::CoordLayoutdQ{});  // dQᵀ: (column, row)" in conv
    assert "sdQ[get<1>(tdQcdQ(j * 4 + 0))][get<0>(tdQcdQ(j * 4 + 0))] = " in conv  # (row, column) in shared
    # the rest of the kernel follows kBlockM: the producer's boxes and rows, the stage sizes
    assert 'rows="kBlockM"' not in main and "for (int r = lane; r < kBlockM; r += Traits::kRowLanes)" in main
    # the default stays at 64 rows, byte for byte the kernel without the option
    assert _sm90(MHA).source == _sm90(MHA, options={"block_m": 64}).source
    assert "kBlockM = 64;" in _sm90(MHA).source


def test_a_128_row_query_tile_at_d_64_splits_dq_rows_between_the_warp_groups():
    """FA3's d = 64 tile: Sᵀ and dPᵀ are 128 × 128 (N = 128 atoms), and dQ = dS·K's warp groups own 64
    query rows each over the whole head dim (64-wide atoms, Layout (2, 1, 1)), not half the columns."""
    text = MHA.read_text().replace("Param d = 128", "Param d = 64")
    b = _sm90(text, options={"block_m": 128})
    k, mn = "GMMA::Major::K", "GMMA::Major::MN"
    assert b.spec.block_m == 128 and "static constexpr int kBlockM = 128;" in b.source
    assert f"MMA_64x128x16_F32BF16BF16_SS<{k}, {k}>{{}}, Layout<Shape<_2, _1, _1>>" in b.source
    dq_atom = f"SM90::GMMA::MMA_64x64x16_F32BF16BF16_SS<{k}, {mn}>{{}}, Layout<Shape<_2, _1, _1>>"
    assert f"TiledMmadQ = decltype(make_tiled_mma({dq_atom}" in b.source
    assert "// dQ = dS·K, (kBlockM, kHeadDim): warp group g owns query rows 64g …" in b.source
    main = _main(b.source)
    assert "tl::wgmma<true, false>(tiled_mma_dq, tdQrdS, tdQrKt, acc_dq);" in main
    assert "atomicAdd(dq_tile + i * 128, make_float4(" in main  # d 64: atomics by default


@pytest.mark.parametrize(
    ("text", "block_m", "why"),
    [
        (MHA.read_text().replace("Param d = 128", "Param d = 64"), 80, "dQ transposed.*needs d = 128"),
        (MHA.read_text(), 96, "a query tile of 96 rows: this skeleton has 64 and 80 and 128"),
        (MHA.read_text(), 128, "a query tile of 128 rows doubles.*needs d = 64"),
    ],
)
def test_query_tiles_the_skeleton_does_not_have_are_a_clear_error(text, block_m, why):
    with pytest.raises(BackwardBuildError, match=why):
        _sm90(text, options={"block_m": block_m})


@pytest.mark.parametrize("skeleton", ["sm80", "sm90"])
def test_a_scaled_score_folds_its_scale_into_p_s_exp2(skeleton):
    """s · m with m uniform (`Regions.fold`): P's exponent is one FFMA on the raw score, as the forward's
    softmax; any other region (softcap's tanh) scales its X by log2(e)."""
    plain = translate_backward(MHA, arch="sm_90", skeleton=skeleton).source
    assert (
        "const float p = tl::select_kept(keep, tl::exp2_approx(scores(r, c) * (softmax_scale * "
        "1.44269504088896340736f) - lse_log2));" in plain
    )
    softcap = translate_backward(VARIANTS / "softcap.tl", arch="sm_90", skeleton=skeleton).source
    assert (
        "const float p = tl::select_kept(keep, tl::exp2_approx(x * 1.44269504088896340736f - lse_log2));"
        in softcap
    )


@pytest.mark.parametrize("skeleton", ["sm80", "sm90"])
def test_masked_programs_trim_their_query_blocks_sixteen_at_a_time_first(skeleton):
    """A key block's range of query blocks: whole spans of 16 dropped from both ends while the union of
    their rectangles keeps no score (the masks' interval test over the span), then one block at a time;
    a program without masks has nothing to trim, and one with a launch-time block mask probes its bytes."""
    main = _main(translate_backward(VARIANTS / "sliding_window.tl", arch="sm_90", skeleton=skeleton).source)
    _in_order(
        main,
        "auto blocks_empty = [&](int m_first, int m_end) -> bool {",
        "const int q_lo = m_first * kBlockM;",
        "const int q_hi = min(seqlen_q, m_end * kBlockM) - 1;",
        "while (m_block_max - m_block_min >= 16 && blocks_empty(m_block_max - 16, m_block_max)) "
        "m_block_max -= 16;",
        "while (m_block_max - m_block_min >= 16 && blocks_empty(m_block_min, m_block_min + 16)) "
        "m_block_min += 16;",
        "while (m_block_max > m_block_min && block_class(m_block_max - 1) == 0) --m_block_max;",
    )
    assert "blocks_empty" not in _main(translate_backward(MHA, arch="sm_90", skeleton=skeleton).source)
    documents = _main(
        translate_backward(VARIANTS / "document_mask.tl", arch="sm_90", skeleton=skeleton).source
    )
    assert "blocks_empty" not in documents and "eight classes a step" in documents


@pytest.mark.parametrize("dq_bulk", [False, True])
def test_the_kernel_and_the_convert_kernel_agree_on_dq_accums_order(dq_bulk):
    """The dQ/dK/dV kernel's float4 index of thread t's element i (atomics, or the shared tile the bulk
    add copies as is) and the convert kernel's index, both evaluated from the emitted C over every thread
    and element of a tile: the same place, and every place of the tile once."""
    src = _sm90(MHA, options={"dq_bulk": dq_bulk}).source
    main, conv = _main(src), src.split("_bwd_convert_dq(")[1]
    n4, threads, group = 64 * 128 // 256 // 4, 256, 128  # float4s a thread (d 128, 64 rows), threads

    def c_eval(expr: str, **env: int) -> int:
        return eval(expr.replace("/", "//"), {}, env)  # C's int arithmetic on non-negative operands

    tile = "smem_dq" if dq_bulk else "dq_head + m_block * (kBlockM * kHeadDim)"
    tile = f"= reinterpret_cast<float4*>({tile}) + "
    base = next(ln for ln in main.splitlines() if tile in ln).split(tile)[1].rstrip(";")
    base = base.replace("size(acc_dq) / 4", str(n4))
    step = "dq_tile_s[i * 128]" if dq_bulk else "atomicAdd(dq_tile + i * 128,"
    assert step in main
    read = "float4*>(src + s * slice + "  # the float offset of the thread's float4 j: elements 4j … 4j + 3
    at = next(ln for ln in conv.splitlines() if read in ln).split(read)[1].split(");")[0]
    seen = set()
    for t in range(threads):
        for i in range(4 * n4):
            kernel = 4 * (c_eval(base, wg=t // group, tidx=t) + i // 4 * 128) + i % 4
            env = {"group": t // group, "rank": t % group, "kVectors": n4, "kGroup": group, "j": i // 4}
            convert = c_eval(at, **env) + i % 4
            assert kernel == convert, (t, i)
            seen.add(convert)
    assert seen == set(range(threads * 4 * n4))


def test_the_sm80_skeletons_convert_reads_its_thread_interleaved_scalars():
    """The sm_80 skeleton adds thread t's element i at i · kNThreads + t (scalar atomics); the convert
    kernel's one-part, one-element-a-vector index, evaluated from the emitted C, is the same place."""
    src = translate_backward(MHA, arch="sm_90", skeleton="sm80").source
    main, conv = src.split("_bwd_dq_dk_dv(")[1].split("_bwd_convert_dq(")[0], src.split("_bwd_convert_dq(")[1]
    assert "float* dq_tile = dq_head + m_block * (kBlockM * kHeadDim) + tidx;" in main
    assert "atomicAdd(dq_tile + i * Traits::kNThreads, acc_dq(i));" in main
    at = next(ln for ln in conv.splitlines() if "acc += src[s * slice + " in ln)
    at = at.split("acc += src[s * slice + ")[1].split("];")[0]
    threads, n = 256, 64 * 128 // 256
    for t in range(threads):
        for i in range(n):
            env = {"group": 0, "rank": t, "kVectors": n, "kGroup": threads, "j": i}
            got = eval(at.replace("/", "//"), {}, env)
            assert got == i * threads + t, (t, i)


def test_masks_classify_query_blocks_and_score_rows_read_the_transposed_accumulator():
    main = _main(_sm90(VARIANTS / "sliding_window.tl").source)
    assert "auto block_class = [&](int m_block) -> int" in main
    assert "while (m_block_min < m_block_max && block_class(m_block_min) == 0) ++m_block_min;" in main
    fast, slow = main.split("if (!masked && (m_block + 1) * kBlockM <= seqlen_q) {")[1].split("else {")[:2]
    assert "const bool keep = true;" in fast
    assert "const bool keep = tl_qo < tl_q_end && tl_ko < tl_k_end" in slow
    # Sᵀ holds key rows: the score rows are its columns, a query is get<1> of (key, query); the masked
    # loop's offsets from thread 0's coordinates of the same (key, query) tile
    assert "const int tl_qo = get<1>(coords0(r, c)) - get<1>(coords0(0, 0));" in slow
    assert "make_identity_tensor(Shape<Int<kBlockN>, Int<kBlockM>>{}));" in main.split("Tensor coords0")[0]
    assert "Tensor scores = make_tensor(acc_s.data(), tl::acc_colrow(acc_s.layout()));" in main
    assert "const int row = m_block * kBlockM + get<1>(coords(r, 0));" in main
    assert "const int col = n_block * kBlockN + get<0>(coords(r, c));" in main


def test_alibi_row_sums_reduce_over_the_lanes_of_one_query_column():
    b = _sm90(VARIANTS / "alibi.tl", learnable=("slopes",))
    main = _main(b.source)
    assert b.spec.row_sums > 0 and "_bwd_row_grads(" in b.source
    assert "tl_ps += __shfl_xor_sync(0xffffffff, tl_ps, 16);" in main
    assert "if (row_in && tidx % 32 < 4) {" in main
    assert "__shfl_xor_sync(0xffffffff, tl_ps, 1);" not in main


def test_blocks_are_tagged_with_their_tl_lines_and_line_directives():
    b = _sm90(MHA)
    lines = MHA.read_text().splitlines()
    gemm = next(i + 1 for i, t in enumerate(lines) if t.strip().startswith("Compute GEMM Q, K"))
    assert f"// TL:{gemm}  Sᵀ = K·Qᵀ" in b.source
    assert f'#line {gemm} "{MHA}"' in b.source


@pytest.mark.parametrize(
    ("kw", "why"),
    [
        ({"arch": "sm_80", "skeleton": "sm90"}, "needs arch sm_90"),
        ({"arch": "sm_90", "skeleton": "sm100"}, "skeletons are auto, sm80, sm90"),
        ({"options": {"overlap_p": True}}, "generator options need a named skeleton"),
    ],
)
def test_the_skeleton_choice_is_checked(kw, why):
    with pytest.raises(BackwardBuildError, match=why):
        translate_backward(MHA, **kw)


def test_head_dims_beyond_the_skeleton_are_a_clear_error():
    with pytest.raises(BackwardBuildError, match="head dim 192: this skeleton covers 64, 128, 256"):
        _sm90(_d256(192))


def test_the_cli_picks_the_skeleton():
    import argparse

    from pipeline.backward_cli import skeleton
    from pipeline.cli import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    parse = parser.parse_args
    assert skeleton(parse(["build", "--backward", "--backward-skeleton", "sm90", "x.tl"])) == (
        "sm_90",
        "sm90",
    )
    assert skeleton(parse(["run", "--backward", "--backward-skeleton", "sm80", "x.tl"])) == ("sm_80", "sm80")
    assert skeleton(parse(["build", "--backward", "x.tl"])) == (None, "auto")


def test_shared_memory_keeps_its_address_space_and_ds_goes_through_stmatrix():
    main = _main(_sm90(MHA).source)
    # an offset added to smem_raw: a pointer rounded through an integer is generic (LD / ST, not LDS / STS)
    assert "uintptr_t" not in main
    assert "char* smem = smem_raw + ((1024 - (cute::cast_smem_ptr_to_uint(smem_raw) & 1023)) & 1023);" in main
    src = _sm90(MHA).source
    assert "stmatrix.sync.aligned.x4.trans.m8n8.shared.b16" in src
    assert "tl::stsm_x4_t(ds_addr[i] + ds_stage, tdSrdS(4 * i), tdSrdS(4 * i + 1)" in main
    assert "make_tiled_copy_C(" not in main  # the addresses in closed form (the test below)


@pytest.mark.nvrtc
@pytest.mark.slow
def test_the_plain_and_alibi_backwards_compile_for_sm_90a():
    """NVRTC for sm_90a (the 80-row tile too), and where a disassembler is at hand, the plain kernel's
    SASS: between its first and last wgmma, shared memory is read by LDS and dSᵀ written by stmatrix,
    never by a generic load or store (a generic access costs a 64-bit address and goes through the
    generic path)."""
    from runner.compile import CompileError, CompileJob, compile_many
    from runner.sass import SassError, disassemble

    builds = [_sm90(MHA), _sm90(VARIANTS / "alibi.tl", learnable=("slopes",)), _wide()]
    jobs = [CompileJob(source=b.source, arch=b.spec.arch, name=f"{b.spec.name}.bwd.cu") for b in builds]
    results = compile_many(jobs)
    failed = [str(r)[:800] for r in results if isinstance(r, CompileError)]
    assert not failed, "\n".join(failed)
    assert all(r.kind == "cubin" and r.target == "sm_90a" for r in results)
    try:
        sass = disassemble(results[0].code)
    except SassError as exc:
        pytest.skip(str(exc))
    main = next(
        f for f in sass.split("Function : ")[1:] if f.split("\n")[0].strip().endswith("_bwd_dq_dk_dv")
    )
    lines = main.splitlines()
    gemms = [i for i, ln in enumerate(lines) if " HGMMA." in ln]
    loop = lines[gemms[0] : gemms[-1]]
    generic = [ln.strip()[:80] for ln in loop if re.search(r"\s(LD|ST)\.E", ln)]
    assert not generic, generic[:4]
    assert sum("STSM" in ln for ln in loop) == 4  # dSᵀ: 64 × 64 per warp group, 16 bits, 8 × 8 tiles
    assert sum(" LDS" in ln for ln in loop) >= 32  # the rows' LSE and D


# ---- overlap_p: the opt-in A/B variant that computes P while dP's wgmma runs ----


def _plan(tl: Path | str, dtype: str | None = None):
    """The plan translate_backward hands the sm90 generator (no file: the source names no .tl)."""
    import dataclasses

    from tl_language import analyze
    from translator.plan import make_plan

    text = tl.read_text() if isinstance(tl, Path) else tl
    analysis = analyze(text)
    plan = make_plan(analysis.model, analysis.text)
    plan = dataclasses.replace(plan, arch="sm_90", compute_capability=(9, 0))
    return dataclasses.replace(plan, dtype=dtype) if dtype else plan


def _overlapped(tl: Path | str, **kw) -> str:
    from translator.backends.sm90_bwd import generate_backward_sm90

    return generate_backward_sm90(_plan(tl), overlap_p=True, **kw)[0]


S_GEMM = "tl::wgmma<true, false>(tiled_mma_sdp, tSrK, tSrQ, acc_s);"
DP_GEMM = "tl::wgmma<true, false>(tiled_mma_sdp, tdPrV, tdPrdO, acc_dp);"
P_EXP2 = (
    "scores(r, c) = tl::select_kept(keep, tl::exp2_approx(scores(r, c) * (softmax_scale * "
    "1.44269504088896340736f) - lse_log2));"
)
DS = "dscores(r, c) = keep ? dx"  # dS = dX · (dX/ds without the folded scale)


@pytest.mark.parametrize(
    ("tl", "learn"),
    [(MHA, ()), (ROOT / "examples" / "causal_mha_fwd.tl", ()), (VARIANTS / "alibi.tl", ("slopes",))],
)
def test_overlap_p_is_off_by_default_and_the_default_source_is_unchanged(tl, learn):
    from translator.backends.sm90_bwd import generate_backward_sm90

    plan = _plan(tl)
    default, spec = generate_backward_sm90(plan, learnable=learn)
    assert generate_backward_sm90(plan, learnable=learn, overlap_p=False) == (default, spec)
    assert (
        default == translate_backward(tl.read_text(), arch="sm_90", skeleton="sm90", learnable=learn).source
    )
    # both SS wgmmas, then one wait for both before any score math
    assert f"{S_GEMM}\n        {DP_GEMM}\n        warpgroup_wait<0>();\n" in default
    assert "pass 1: P from S alone" not in default and "tl::block_boundary(seqlen_k >> 30);" not in _main(
        default
    )
    overlapped, ospec = generate_backward_sm90(plan, learnable=learn, overlap_p=True)
    assert overlapped != default and ospec == spec  # the same launch: only the main loop's order moves


def _after(main: str, needles: list[str]) -> list[int]:
    at = [main.index(needles[0])]
    for n in needles[1:]:
        at.append(main.index(n, at[-1]))  # each after the one before it
    return at


@pytest.mark.parametrize("tl", [MHA, ROOT / "examples" / "causal_mha_fwd.tl", VARIANTS / "sliding_window.tl"])
def test_overlap_p_waits_for_s_computes_p_then_waits_for_dp(tl):
    main = _main(_overlapped(tl))
    _, _, wait1, p, _, wait0, ds = _after(
        main,
        [
            S_GEMM,
            DP_GEMM,
            "warpgroup_wait<1>();  // Sᵀ only",
            P_EXP2,
            "tl::block_boundary(seqlen_k >> 30);",
            "warpgroup_wait<0>();",
            DS,
        ],
    )
    assert main[wait1:].index("warpgroup_fence_operand(acc_s);") < p - wait1
    assert "warpgroup_fence_operand(acc_dp);" in main[wait0:ds]
    # pass 1 (both block classes) reads S only: no dP and no derivative before the wait for dP
    pass1 = main[wait1:wait0]
    assert pass1.count(P_EXP2) == 2 and "dscores(r, c)" not in pass1 and "dx_ds" not in pass1
    code = [ln.split("//")[0] for ln in pass1.splitlines() if "Tensor dscores = make_tensor(" not in ln]
    assert not [ln for ln in code if "acc_dp" in ln or "dscores" in ln]  # its only view is declared
    # pass 2 (both classes) reads back the P pass 1 left, with the same masks, and writes dS
    pass2 = main[wait0 : main.index("Tensor rP = tl::convert_fragment<Element>(acc_s);")]
    assert pass2.count("const float p = scores(r, c);") == 2 and pass2.count(DS) == 2
    assert "tl::exp2_approx" not in pass2 and "const float x =" not in pass2
    assert "const bool keep = true;" in pass2
    masked = (
        "const bool keep = row_in && (!masked ||",
        "const bool keep = tl_qo < tl_q_end && tl_ko < tl_k_end",
    )
    assert any(m in pass2 for m in masked)  # the masks per score, or the diagonal limits (causal, window)
    # the rest of the block is the default's: dV, dQ and dK after dS
    _after(
        main[ds:], ["tl::wgmma<false, true>(tiled_mma_dkv, tdVrP, tdVrdO, acc_dv);", "acc_dq);", "acc_dk);"]
    )


def test_overlap_p_sums_alibi_rows_after_the_wait_for_dp():
    main = _main(_overlapped(VARIANTS / "alibi.tl", learnable=("slopes",)))
    wait0 = main.index("warpgroup_wait<0>();")
    assert main.index("tl_ps += p;") > wait0 and main.index("tl_pdp += pdp;") > wait0
    assert main.index("if (row_in && tidx % 32 < 4) {") > wait0
    assert "float tl_ps = 0.f" not in main[:wait0]


@pytest.mark.parametrize(
    ("name", "why"), [("softcap", "dX/ds = "), ("sigmoid_attention", "dX/ds = "), ("relu_attention", "dX/ds")]
)
def test_overlap_p_refuses_programs_whose_ds_reads_the_raw_score(name, why):
    from translator.errors import TranslateError

    with pytest.raises(TranslateError) as err:
        _overlapped(VARIANTS / f"{name}.tl")
    msg = err.value.diagnostics[0].message
    assert "overlap_p computes P over the raw score before dP is ready" in msg and why in msg
    assert "build without overlap_p" in msg


def test_backward_verify_builds_sm90ovl_through_the_generator():
    from benchmarks.backward_verify import SKELETONS

    keywords, suffix = SKELETONS["sm90ovl"]
    assert suffix == "_sm90ovl"
    b = translate_backward(MHA.read_text(), dtype="bf16", learnable=(), deterministic=False, **keywords)
    assert b.source == _overlapped(MHA) and b.spec.arch == "sm_90a"
    plain, plain_suffix = SKELETONS["sm90"]
    assert plain_suffix == "_sm90"
    default = translate_backward(MHA.read_text(), dtype="bf16", learnable=(), deterministic=False, **plain)
    assert default.source == translate_backward(MHA.read_text(), arch="sm_90", skeleton="sm90").source


@pytest.mark.nvrtc
@pytest.mark.slow
def test_the_overlapped_plain_backward_compiles_for_sm_90a_with_p_beside_dp():
    """NVRTC for sm_90a, and where a disassembler is at hand, the SASS: every exp2 of P between the wait
    for Sᵀ (`DEPBAR.LE gsb0, 0x1`) and the wait for dPᵀ (`0x0`), none after it."""
    from runner.compile import CompileError, CompileJob, compile_many
    from runner.sass import SassError, disassemble

    source = _overlapped(MHA)
    (result,) = compile_many([CompileJob(source=source, arch="sm_90a", name="mha_fwd.ovl.bwd.cu")])
    assert not isinstance(result, CompileError), str(result)[:800]
    assert result.kind == "cubin" and result.target == "sm_90a"
    try:
        sass = disassemble(result.code)
    except SassError as exc:
        pytest.skip(str(exc))
    main = next(
        f for f in sass.split("Function : ")[1:] if f.split("\n")[0].strip().endswith("_bwd_dq_dk_dv")
    )
    lines = main.splitlines()
    s_done = next(i for i, ln in enumerate(lines) if "WARPGROUP.DEPBAR.LE gsb0, 0x1" in ln)
    dp_done = next(i for i, ln in enumerate(lines[s_done:], s_done) if "WARPGROUP.DEPBAR.LE gsb0, 0x0" in ln)
    exps = sum("MUFU.EX2" in ln for ln in lines[s_done:dp_done])
    assert exps >= 32, f"only {exps} MUFU.EX2 while dPᵀ's wgmma runs"  # 64 key rows × 64 queries / 128
    assert exps == sum("MUFU.EX2" in ln for ln in lines), "exp2s of P after the wait for dPᵀ"


# ---- producer: FA3's warp specialisation, a third warp group loading Q, dO and the rows ----


def _producer(tl: Path | str, **kw):
    """The kernel with dQ by atomics unless told (d = 128's default adds the dQ writer's walk)."""
    from translator.backends.sm90_bwd import generate_backward_sm90

    return generate_backward_sm90(_plan(tl), **{"dq_bulk": False, **kw})


def test_producer_adds_a_warp_group_and_the_other_kernels_keep_theirs():
    from translator.backends.sm90_bwd import shared_bytes

    source, spec = _producer(MHA)
    assert spec.main_threads == spec.dq_dk_dv_threads == 384 and spec.threads == 256
    assert spec.shared_bytes == shared_bytes(128)
    assert "void __launch_bounds__(384, 1) mha_fwd_bwd_dq_dk_dv(" in source
    assert "void __launch_bounds__(256) mha_fwd_bwd_convert_dq(" in source
    assert "void __launch_bounds__(256) mha_fwd_bwd_dot_do_o(" in source


@pytest.mark.parametrize("tl", [MHA, VARIANTS / "sliding_window.tl", VARIANTS / "document_mask.tl"])
def test_producer_stages_go_through_full_and_empty_mbarriers(tl):
    """The producer waits for a stage's release; lane 0 arrives on the stage's full barrier with its
    byte count and issues Q's and dO's TMA loads, the lanes copy the rows' LSE and D by cp.async, whose
    landing is their arrival (no thread waits for a load); the consumers wait for the barrier, read the
    stage and release it; past the one block-wide barrier after the mbarriers' init, only the
    consumers' named barrier remains (the K/V load and the dS exchange)."""
    main = _main(_producer(tl)[0])
    head, split = main.split("if (tidx >= Traits::kNThreads) {")
    producer, consumer = split.split("cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegs>();")
    assert head.count("__syncthreads();") == 1
    assert "Barrier::init(&full_qdo[s], 1 + Traits::kRowLanes);" in head
    assert "Barrier::init(&empty_qdo[s], Traits::kNThreads);" in head
    assert "__syncthreads" not in producer + consumer
    assert "if (warp != 0) return;" in producer
    order = [
        "warpgroup_reg_dealloc<Traits::kProducerRegs>",
        "if (fill >= 2) Barrier::wait(&empty_qdo[stage], ((fill >> 1) & 1) ^ 1);",
        "Barrier::arrive_and_expect_tx(&full_qdo[stage], Traits::kTxQdO);",
        "SM90_TMA_LOAD_4D::copy(&tma_q, &full_qdo[stage], 0, stage_q + c * kBlockM * Traits::kBoxCols,",
        "SM90_TMA_LOAD_4D::copy(&tma_do, &full_qdo[stage], 0, stage_q + kBlockM * kHeadDim + c * kBlockM",
        "tl::cp_async_f32(rows + r, lse + row_base + m_block * kBlockM + r);",
        "cutlass::arch::cpasync_barrier_arrive_noinc(&full_qdo[stage]);",
        "++fill;",
    ]
    at = [producer.index(x) for x in order]
    assert at == sorted(at) and "return;" in producer
    assert "cp_async_wait" not in producer and "load_QdO" not in producer
    loop = consumer.split("for (int m_block = m_block_min; m_block < m_block_max; ) {")[1]
    loop = loop.split("// dK and dV of this key block")[0]
    order = [
        "Barrier::wait(&full_qdo[stage], (fill >> 1) & 1);",
        S_GEMM,
        "tl::consumer_sync(1, Traits::kNThreads);  // dS of both warp groups",
        "warpgroup_fence_operand(acc_dk);",
        "Barrier::arrive(&empty_qdo[stage]);",
        "++fill;",
    ]
    at = [loop.rindex(x) for x in order]
    assert at == sorted(at)
    assert loop.count("consumer_sync") == 1 and "load_QdO" not in consumer and "cp_async_fence" not in loop
    assert "Element* smem_ds_stage = smem_ds + stage * (kBlockM * kBlockN);" in loop


def test_producer_walks_the_consumers_blocks():
    """Both sides classify the same query blocks and advance with next_m_block, so the stages line up."""
    main = _main(_producer(VARIANTS / "sliding_window.tl")[0])
    producer, consumer = main.split("if (tidx >= Traits::kNThreads) {")[1].split("warpgroup_reg_alloc")
    for side in (producer, consumer):
        assert side.count("auto block_class = [&](int m_block) -> int {") == 1
        assert "auto next_m_block = [&](int m)" in side
        assert "for (int n_block = blockIdx.x; n_block < n_blocks; n_block += gridDim.x)" in side
    assert "m_block = next_m_block(m_block)" in producer and "m_block = next;" in consumer


@pytest.mark.parametrize("name", sorted(p.stem for p in VARIANTS.glob("*.tl")))
def test_producer_derives_every_catalogue_variant(name):
    source, spec = _producer(VARIANTS / f"{name}.tl", learnable=LEARN.get(name, ()))
    assert spec.main_threads == 384 and "Barrier::arrive_and_expect_tx(&full_qdo[stage]" in source


@pytest.mark.parametrize("deterministic", [False, True])
def test_producer_loads_k_and_v_by_tma_once_the_consumers_released_the_last_ones(deterministic):
    """Per key block (several a thread block when deterministic): the producer waits for the consumers'
    release of the previous K and V (not before the first), lane 0 counts their bytes on full_kv and
    issues the TMA loads; the consumers wait on full_kv, and after the head loop (whose last query block
    ends with warpgroup_wait<0>) meet the other warp group, write dK and dV into K's and V's tiles by
    stmatrix, meet again, store each row in 16-byte pieces, and only then release K and V."""
    main = _main(_producer(MHA, deterministic=deterministic)[0])
    producer, consumer = main.split("if (tidx >= Traits::kNThreads) {")[1].split("warpgroup_reg_alloc")
    walk = producer.split("for (int n_block")[1]
    _in_order(
        walk,
        "if (kv_fill > 0) Barrier::wait(empty_kv, (kv_fill - 1) & 1);",
        "Barrier::arrive_and_expect_tx(full_kv, Traits::kTxKV);",
        "SM90_TMA_LOAD_4D::copy(&tma_k, full_kv, 0, smem_k + c * kBlockN * Traits::kBoxColsK,",
        "SM90_TMA_LOAD_4D::copy(&tma_v, full_kv, 0, smem_v + c * kBlockN * Traits::kBoxCols,",
        "++kv_fill;",
        "for (int g = 0; g < group; ++g)",
    )
    block = consumer.split("for (int n_block")[1]
    order = [
        "Barrier::wait(full_kv, kv_fill & 1);",
        "for (int g = 0; g < group; ++g)",
        "warpgroup_wait<0>();",
        "const int tidx_e = tl::thread_index();",
        "dkv_addr[i] = row * (kHeadDim * 2) + ((2 * i + m / 2) ^ q) * 16;",
        "tl::consumer_sync(1, Traits::kNThreads);  // the other warp group's last dQ wgmma has read K",
        "tl::stsm_x4(smem_k_u + dkv_addr[i], tl::pack2(rdK_rc(0, 4 * i + 0), rdK_rc(0, 4 * i + 1)),",
        "tl::consumer_sync(1, Traits::kNThreads);  // both warp groups' rows are in the tiles",
        "const int at0 = r0 * kHeadDim + (piece ^ (r0 % 8)) * 8;",
        "*reinterpret_cast<uint4*>(dk_row + k * kRowsAStep * dk_row_stride) = "
        "*reinterpret_cast<const uint4*>(smem_k + at0 + k * kRowsAStep * kHeadDim);",
        "tl::fence_async_shared();  // the reads of K's and V's tiles before the next key block's TMA",
        "Barrier::arrive(empty_kv);",
        "++kv_fill;",
    ]
    at = [block.rindex(x) if x == "warpgroup_wait<0>();" else block.index(x) for x in order]
    assert at == sorted(at)
    assert "cp_async" not in block.split("Barrier::wait(&full_qdo")[0] and "load_rows(tKgK" not in main


def test_backward_verify_builds_sm90km_through_the_generator():
    from benchmarks.backward_verify import SKELETONS

    text = MHA.read_text()
    keywords, suffix = SKELETONS["sm90km"]
    b = translate_backward(text, dtype="bf16", learnable=(), deterministic=False, **keywords)
    assert suffix == "_sm90km" and b.spec.main_threads == 384 and "const int grid_col" in b.source
    assert _producer(MHA, dq_bulk=None)[0] == translate_backward(text, arch="sm_90", skeleton="sm90").source


@pytest.mark.parametrize(
    ("name", "key_major"),
    [
        ("sink_tokens_window", True),  # the first key block sees every query row
        ("document_mask", True),  # a launch-time block mask: unknown here
        ("global_sliding", True),
        ("prefix_softcap_document", True),
        ("sliding_window", False),  # a band: every key block alike
        ("dilated_window", False),
        ("prefix_lm", False),
        ("alibi", False),  # causal: a spread of 2
        ("softcap", False),  # no mask
    ],
)
def test_the_grid_goes_key_major_where_the_work_per_key_block_is_uneven(name, key_major):
    from translator.backends.sm90_bwd import uneven_key_blocks

    assert uneven_key_blocks(_plan(VARIANTS / f"{name}.tl")) is key_major
    assert ("const int grid_col" in _sm90(VARIANTS / f"{name}.tl").source) is key_major


def test_key_major_takes_the_grid_key_column_first():
    """Thread block t of the (columns, batch, K/V heads) grid: heads fastest, then batch, then the key
    column, and the column (not blockIdx.x) starts the key-block loop and picks the deterministic slice."""
    from translator.backends.sm90_bwd import generate_backward_sm90

    main = _main(generate_backward_sm90(_plan(MHA), key_major=True, deterministic=True, dq_bulk=False)[0])
    assert "const int tile = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);" in main
    assert "const int bidh_kv = tile % gridDim.z;" in main
    assert "const int bidb = (tile / gridDim.z) % gridDim.y;" in main
    assert "blockIdx.x" not in main.split("const int grid_col")[1]
    loop = "for (int n_block = grid_col; n_block < n_blocks; n_block += gridDim.x)"
    assert main.count(loop) == 2  # the consumers' and the producer's walk
    assert "float* dq_slice = dq_accum + grid_col * (" in main


def test_dq_bulk_stores_dq_in_shared_memory_and_one_warp_adds_it_in_bulk():
    """`dq_bulk`: each consumer warp group waits for the writer to have read its part of the last tile (not
    on the first block), stores its part in dq_accum's order, fences it and arrives, on its own named
    barriers; the producer's last warp syncs on each part, adds it with one bulk reduction from one lane,
    waits for both reads and hands both parts back; the first warp loads, as without it."""
    from translator.backends.sm90_bwd import generate_backward_sm90, shared_bytes

    source, spec = generate_backward_sm90(_plan(MHA), dq_bulk=True)
    main = _main(source)
    with_dq = shared_bytes(128, dq_bulk=True)
    assert spec.shared_bytes == with_dq == shared_bytes(128) + 32768
    assert "atomicAdd(dq_tile" not in main
    consumer = main.split("warpgroup_reg_alloc<Traits::kConsumerRegs>();")[1]
    _in_order(
        consumer,
        "warpgroup_wait<1>();",
        "if (fill > 0) tl::consumer_sync(4 + wg, 128 + 32);",  # this warp group's part only
        "float4* dq_tile_s = reinterpret_cast<float4*>(smem_dq) + wg * (size(acc_dq) / 4) * 128 "
        "+ tidx % 128;",
        "dq_tile_s[i * 128] = make_float4(acc_dq(4 * i)",
        "tl::fence_async_shared();  // st.shared before the bulk copy reads it",
        "tl::consumer_arrive(2 + wg, 128 + 32);",
        "Barrier::arrive(&empty_qdo[stage]);",
    )
    writer = main.split("if (warp == Traits::kProducerThreads / 32 - 1) {")[1]
    writer = writer.split("if (warp != 0) return;")[0]
    _in_order(
        writer,
        "constexpr int kPart = kBlockM * kHeadDim / 2;",
        "for (int g = 0; g < 2; ++g) {",
        "tl::consumer_sync(2 + g, 128 + 32);",
        "tl::bulk_reduce_add_f32(dq_head + m_block * (kBlockM * kHeadDim) + g * kPart, smem_dq + g * kPart, "
        "kPart * 4);",
        "tl::bulk_wait_read();  // both parts are read",
        "for (int g = 0; g < 2; ++g) tl::consumer_arrive(4 + g, 128 + 32);",
        "tl::bulk_wait();",
    )


@pytest.mark.parametrize(("columns", "heads_all", "heavy"), [(128, 16, 1), (3, 2, 2), (1, 4, 1), (5, 1, 3)])
def test_heavy_columns_map_every_tile_once_heavy_columns_first(columns, heads_all, heavy):
    """`heavy_columns`: the emitted index arithmetic, run in Python over a grid, visits every (column, head)
    once; the first heavy × heads tiles are the heavy columns of every head, the rest head-major."""
    from translator.backends.sm90_bwd import generate_backward_sm90

    main = _main(generate_backward_sm90(_plan(VARIANTS / "sink_tokens_window.tl"), key_major=False,
                                        heavy_columns=heavy)[0])  # fmt: skip
    assert f"const int heavy = min({heavy}, static_cast<int>(gridDim.x));" in main
    assert "for (int n_block = grid_col; n_block < n_blocks; n_block += gridDim.x)" in main
    h = min(heavy, columns)
    seen = []
    for tile in range(columns * heads_all):
        first = tile < h * heads_all
        bh = tile % heads_all if first else (tile - h * heads_all) // (columns - h)
        col = tile // heads_all if first else h + (tile - h * heads_all) % (columns - h)
        seen.append((col, bh))
    assert sorted(seen) == [(c, b) for c in range(columns) for b in range(heads_all)]
    assert all(c < h for c, _ in seen[: h * heads_all]) and all(c >= h for c, _ in seen[h * heads_all :])
    rest = seen[h * heads_all :]
    assert rest == sorted(rest, key=lambda cb: (cb[1], cb[0]))  # head-major


def test_heavy_columns_turn_the_automatic_key_major_off_and_refuse_an_explicit_one():
    from translator.backends.sm90_bwd import generate_backward_sm90

    plan = _plan(VARIANTS / "sink_tokens_window.tl")  # key-major by default (uneven_key_blocks)
    main = _main(generate_backward_sm90(plan, heavy_columns=1)[0])
    assert "const int heavy = min(1, static_cast<int>(gridDim.x));" in main
    assert "const int bidb = (tile / gridDim.z) % gridDim.y;" not in main  # the key-major mapping
    with pytest.raises(Exception, match="heavy_columns or key_major, not both"):
        generate_backward_sm90(plan, heavy_columns=1, key_major=True)


def test_head_sections_visit_every_key_column_of_every_head_once_longest_first_within_a_section():
    """`head_sections`: the thread block's (key column, batch, K/V head), evaluated from the emitted C over
    a whole grid (a last section shorter than the others, GQA): every tile once, and within a section the
    key columns in order, each over the section's heads."""
    src = _sm90(ROOT / "examples" / "causal_mha_fwd.tl", options={"head_sections": True}).source
    main = _main(src)
    block = "const int tile = " + main.split("const int tile = ", 1)[1].split("const int group = ", 1)[0]
    stmts = [re.match(r"const (?:long long|int) (\w+) = (.*?);", ln.strip()) for ln in block.splitlines()]
    py = [
        (m[1], m[2].replace("static_cast<long long>", "").replace("static_cast<int>", "").replace("LL", ""))
        for m in stmts
        if m
    ]
    # 8k rows of two query heads: 16 MiB a K/V head, sections of two, the last of one
    cols, batch, heads_kv, group = 6, 1, 5, 2
    dims = {"gridDim_x": cols, "gridDim_y": batch, "gridDim_z": heads_kv, "heads_kv": heads_kv}
    env0 = {**dims, "seqlen_q": 8192, "kHeadDim": 128, "heads": heads_kv * group, "max": max, "min": min}
    seen, order = set(), []
    for t in range(cols * batch * heads_kv):
        env = {**env0, "blockIdx_x": t % cols, "blockIdx_y": t // cols % batch}
        env["blockIdx_z"] = t // cols // batch
        for name, expr in py:
            expr = expr.replace("gridDim.", "gridDim_").replace("blockIdx.", "blockIdx_").replace("/", "//")
            env[name] = eval(expr, {}, env)
        seen.add((env["grid_col"], env["bidb"], env["bidh_kv"]))
        order.append((env["section"], env["first"], env["grid_col"]))
    assert len(seen) == cols * batch * heads_kv
    assert all(0 <= c < cols for c, _, _ in seen)
    assert order == sorted(order, key=lambda o: (o[1], o[2]))  # sections in turn, key columns in order
    assert order[0][0] == 2 and order[-1][1] == 4  # sections of two, the last of one


@pytest.mark.parametrize("skeleton", ["sm80", "sm90"])
def test_the_backward_tests_divisibility_by_hoisted_remainders_and_keeps_per_key_values_in_arrays(skeleton):
    """The forward's `congruences` form of `|q − k| % dil == 0` (q % dil == k % dil) in the backward too,
    the key's remainder computed once per column before the row loop (`emit_key_arrays`), the query's once
    per row: no remainder left per score."""
    b = translate_backward(VARIANTS / "dilated_window.tl", arch="sm_90", skeleton=skeleton)
    main = b.source.split("_bwd_dq_dk_dv(")[1].split("_bwd_convert_dq(")[0]
    key = "get<0>" if skeleton == "sm90" else "get<1>"  # the sm_90 tile is Sᵀ: a key is its first coordinate
    _in_order(
        main,
        "constexpr int kCols = decltype(size<1>(scores))::value;",
        f"const int col = n_block * kBlockN + {key}(coords(0, c));",
        "tl_c0[c] = tl::mod_nonneg(col, scalar_dil);  // (kv_idx % dil)",
        "for (int r = 0; r < size<0>(scores); ++r) {",
        "= tl::mod_nonneg(row, scalar_dil);  // (q_idx % dil)",
        "== tl_c0[c]);  // ((q_idx % dil) == (kv_idx % dil))",
    )
    per_score = main.split("for (int c = 0; c < size<1>(scores); ++c) {")[1:]
    assert per_score and not any("scalar_dil" in loop.split("dscores(r, c) = ")[0] for loop in per_score)


def test_head_sections_is_refused_beside_a_head_major_or_heavy_columns_order():
    """An A/B option that cannot take effect is an error, never a silent head-major build."""
    for options in ({"head_sections": True, "key_major": False}, {"head_sections": True, "heavy_columns": 2}):
        with pytest.raises(BackwardBuildError):
            _sm90(ROOT / "examples" / "causal_mha_fwd.tl", options=options)


NVCC = "/usr/local/cuda/bin/nvcc"
_DS_HOST = r"""
#include <cstdio>
int main() {
  using Traits = TRAITS;
  using Element = Traits::Element;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
  int bad = 0;
  for (int tidx = 0; tidx < 256; ++tidx) {
    typename Traits::TiledMmaSdP tiled_mma_sdp;
    auto tiled_copy = make_tiled_copy_C(Copy_Atom<SM90_U16x8_STSM_T, Element>{}, tiled_mma_sdp);
    auto copy = tiled_copy.get_thread_slice(tidx);
    Element* smem_ds = reinterpret_cast<Element*>(0x10000);
    // dSᵀ as CuTe sees it: dS's swizzled layout read (key, query)
    using SmemLayoutdSt = decltype(composition(typename Traits::SmemLayoutdS{},
        make_layout(Shape<Int<kBlockN>, Int<kBlockM>>{}, Stride<Int<kBlockM>, _1>{})));
    Tensor sdSt = make_tensor(make_smem_ptr(smem_ds), SmemLayoutdSt{});
    Tensor dst = zipped_divide(copy.partition_D(sdSt), Shape<_8>{});
    auto acc = tiled_mma_sdp.get_thread_slice(tidx).partition_fragment_C(
        make_identity_tensor(Shape<Int<kBlockN>, Int<kBlockM>>{}));
    Tensor idx = make_tensor<int>(acc.layout());
    for (int v = 0; v < size(idx); ++v) {  // compact: a value's index is its offset
      idx(v) = v;
      bad += acc.layout()(v) != v;
    }
    Tensor src = zipped_divide(copy.retile_S(idx), Shape<_8>{});
    bad += size<1>(dst) != Traits::kWgQueries / 16;
    uint32_t ds_addr[Traits::kWgQueries / 16];
    EMITTED
    for (int i = 0; i < size<1>(dst); ++i) {
      char* at = reinterpret_cast<char*>(raw_pointer_cast(&dst(0, i)));
      const long want = at - reinterpret_cast<char*>(smem_ds);
      bad += long(ds_addr[i]) != want;
      for (int e = 0; e < 8; ++e) bad += src(e, i) != 8 * i + e;  // atom i: the values 8i ... 8i + 7
    }
  }
  printf("mismatches %d\\n", bad);
  return bad != 0;
}
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None and not Path(NVCC).exists(), reason="needs nvcc")
@pytest.mark.parametrize("d, block_m", [(128, 64), (128, 80), (64, 128), (256, 64)])
def test_ds_stmatrix_addresses_in_closed_form_are_cutes_for_every_thread(tmp_path, d, block_m):
    """The emitted closed-form dSᵀ stmatrix addresses and register pairs, run on the host beside CuTe's
    make_tiled_copy_C / partition_D / retile_S over the same traits: equal for all 256 consumer threads,
    every atom, each query tile (d 256: the warp groups split the query columns, `split_head`)."""
    src, name, head = _with_traits(d, block_m)
    body = src.split("uint32_t ds_addr[Traits::kWgQueries / 16];", 1)[1]
    emitted = body[: body.index("\n  }\n") + 4].replace("cast_smem_ptr_to_uint(smem_ds)", "0u")
    assert "ds_addr[i] = base + i * 2048;" in emitted and emitted.lstrip().startswith("{")
    host = _DS_HOST.replace("TRAITS", name).replace("EMITTED", emitted)
    _host_check(tmp_path / "ds", head + host)


def _host_check(exe: Path, source: str) -> None:
    """Build `source` (the generated traits and an emitted block inside a host program that counts its
    mismatches against CuTe) with nvcc against CUTLASS's headers, run it, expect none."""
    import subprocess

    import cutlass_library

    cu = exe.with_suffix(".cu")
    cu.write_text(source)
    nvcc = shutil.which("nvcc") or NVCC
    include = Path(cutlass_library.__file__).parent / "source" / "include"
    cmd = [nvcc, "-std=c++17", "-arch=sm_90a", f"-I{include}", "-o", str(exe), str(cu)]
    built = subprocess.run(cmd, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    ran = subprocess.run([str(exe)], capture_output=True, text=True)
    assert ran.returncode == 0 and "mismatches 0" in ran.stdout, ran.stdout


_DKV_HOST = r"""
#include <cstdio>
namespace tl {
ACC_ROWCOL
}  // namespace tl
int main() {
  using Traits = TRAITS;
  constexpr int kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim, kSteps = Traits::kWgCols / 16;
  int bad = 0;
  for (int warp = 0; warp < 8; ++warp) {
    uint32_t addr[32][kSteps];
    for (int lane = 0; lane < 32; ++lane) {
      const int tidx_e = warp * 32 + lane;
      uint32_t dkv_addr[kSteps];
      EMITTED
      for (int i = 0; i < kSteps; ++i) addr[lane][i] = dkv_addr[i];
    }
    for (int lane = 0; lane < 32; ++lane) {
      typename Traits::TiledMmadKV tiled_mma_dkv;
      Tensor acc = tiled_mma_dkv.get_thread_slice(warp * 32 + lane).partition_C(
          make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{}));
      Tensor rc = make_tensor(acc.data(), tl::acc_rowcol(acc.layout()));
      for (int i = 0; i < kSteps; ++i)
        for (int k = 0; k < 4; ++k)
          for (int e = 0; e < 2; ++e) {  // register k's halves: matrix k, its row lane / 4, at the
            // address lane 8k + lane / 4 gave, bytes 4 · (lane % 4) + 2e
            const int row = get<0>(rc(k % 2, 4 * i + 2 * (k / 2) + e));
            const int col = get<1>(rc(k % 2, 4 * i + 2 * (k / 2) + e));
            const long want = 2L * (row * kHeadDim + ((col / 8) ^ (row % 8)) * 8 + col % 8);
            bad += long(addr[8 * k + lane / 4][i]) + 4 * (lane % 4) + 2 * e != want;
          }
    }
  }
  printf("mismatches %d\n", bad);
  return bad != 0;
}
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None and not Path(NVCC).exists(), reason="needs nvcc")
@pytest.mark.parametrize("d", [128, 64, 256])
def test_dkv_stmatrix_addresses_put_every_accumulator_where_the_row_stores_read_it(tmp_path, d):
    """The epilogue's closed-form stmatrix addresses (`dkv_addr`) and register choice, run on the host
    beside CuTe's coordinates of the dK / dV accumulators: every element of all 256 consumer threads
    lands at its (row, col) of the tile whose 16-byte pieces the row stores read swizzled (piece c of row
    r at c ^ (r % 8)); d 256: each warp group half of the columns (`split_head`)."""
    src, name, head = _with_traits(d)
    rowcol = src[src.index("  template <class Layout>\n  CUTE_DEVICE constexpr auto acc_rowcol(") :]
    rowcol = rowcol[: rowcol.index("\n  }\n") + 4].replace("CUTE_DEVICE", "CUTE_HOST_DEVICE")
    body = src.split("uint32_t dkv_addr[Traits::kWgCols / 16];  // step i, relative to the tile", 1)[1]
    emitted = body[: body.index("\n    }\n") + 6]
    assert "dkv_addr[i] = row * (kHeadDim * 2)" in emitted and emitted.lstrip().startswith("{")
    # the stores pair register k with (row 8·(k % 2), piece 2i + k / 2), as the host check reads them
    assert "tl::pack2(rdK_rc(1, 4 * i + 2), rdK_rc(1, 4 * i + 3)));" in src
    host = _DKV_HOST.replace("ACC_ROWCOL", rowcol).replace("TRAITS", name)
    _host_check(tmp_path / "dkv", head + host.replace("EMITTED", emitted))


@pytest.mark.parametrize(
    ("tl", "d", "rows"),
    [
        (MHA, 64, 128),
        (ROOT / "examples" / "causal_mha_fwd.tl", 64, 128),
        (MHA, 128, 64),
        (VARIANTS / "softcap.tl", 64, 64),  # a score region beside the doubled accumulators: not measured
        (VARIANTS / "document_mask.tl", 64, 64),  # a mask that is no diagonal bound
    ],
)
def test_d64_takes_the_128_row_tile_where_it_was_measured(tl, d, rows):
    """`default_block_m`: FA3's 128-row query tile at d = 64 for the plain and causal programs (measured
    faster on the H200), 64 rows elsewhere; an explicit `block_m` still wins."""
    text = Path(tl).read_text()
    text = re.sub(r"Param d = \d+", f"Param d = {d}", text)
    src = _sm90(text).source
    assert f"static constexpr int kBlockM = {rows};" in src
    if rows == 128:
        assert "static constexpr int kBlockM = 64;" in _sm90(text, options={"block_m": 64}).source


# query tiles and head dims that reach each warp-group split of the sm_90 backward's GEMMs
TILES = [(128, 64), (128, 80), (64, 128), (64, 64), (256, 64)]


def _with_traits(d: int, block_m: int | None = None) -> tuple[str, str, str]:
    """(source, traits struct name, the source up to the traits' end) of mha_fwd's sm_90 backward at
    head dim `d` (d 256: the re-tiled forward) on `block_m`-row query tiles (None: the default)."""
    text = _d256() if d == 256 else MHA.read_text().replace("Param d = 128", f"Param d = {d}")
    src = _sm90(text, options={"block_m": block_m} if block_m else None).source
    traits = re.search(r"struct (\w+_bwd_traits) \{", src)
    assert traits
    return src, traits.group(1), src[: src.index("\n};\n", traits.start()) + 4]


_FRAGMENTS_HOST = r"""
#include <cstdio>
#include <type_traits>
namespace tl {
PARTITION_C
}  // namespace tl
int main() {
  using Traits = TRAITS;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  typename Traits::TiledMmaSdP tiled_mma_sdp;
  typename Traits::TiledMmadKV tiled_mma_dkv;
  typename Traits::TiledMmadQ tiled_mma_dq;
  using S = decltype(partition_fragment_C(tiled_mma_sdp, Shape<Int<kBlockN>, Int<kBlockM>>{}));
  using KV = decltype(partition_fragment_C(tiled_mma_dkv, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  using Q = decltype(partition_fragment_C(tiled_mma_dq, DQ_SHAPE{}));
  static_assert(std::is_same_v<S, decltype(make_tensor<float>(typename Traits::AccLayoutSdP{}))>);
  static_assert(std::is_same_v<KV, decltype(make_tensor<float>(typename Traits::AccLayoutdKV{}))>);
  static_assert(std::is_same_v<Q, decltype(make_tensor<float>(typename Traits::AccLayoutdQ{}))>);
  auto id_s = make_identity_tensor(Shape<Int<kBlockN>, Int<kBlockM>>{});
  using CoordS = decltype(tiled_mma_sdp.thrfrg_C(id_s.layout()));
  static_assert(std::is_same_v<CoordS, typename Traits::CoordLayoutS>);
  auto id_q = make_identity_tensor(DQ_SHAPE{});
  using CoordQ = decltype(tiled_mma_dq.thrfrg_C(id_q.layout()));
  static_assert(std::is_same_v<CoordQ, typename Traits::CoordLayoutdQ>);
  int bad = 0;
  for (int tidx = 0; tidx < Traits::kNThreads; ++tidx) {
    auto thr = tiled_mma_sdp.get_thread_slice(tidx);
    auto cute_s = thr.partition_C(id_s);
    auto ours = tl::partition_C(thr, id_s, typename Traits::CoordLayoutS{});
    static_assert(std::is_same_v<decltype(cute_s), decltype(ours)>);
    for (int i = 0; i < size(cute_s); ++i) bad += cute_s(i) != ours(i);
    auto thr_q = tiled_mma_dq.get_thread_slice(tidx);
    auto cute_q = thr_q.partition_C(id_q);
    auto ours_q = tl::partition_C(thr_q, id_q, typename Traits::CoordLayoutdQ{});
    static_assert(std::is_same_v<decltype(cute_q), decltype(ours_q)>);
    for (int i = 0; i < size(cute_q); ++i) bad += cute_q(i) != ours_q(i);
  }
  printf("mismatches %d\n", bad);
  return bad != 0;
}
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None and not Path(NVCC).exists(), reason="needs nvcc")
@pytest.mark.parametrize("d, block_m", TILES)
def test_the_accumulators_and_the_score_coordinates_are_cutes_partitions(tmp_path, d, block_m):
    """The traits' written-out accumulator layouts (Sᵀ and dPᵀ, dK and dV, dQ or dQᵀ) are the types of
    CuTe's partition_fragment_C, and Sᵀ's and dQ's identity partitions through `CoordLayoutS / dQ` and
    `tl::partition_C` have the type and every (row, col) of CuTe's partition_C, for all 256 consumer
    threads: each warp-group split (key rows, query columns at d 256, dQ's columns, rows or transposed)."""
    src, name, head = _with_traits(d, block_m)
    helper = src[src.index("  template <class ThrMma, class CTensor, class ThrFrg>") :]
    helper = helper[: helper.index("\n  }\n") + 4].replace("CUTE_DEVICE", "CUTE_HOST_DEVICE")
    code = re.sub(r"//.*", "", _main(src))
    assert "partition_fragment_C" not in code and ".partition_C(" not in code
    assert ".partition_C(" not in re.sub(r"//.*", "", src.split("_bwd_convert_dq(")[1])
    dq = "Shape<Int<kHeadDim>, Int<kBlockM>>" if block_m == 80 else "Shape<Int<kBlockM>, Int<kHeadDim>>"
    host = _FRAGMENTS_HOST.replace("PARTITION_C", helper).replace("TRAITS", name)
    _host_check(tmp_path / "fragments", head + host.replace("DQ_SHAPE", dq))


_DESC = re.compile(
    r"Tensor (\w+) = make_tensor\(GMMA::DescriptorIterator\{tl::gmma_desc<GMMA::LayoutType::\w+>\("
    r"(.+?), \d+, \d+\)\}, typename Traits::DescLayout\w+\{\}\);"
)
# each descriptor tensor: (the TiledMMA slice, A or B, the shared tensor CuTe partitions)
_CUTE_OPERANDS = {
    "tSrK": ("sdp", "A", "sK"),
    "tdPrV": ("sdp", "A", "sV"),
    "tSrQ": ("sdp", "B", "sQ"),
    "tdPrdO": ("sdp", "B", "sdO"),
    "tdVrdO": ("dkv", "B", "sdOt"),
    "tdKrQ": ("dkv", "B", "sQt"),
    "tdVrPt": ("dkv", "A", "sPt"),
    "tdKrdSt": ("dkv", "A", "sdSt"),
}

_DESC_HOST = r"""
#include <cstdio>
#include <type_traits>
namespace tl {
GMMA_DESC
}  // namespace tl
int main() {
  using Traits = TRAITS;
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  static Element smem[1 << 18];
  Element *smem_k = smem, *smem_v = smem + (1 << 16), *smem_ds_stage = smem + (2 << 16);
  Element *smem_q_stage = smem + (3 << 16), *smem_p = smem_ds_stage + (1 << 14);
  const int stage = 0;
  typename Traits::TiledMmaSdP tiled_mma_sdp;
  typename Traits::TiledMmadKV tiled_mma_dkv;
  typename Traits::TiledMmadQ tiled_mma_dq;
  Tensor sK = make_tensor(make_smem_ptr(smem_k), typename Traits::SmemLayoutK{});
  Tensor sV = make_tensor(make_smem_ptr(smem_v), typename Traits::SmemLayoutV{});
  Tensor sKt = make_tensor(make_smem_ptr(smem_k), typename Traits::SmemLayoutKt{});
  Tensor sdS = make_tensor(make_smem_ptr(smem_ds_stage), typename Traits::SmemLayoutdS{});
  Tensor sQ = make_tensor(make_smem_ptr(smem_q_stage), typename Traits::SmemLayoutQdO{});
  Element* smem_do = smem_q_stage + kBlockM * kHeadDim;
  Tensor sdO = make_tensor(make_smem_ptr(smem_do), typename Traits::SmemLayoutQdO{});
  Tensor sQt = make_tensor(make_smem_ptr(smem_q_stage), typename Traits::SmemLayoutQdOt{});
  Tensor sdOt = make_tensor(make_smem_ptr(smem_do), typename Traits::SmemLayoutQdOt{});
  SPLIT_VIEWS
  int bad = 0;
  auto same = [&](char const* what, int wg, auto const& cute_frag, auto const& cute_part,
                  auto const& ours, Element const* our_ptr) {
    using CuteLayout = remove_cvref_t<decltype(cute_frag.layout())>;
    bool ok = std::is_same_v<CuteLayout, remove_cvref_t<decltype(ours.layout())>>
        && raw_pointer_cast(cute_part.data()) == our_ptr
        && cute_frag.data().desc_.desc_ == ours.data().desc_.desc_;
    if (!ok) {
      printf("%s of warp group %d: CuTe ", what, wg); print(cute_frag.layout());
      printf(" %016llx +%ld, ours ", (unsigned long long)cute_frag.data().desc_.desc_,
             long(raw_pointer_cast(cute_part.data()) - smem));
      print(ours.layout());
      printf(" %016llx +%ld\n", (unsigned long long)ours.data().desc_.desc_, long(our_ptr - smem));
    }
    bad += !ok;
  };
  for (int wg = 0; wg < 2; ++wg) {
    auto wg_mma_sdp = tiled_mma_sdp.get_thread_slice(wg * 128);
    auto wg_mma_dkv = tiled_mma_dkv.get_thread_slice(wg * 128);
    auto wg_mma_dq = tiled_mma_dq.get_thread_slice(wg * 128);
    EMITTED
    CHECKS
  }
  printf("mismatches %d\n", bad);
  return bad != 0;
}
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None and not Path(NVCC).exists(), reason="needs nvcc")
@pytest.mark.parametrize("d, block_m", TILES)
def test_the_operands_gmma_descriptors_are_cutes_partitions(tmp_path, d, block_m):
    """Every shared-memory wgmma operand's descriptor tensor as the kernel builds it (`operands`,
    `tl::gmma_desc`, the warp group's part at its TiledMMA coordinate) against CuTe's
    partition_fragment_A / _B of the same tile for both consumer warp groups: the layout type, the
    partition's start pointer and the descriptor bits (the start address reads 0 on the host for both,
    so the pointer is compared apart); K-major and MN-major, 64- and 128-byte swizzles, each split."""
    src, name, head = _with_traits(d, block_m)
    start = "  template <GMMA::LayoutType kLayout>\n  CUTE_DEVICE GmmaDescriptor gmma_desc("
    helper = src[src.index(start) :]
    helper = helper[: helper.index("\n  }\n") + 4].replace("CUTE_DEVICE", "CUTE_HOST_DEVICE")
    code = re.sub(r"//.*", "", _main(src))
    assert "partition_fragment_" not in code and "SmemLayout" not in code
    found = {m.group(1): m for m in _DESC.finditer(_main(src))}
    swapped = block_m == 80
    operands = {
        **_CUTE_OPERANDS,
        "tdQrKt": ("dq", "A" if swapped else "B", "sKt"),
        "tdQrdS": ("dq", "B" if swapped else "A", "sdS"),
    }
    want = {"tSrK", "tdPrV", "tdQrKt", "tdQrdS", "tSrQ", "tdPrdO", "tdVrdO", "tdKrQ"}
    assert set(found) == want | ({"tdVrPt", "tdKrdSt"} if d == 256 else set()), sorted(found)
    emitted, checks = [], []
    for t, m in found.items():
        mma, ab, tensor = operands[t]
        emitted.append(m.group(0))
        frag = f"wg_mma_{mma}.partition_fragment_{ab}({tensor})"
        part = f"wg_mma_{mma}.partition_{ab}({tensor})"
        checks.append(f'same("{t}", wg, {frag}, {part}, {t}, {m.group(2)});')
    views = ""
    if d == 256:
        views = (
            "Tensor sdSt = make_tensor(make_smem_ptr(smem_ds_stage), typename Traits::SmemLayoutdSt{});\n"
            "  Tensor sPt = make_tensor(make_smem_ptr(smem_p), typename Traits::SmemLayoutdSt{});"
        )
    host = (
        _DESC_HOST.replace("GMMA_DESC", helper)
        .replace("TRAITS", name)
        .replace("SPLIT_VIEWS", views)
        .replace("EMITTED", "\n    ".join(emitted))
        .replace("CHECKS", "\n    ".join(checks))
    )
    _host_check(tmp_path / "desc", head + host)
