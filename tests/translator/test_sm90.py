"""The Hopper backend: structure of the generated sm_90a source (no compile), its launch spec, its limits
as TL501 diagnostics on the right TL line, and one NVRTC compile for sm_90a."""

from __future__ import annotations

import re

import pytest

from benchmarks.sm90_variants import VARIANTS, Variant, tl_text
from runner.abi import ATTENTION_PARAMS
from tl_language import analyze
from translator.backends.sm90 import NVRTC_ARCH, TMA_PARAMS, emit_sm90
from translator.backends.sm90.config import SMEM_LIMIT, hopper_config
from translator.errors import TranslateError
from translator.plan import KernelPlan, make_plan


def plan_of(v: Variant) -> KernelPlan:
    text = tl_text(v)
    return make_plan(analyze(text).model, text)


def emit(v: Variant, **kw: object) -> tuple[str, object, dict[int, int], KernelPlan]:
    plan = plan_of(v)
    source, launch, smap = emit_sm90(plan, tl_file=f"{v.name}.tl", overlap=v.overlap, **kw)  # type: ignore[arg-type]
    return source, launch, smap, plan


def test_variant_documents_are_clean_tl() -> None:
    for v in VARIANTS:
        errors = [d for d in analyze(tl_text(v)).diagnostics if d.severity.name == "ERROR"]
        assert errors == [], (v.name, errors)


def test_every_ab_variant_still_builds_its_patches_included() -> None:
    """The A/B catalogue stays runnable: each variant's regex patches must still match the generated source
    (benchmarks/sm90_device_check.py refuses a variant whose patch no longer applies)."""
    from benchmarks.sm90_device_check import translate

    for v in VARIANTS:
        source, _, _ = translate(v)
        assert "void __launch_bounds__(" in source, v.name


def test_hopper_instructions_and_warp_roles_are_emitted() -> None:
    source, _, _, _ = emit(Variant("h128"))
    for needle in (
        "SM90_TMA_LOAD_4D::copy(&tma_q",
        "SM90_TMA_LOAD_4D::copy(&tma_k",
        "SM90_TMA_LOAD_4D::copy(&tma_v",
        "SM90_TMA_STORE_4D::copy(&tma_o",
        "FullBarrier::arrive_and_expect_tx(&full_k[k_stage], Traits::kTxK)",
        "EmptyBarrier::wait(&empty_v[v_stage], v_phase ^ 1)",
        "cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegs>()",
        "cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegs>()",
        "_SS<GMMA::Major::K, GMMA::Major::K>{}",  # the wgmma atoms, named (sm90/gmma.py)
        "_RS<GMMA::Major::K, GMMA::Major::MN>{}",
        "tl::wgmma</*kZeroInit=*/true, /*kRS=*/false>(tiled_mma_qk, tSrQ",
        "tl::wgmma</*kZeroInit=*/false, /*kRS=*/true>(tiled_mma_pv, tOrP",
        "make_tensor(rP.data(), Traits::PLayoutA{})",  # P as the A operand: acc_to_A's layout, written out
        "SM90_U32x4_STSM_N",
        "cutlass::arch::fence_view_async_shared()",
        "warpgroup_wait<1>()",  # intra-warp-group overlap: Q·Kᵀ(n) waited for while P·V(n+1) drains
    ):
        assert needle in source, needle
    for sm80_only in ("SM80_CP_ASYNC", "cp_async_wait", "SM75_U32x4_LDSM_N", "SM80_16x8x16"):
        assert sm80_only not in source, sm80_only
    signature = source[source.index('extern "C"') : source.index("{", source.index('extern "C"'))]
    for name in TMA_PARAMS:
        assert f"const __grid_constant__ cute::TmaDescriptor {name}" in signature
    for name, ctype, _ in ATTENTION_PARAMS:
        assert f"{ctype} {name}," in signature
    assert "__launch_bounds__(384, 1)" in signature


def test_plain_loop_has_no_overlap() -> None:
    source, _, _, _ = emit(Variant("h128_plain", overlap=False))
    assert "warpgroup_wait<1>()" not in source and "acc_s_next" not in source
    assert source.count("warpgroup_wait<0>()") == 2


