"""The sm_90 backward (`translator.backends.sm90_bwd`): chosen by default for a Target sm_90 program it
covers (the sm_80 skeleton otherwise, and on request), the wgmma atoms it names, the five GEMMs of FA3's
dataflow, dQ's atomics in the order the shared convert kernel reads, the masks' block classes, the
transposed score rows, and one NVRTC compile (marked) of the plain kernel and ALiBi with learnable slopes
for sm_90a."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.backward import BackwardBuildError, translate_backward

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = ROOT / "examples" / "variants"
MHA = ROOT / "examples" / "mha_fwd.tl"
LEARN = {"alibi": ("slopes",), "relative_bias": ("rel",), "learnable_sink": ("sinks",)}


def _sm90(tl: Path | str, **kw):
    return translate_backward(tl, arch="sm_90", skeleton="sm90", **kw)


def _main(source: str) -> str:
    return source.split("_bwd_dq_dk_dv(")[1].split("_bwd_convert_dq(")[0]


def _signature(source: str, kernel: str) -> list[str]:
    m = re.search(rf"void __launch_bounds__\(\d+\) {kernel}\((.*?)\) {{", source, re.S)
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
    text = (
        MHA.read_text()
        .replace("Param d = 128", "Param d = 256")
        .replace("Param stages = 2", "Param stages = 1")
    )
    text = text.replace("Param BM = 128", "Param BM = 64")
    b = translate_backward(text, arch="sm_90")
    assert b.spec.head_dim == 256 and "GMMA" not in b.source and b.spec.arch == "sm_90"


def test_the_sm90_skeleton_targets_sm_90a_with_the_same_launch_shape():
    b = _sm90(MHA)
    s = b.spec
    assert (s.arch, s.block_m, s.block_n, s.threads, s.preprocess_rows) == ("sm_90a", 64, 128, 256, 32)
    # K, V (128 × 128), dS (64 × 128), two stages of Q and dO (64 × 128), bf16; LSE and D; the 1 KB rounding
    assert s.shared_bytes == 2 * (2 * 128 * 128 + 64 * 128 + 4 * 64 * 128) + 2 * 2 * 64 * 4 + 1024
    assert "verified on the H200" in b.source


@pytest.mark.parametrize("name", sorted(p.stem for p in VARIANTS.glob("*.tl")))
def test_every_catalogue_variant_keeps_the_backward_abi(name):
    learn = LEARN.get(name, ())
    sm80 = translate_backward(VARIANTS / f"{name}.tl", arch="sm_90", learnable=learn)
    sm90 = _sm90(VARIANTS / f"{name}.tl", learnable=learn)
    assert sm90.spec.params == sm80.spec.params and sm90.spec.row_sums == sm80.spec.row_sums
    for part in ("dq_dk_dv", "dot_do_o", "convert_dq"):
        kernel = sm90.spec.kernel(part)
        assert _signature(sm90.source, kernel) == _signature(sm80.source, kernel)


@pytest.mark.parametrize(
    ("d", "sdp", "dkv", "dq"),
    [
        (128, "64x64x16", "64x128x16", "64x64x16"),
        (64, "64x64x16", "64x64x16", "64x32x16"),
    ],
)
def test_the_wgmma_atoms_follow_the_tiles(d, sdp, dkv, dq):
    text = MHA.read_text().replace("Param d = 128", f"Param d = {d}")
    src = _sm90(text).source
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


def test_the_five_gemms_in_fa3_order_with_dq_atomics_under_dk():
    main = _main(_sm90(MHA).source)
    gemms = [
        "tl::wgmma<true, false>(tiled_mma_sdp, tSrK, tSrQ, acc_s);",  # Sᵀ = K·Qᵀ
        "tl::wgmma<true, false>(tiled_mma_sdp, tdPrV, tdPrdO, acc_dp);",  # dPᵀ = V·dOᵀ
        "tl::wgmma<false, true>(tiled_mma_dkv, tdVrP, tdVrdO, acc_dv);",  # dV += Pᵀ·dO (RS)
        "tl::wgmma<true, false>(tiled_mma_dq, tdQrdS, tdQrKt, acc_dq);",  # dQ = dS·K
        "tl::wgmma<false, true>(tiled_mma_dkv, tdKrdS, tdKrQ, acc_dk);",  # dK += dSᵀ·Q (RS)
        "warpgroup_wait<1>();",
        "atomicAdd(dq_tile + i * Traits::kNThreads, make_float4(acc_dq(4 * i), acc_dq(4 * i + 1),",
        "warpgroup_wait<0>();",
    ]
    at = [main.index(gemms[0])]
    for g in gemms[1:]:
        at.append(main.index(g, at[-1]))  # each after the one before it
    assert "Tensor tdVrP = make_tensor(rP.data(), tl::acc_to_A(rP.layout()));" in main
    assert "Tensor tdKrdS = make_tensor(rdS.data(), tl::acc_to_A(rdS.layout()));" in main
    # dSᵀ reaches shared memory through the generic proxy: fenced before the barrier dQ's wgmma waits on
    store = main.index("cute::copy(rdS, tdSsdS);")
    assert main.index("tl::fence_async_shared();", store) < main.index("__syncthreads();", store) < at[3]


def test_dq_accum_is_added_as_float4_and_converted_in_that_order():
    sm90, sm80 = _sm90(MHA).source, translate_backward(MHA, arch="sm_90").source
    # thread t's fragment element i at (i / 4 · kNThreads + t) · 4 + i % 4, on both sides
    main = _main(sm90)
    assert (
        "float4* dq_tile = reinterpret_cast<float4*>(dq_head + m_block * (kBlockM * kHeadDim)) + tidx;"
        in main
    )
    assert "for (int i = 0; i < size(acc_dq) / 4; ++i) {" in main
    conv = sm90.split("_bwd_convert_dq(")[1]
    assert "(kBlockM * kHeadDim) + threadIdx.x * 4;" in conv
    assert "src[s * slice + (i / 4) * (4 * Traits::kNThreads) + i % 4]" in conv
    # over Traits::TiledMmadQ's fragment order: here the wgmma one
    assert "tiled_mma_dq.get_thread_slice(threadIdx.x).partition_C(" in conv
    assert "using TiledMmadQ = decltype(make_tiled_mma(SM90::GMMA::" in sm90
    # the D kernel is the default's
    assert sm90.split("_bwd_dot_do_o(")[1].split("}\n")[0] == sm80.split("_bwd_dot_do_o(")[1].split("}\n")[0]


def test_masks_classify_query_blocks_and_score_rows_read_the_transposed_accumulator():
    main = _main(_sm90(VARIANTS / "sliding_window.tl").source)
    assert "auto block_class = [&](int m_block) -> int" in main
    assert "while (m_block_min < m_block_max && block_class(m_block_min) == 0) ++m_block_min;" in main
    fast, slow = main.split("if (!masked && (m_block + 1) * kBlockM <= seqlen_q) {")[1].split("else {")[:2]
    assert "const bool keep = true;" in fast and "const bool keep = row_in && (!masked ||" in slow
    # Sᵀ holds key rows: the score rows are its columns, a query is get<1> of (key, query)
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
    ],
)
def test_the_skeleton_choice_is_checked(kw, why):
    with pytest.raises(BackwardBuildError, match=why):
        translate_backward(MHA, **kw)


def test_head_dims_beyond_the_skeleton_are_a_clear_error():
    text = (
        MHA.read_text()
        .replace("Param d = 128", "Param d = 256")
        .replace("Param stages = 2", "Param stages = 1")
    )
    text = text.replace("Param BM = 128", "Param BM = 64")
    with pytest.raises(BackwardBuildError, match="head dim 256: this skeleton covers 64 and 128"):
        _sm90(text)


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


@pytest.mark.nvrtc
@pytest.mark.slow
def test_the_plain_and_alibi_backwards_compile_for_sm_90a():
    from runner.compile import CompileError, CompileJob, compile_many

    builds = [_sm90(MHA), _sm90(VARIANTS / "alibi.tl", learnable=("slopes",))]
    jobs = [CompileJob(source=b.source, arch=b.spec.arch, name=f"{b.spec.name}.bwd.cu") for b in builds]
    results = compile_many(jobs)
    failed = [str(r)[:800] for r in results if isinstance(r, CompileError)]
    assert not failed, "\n".join(failed)
    assert all(r.kind == "cubin" and r.target == "sm_90a" for r in results)