def test_every_step_is_tagged_with_its_tl_line() -> None:
    source, _, smap, plan = emit(Variant("h128_causal", mask="causal"))
    lines = source.splitlines()
    tags = {int(m.group(1)) for m in re.finditer(r"// TL:(\d+)  ", source)}
    kinds = (
        "load_q load_k load_v q_to_reg k_to_reg v_to_reg gemm_qk gemm_pv softmax reshape normalize store_o"
    )
    for kind in (*kinds.split(), "loop", "alloc_s", "alloc_acc_o"):
        step = plan.step(kind)
        assert step is not None and step.tl_line in tags, kind
    # the source map sends the wgmma calls back to the two GEMM statements
    qk = next(i + 1 for i, ln in enumerate(lines) if "tl::wgmma</*kZeroInit=*/true" in ln)
    pv = next(i + 1 for i, ln in enumerate(lines) if "tl::wgmma</*kZeroInit=*/false" in ln)
    assert smap[qk] == plan.line_of("gemm_qk") and smap[pv] == plan.line_of("gemm_pv")
    # bottom-right causal mask: each row keeps the keys up to its diagonal, one compare per score
    assert "const int diagonal = row + seqlen_k - seqlen_q;" in source
    assert "const int col_end = min(seqlen_k, diagonal + 1) - col_first;" in source
    assert "if (col >= col_end) scores(r, c) = -__int_as_float(0x7f800000);" in source


def test_line_directives_point_at_the_tl_file() -> None:
    plan = plan_of(Variant("h128"))
    source, _, _ = emit_sm90(plan, tl_file="dir/h128.tl", line_directives=True)
    assert f'#line {plan.line_of("gemm_pv")} "h128.tl"' in source


def test_launch_spec_extends_the_abi_with_tensor_maps() -> None:
    _, launch, _, plan = emit(Variant("h128"))
    assert launch.arch == NVRTC_ARCH == "sm_90a"
    assert launch.threads == 384 and launch.block_m == 128
    assert launch.params[: len(ATTENTION_PARAMS)] == tuple(p[0] for p in ATTENTION_PARAMS)
    assert launch.params[len(ATTENTION_PARAMS) :] == TMA_PARAMS
    assert launch.shared_bytes <= SMEM_LIMIT
    cfg = hopper_config(plan)
    assert (cfg.consumers, cfg.producer_regs, cfg.consumer_regs) == (2, 24, 240)
    # registers: what the producer frees is at least what the consumers take (168 each at launch)
    assert 128 * (168 - cfg.producer_regs) >= 128 * cfg.consumers * (cfg.consumer_regs - 168)


def test_head_dim_64_uses_three_consumer_warp_groups() -> None:
    source, launch, _, _ = emit(Variant("h64", block_m=192, d_qk=64, d_v=64))
    assert launch.threads == 512 and "kConsumers = 3;" in source


def test_mla_head_dims_load_and_store_in_their_own_boxes() -> None:
    source, launch, _, _ = emit(Variant("mla", d_qk=192, d_v=128, mask="causal"))
    assert "for (int c = 0; c < 3; ++c)" in source  # Q and K: three 64-column boxes
    assert "for (int c = 0; c < 2; ++c)" in source  # V and O: two
    assert launch.head_dim_qk == 192 and launch.head_dim_v == 128


@pytest.mark.parametrize(
    ("variant", "param", "message"),
    [
        (Variant("bad_bn", block_n=272), "BN", "from 16 to 256"),
        (Variant("bad_d", d_qk=96, d_v=96, warps=4), "d", "head dims 64, 128, 192 or 256"),
        (Variant("bad_smem", block_n=256, stages=2, d_qk=256, d_v=256, warps=8), "BN", "shared memory"),
        (Variant("bad_bm", block_m=96, block_n=64, warps=2), "BM", "multiple of 64 rows"),
    ],
)
def test_limits_are_tl501_on_the_param_line(variant: Variant, param: str, message: str) -> None:
    text = tl_text(variant)
    plan = make_plan(analyze(text).model, text)
    with pytest.raises(TranslateError) as info:
        emit_sm90(plan)
    diag = info.value.diagnostics[0]
    assert diag.code == "TL501" and message in diag.message
    assert text.splitlines()[diag.range.start.line].startswith(f"Param {param} ")


@pytest.mark.nvrtc
def test_compiles_for_sm90a_through_nvrtc(tmp_path, monkeypatch) -> None:
    pytest.importorskip("cuda.bindings")
    pytest.importorskip("cutlass_library")
    from runner.compile import compile_source

    monkeypatch.setenv("TL_CACHE_DIR", str(tmp_path / "cache"))
    source, launch, _, _ = emit(Variant("h128_causal", mask="causal"))
    compiled = compile_source(source, arch=launch.arch, name="h128_causal.cu")
    assert compiled.kind == "cubin" and compiled.target == "sm_90a"
    assert compiled.code[:4] == b"\x7fELF"
    assert "C7508" not in compiled.log  # setmaxnreg was not ignored


def test_persistent_grid_walks_the_tiles_with_the_ring_running_on() -> None:
    source, launch, _, plan = emit(Variant("h128_pers", block_n=176, pingpong=True, persistent=True))
    assert launch.persistent  # type: ignore[attr-defined]
    assert "for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x, ++tile_iter)" in source
    assert source.count("for (int tile = blockIdx.x;") == 2  # the producer's and the consumers'
    # The K/V ring's stage and phase are declared once per role, before the tile loop.
    producer, consumer = source.split("warpgroup_reg_alloc", 1)
    assert producer.index("int k_stage = 0, v_stage = 0;") < producer.index("for (int tile")
    assert consumer.index("int stage = 0;") < consumer.index("for (int tile")
    assert "FullBarrier::wait(bar_q, tile_iter & 1);" in source
    assert "EmptyBarrier::wait(empty_q, (tile_iter & 1) ^ 1);" in source
    # 128 × 176 leaves no room for O's own buffer: O goes through Q's, and Q is free once the store read it.
    assert hopper_config(plan, persistent=True, pingpong=True).reuse_q_for_o
    assert "EmptyBarrier::init(empty_q, 1);" in source
    store_wait = source.index("tma_store_wait<0>();  // the store has read O out of Q's buffer")
    assert source.index("EmptyBarrier::arrive(empty_q);", store_wait) > store_wait


def test_persistent_with_room_gives_o_its_own_buffer_and_frees_q_after_the_last_qk() -> None:
    v = Variant("h128_pers128", block_n=128, pingpong=True, persistent=True)
    source, launch, _, plan = emit(v)
    cfg = hopper_config(plan, persistent=True, pingpong=True)
    assert not cfg.reuse_q_for_o and cfg.smem()["o"] == 128 * 128 * 2
    assert launch.shared_bytes == cfg.smem()["total"] <= SMEM_LIMIT  # type: ignore[attr-defined]
    assert "EmptyBarrier::init(empty_q, kConsumerThreads);" in source
    assert "if (n_block == n_block_min) EmptyBarrier::arrive(empty_q);" in source
    assert "if (n_block_max <= n_block_min) EmptyBarrier::arrive(empty_q);" in source  # no key block
    # The previous tile's TMA store must have read sO before stmatrix overwrites it.
    wait = source.index("if (ctid == 0) tma_store_wait<0>();  // the last tile's O store has read sO")
    assert wait < source.index("SM90_U32x4_STSM_N")
    # The one-tile kernel of the same tiles keeps O in Q's buffer and has no tile loop.
    one, _, _, _ = emit(Variant("h128_one", block_n=128, pingpong=True))
    assert "num_tiles" not in one and "empty_q" not in one.split("EmptyBarrier::init", 1)[1].split("\n")[0]


def test_persistent_is_a_tl_switch_with_a_grid_of_one_block_per_sm() -> None:
    from runner.launch import LaunchError, grid

    text = tl_text(Variant("h128_pers", persistent=True))
    plan = make_plan(analyze(text).model, text)
    assert plan.persistent
    _, launch, _ = emit_sm90(plan)
    assert grid(launch, batch=4, seqlen_q=4096, heads=16, sm_count=132) == (132, 1, 1)
    assert grid(launch, batch=1, seqlen_q=300, heads=2, sm_count=132) == (6, 1, 1)  # fewer tiles than SMs
    with pytest.raises(LaunchError, match="SM count"):
        grid(launch, batch=1, seqlen_q=300, heads=2)
    bad = text.replace("Param persistent = 1", "Param persistent = 2")
    assert "TL307" in {d.code for d in analyze(bad).diagnostics}


@pytest.mark.nvrtc
def test_default_hd128_kernel_compiles_and_its_softmax_overlaps_pv_in_the_sass(tmp_path, monkeypatch) -> None:
    """The default hd128 kernel (128 × 160, one block per tile) compiles, and in its SASS the loop's softmax
    starts while P·V runs: every score's FFMA and the first columns' exp2s come between the wait for Q·Kᵀ
    and the wait for P·V (FA4's order). ptxas hoists a wgmma wait to the top of its basic block, which
    without `tl::block_boundary` put the whole softmax after P·V had drained."""
    pytest.importorskip("cuda.bindings")
    pytest.importorskip("cutlass_library")
    from pipeline.variants import KernelConfig
    from runner.compile import compile_source
    from runner.sass import SassError, disassemble

    monkeypatch.setenv("TL_CACHE_DIR", str(tmp_path / "cache"))
    config = KernelConfig(128, "bf16", "none", target="sm_90")
    built = config.translate()
    assert not built.spec.persistent and built.spec.block_n == 160
    compiled = compile_source(built.source, arch=built.spec.arch, name=f"{config.name}.cu")
    assert compiled.kind == "cubin" and compiled.code[:4] == b"\x7fELF"
    try:
        sass = disassemble(compiled.code)
    except SassError as exc:
        pytest.skip(str(exc))
    assert "HGMMA" in sass and "UTMALDG" in sass and "UTMASTG" in sass
    lines = sass.splitlines()
    qk_done = next(i for i, ln in enumerate(lines) if "WARPGROUP.DEPBAR.LE gsb0, 0x1" in ln)
    pv_done = next(
        i for i, ln in enumerate(lines[qk_done:], qk_done) if "WARPGROUP.DEPBAR.LE gsb0, 0x0" in ln
    )
    exps = sum("MUFU.EX2" in ln for ln in lines[qk_done:pv_done])
    ffmas = sum("FFMA" in ln for ln in lines[qk_done:pv_done])
    # a thread holds 2 rows × BN/4 columns of S: 6 columns' exps before the wait (and the rows' corrections)
    assert exps >= 2 * 6, f"only {exps} MUFU.EX2 while P·V runs"
    assert ffmas >= built.spec.block_n // 2, f"only {ffmas} FFMA while P·V runs"
    # ... and the rest after it, each pair converted into P as it leaves MUFU (no burst of conversions)
    turn = next(i for i, ln in enumerate(lines[pv_done:], pv_done) if "BAR.SYNC" in ln or "BRA" in ln)
    after = [ln for ln in lines[pv_done:turn] if "MUFU.EX2" in ln or "F2FP" in ln]
    exps_after = sum("MUFU.EX2" in ln for ln in after)
    assert exps + exps_after == built.spec.block_n // 2 + 2, (exps, exps_after)  # + each row's correction
    assert exps_after >= built.spec.block_n // 2 - 16, f"only {exps_after} exps after the wait"
    assert "MUFU.EX2" in after[-3] or "MUFU.EX2" in after[-2], "P's conversions trail the exps"
    # No mask in the pipelined loop: ptxas had turned the last-block check into a compare and select per
    # score (FSEL), 23% of the loop's instructions. Two FSELs stay: the -inf guard of each row's max.
    fsel = sum("FSEL" in ln for ln in lines[qk_done:pv_done])
    assert fsel <= 2, f"{fsel} FSEL in the unmasked loop"
    # The loop's 18 wgmmas (Q·Kᵀ and P·V, issued from the ping-pong barrier to the Q·Kᵀ wait) step their
    # descriptors with one 64-bit add each (`tl::Desc64Iterator`); CuTe's own iterator cost a 32-bit add
    # and two moves per wgmma there (no UIADD3.64 and 27 UMOV in that stretch, NVRTC 13.0).
    issue = max(i for i, ln in enumerate(lines[:qk_done]) if "BAR.SYNC" in ln or "WARPGROUP.DEPBAR" in ln)
    section = lines[issue:qk_done]
    steps = sum("UIADD3.64" in ln for ln in section)
    moves = sum(" UMOV " in ln for ln in section)
    assert sum("HGMMA" in ln for ln in section) == 18 and steps >= 16 and moves <= 4, (steps, moves)


def test_only_blocks_that_cross_the_mask_pay_for_it() -> None:
    """The pipelined loop is one lambda run by a masked and an unmasked loop: no mask → no masked loop (the
    seqlen_k tail is the first block's); causal → the diagonal blocks masked, then the rest without;
    window → every block masked."""
    steps = {}
    for mask in ("none", "causal", "window(100, 30)"):
        source, _, _, _ = emit(Variant(f"h128_{mask[:6]}", mask=mask, pingpong=True))
        steps[mask[:6]] = [ln.strip() for ln in source.splitlines() if "overlap_step(n_block, " in ln]
        assert source.count("auto overlap_step = [&](const int n_block, auto masked)") == 1
    assert steps["none"] == [
        "for (; n_block >= n_block_min; --n_block) overlap_step(n_block, cute::false_type{});"
    ]
    assert steps["causal"] == [
        "for (; n_block >= n_block_unmasked; --n_block) overlap_step(n_block, cute::true_type{});",
        "for (; n_block >= n_block_min; --n_block) overlap_step(n_block, cute::false_type{});",
    ]
    assert steps["window"] == [
        "for (; n_block >= n_block_min; --n_block) overlap_step(n_block, cute::true_type{});"
    ]


def test_pingpong_passes_the_turn_around_three_consumer_groups() -> None:
    source, launch, _, plan = emit(Variant("h64_pp3", block_m=192, d_qk=64, d_v=64, pingpong=True))
    assert plan.consumers == 3 and launch.threads == 512
    assert "const int next_wg = consumer_wg + 1 == Traits::kConsumers ? 0 : consumer_wg + 1;" in source
    assert "auto your_turn = [&]() { tl::consumer_arrive(3 + next_wg, 256); };" in source
    # the last group starts the ring and skips the last hand-over, so every barrier's arrivals match its waits
    assert "if (consumer_wg == Traits::kConsumers - 1 && n_block_max > n_block_min) your_turn();" in source
    assert "if (consumer_wg != Traits::kConsumers - 1) your_turn();" in source


def test_the_producer_loads_in_the_consumers_order() -> None:
    """With the pipelined loop the consumers read V(n + 1) after K(n): the producer loads K(n) then V(n + 1),
    so the next K never waits behind the V buffer that P·V frees last. The plain loop reads K(n), V(n)."""
    source, _, _, _ = emit(Variant("h128_order", pingpong=True))
    producer = source.split("warpgroup_reg_alloc", 1)[0]
    body = producer[producer.index("if (n_block_max > n_block_min) {") :]
    calls = [ln.strip() for ln in body.splitlines() if ln.strip().startswith(("load_", "for ("))][:6]
    assert calls == [
        "load_k(n_block_max - 1);",
        "load_q();",
        "for (int n_block = n_block_max - 2; n_block >= n_block_min; --n_block) {",
        "load_k(n_block);",
        "load_v(n_block + 1);",
        "load_v(n_block_min);",
    ]
    plain, _, _, _ = emit(Variant("h128_plain", overlap=False))
    loop = plain.split("warpgroup_reg_alloc", 1)[0].split("for (int n_block = n_block_max - 1;", 1)[1]
    assert loop.index("load_k(n_block);") < loop.index("load_q();") < loop.index("load_v(n_block);")
