"""The backward skeleton (`translator.backends.sm80_bwd`) rendered from catalogue programs: the three
kernels with the ABI's parameters in order, the score region's derivative in the dS line, learnable
gradients, and clear errors for what it cannot derive. One NVRTC compile (marked) through `tl build
--backward`."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from pipeline.backward import BackwardBuildError, translate_backward
from runner.abi import (
    BACKWARD_CONVERT_PARAMS,
    BACKWARD_PARAMS,
    BACKWARD_PREPROCESS_PARAMS,
    BACKWARD_PREPROCESS_ZERO_PARAMS,
    BACKWARD_TMA_PARAMS,
    BackwardSpec,
)

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = ROOT / "examples" / "variants"


def _signature(source: str, kernel: str) -> list[str]:
    m = re.search(rf"void __launch_bounds__\([\d, ]+\) {kernel}\((.*?)\) {{", source, re.S)
    assert m, f"no kernel {kernel}"
    return [p.strip().split()[-1] for p in m.group(1).split(",")]


@pytest.mark.parametrize("name", sorted(p.stem for p in VARIANTS.glob("*.tl")))
def test_every_catalogue_variant_has_a_backward(name):
    learn = {"alibi": ("slopes",), "relative_bias": ("rel",), "learnable_sink": ("sinks",)}.get(name, ())
    b = translate_backward(VARIANTS / f"{name}.tl", learnable=learn)
    spec = BackwardSpec.from_json(b.spec.to_json())
    assert spec == b.spec
    assert _signature(b.source, spec.kernel("dq_dk_dv")) == list(spec.params)
    tma = len(BACKWARD_TMA_PARAMS) if spec.uses_tma else 0  # dq_dk_dv's alone (the sm_90 producer's)
    extra = list(spec.params[len(BACKWARD_PARAMS) : len(spec.params) - tma])
    zero = [p[0] for p in BACKWARD_PREPROCESS_ZERO_PARAMS] if spec.dq_zeroed else []
    pre = [p[0] for p in BACKWARD_PREPROCESS_PARAMS] + extra + zero
    assert _signature(b.source, spec.kernel("dot_do_o")) == pre
    conv = [p[0] for p in BACKWARD_CONVERT_PARAMS] + (["softmax_scale"] if spec.dq_scale else [])
    assert _signature(b.source, spec.kernel("convert_dq")) == conv
    for n in learn:
        assert f"{n}_grad" in spec.params


def test_the_softcap_backward_multiplies_by_one_minus_tanh_squared():
    b = translate_backward(VARIANTS / "softcap.tl")
    # the derivative reads the forward's tanh node: (1 - t·t) · (1/cap) · cap · scale, in some order
    dx = next(line for line in b.source.splitlines() if "const float dx_ds" in line)
    tanh = next(line for line in b.source.splitlines() if "tl::tanh_" in line and "const float" in line)
    t = tanh.split("const float ")[1].split(" =")[0]
    assert f"({t} * {t})" in b.source
    assert "dx_ds" in dx


def test_the_plain_backward_scales_by_the_softmax_scale_only():
    b = translate_backward(ROOT / "examples" / "mha_fwd.tl")
    # dX/ds is the scale alone: dS = dX, and dK and dQ take the scale once (scale_folded_grad)
    assert "dx_ds" not in b.source and "acc_dk(i) *= softmax_scale;" in b.source
    assert b.spec.program is None and b.spec.learnable == ()


def test_a_sink_gradient_is_written_by_the_preprocessing_kernel():
    b = translate_backward(VARIANTS / "learnable_sink.tl", learnable=("sinks",))
    pre = b.source.split("_bwd_dot_do_o(")[1].split("_bwd_dq_dk_dv(")[0]
    assert "atomicAdd(&sinks_grad[" in pre and "p_sink" in pre


def test_with_learnable_in_the_tl_marks_the_tensor():
    text = (
        (VARIANTS / "alibi.tl")
        .read_text()
        .replace("Allocate slopes in global (heads)", "Allocate slopes in global (heads) with learnable")
    )
    b = translate_backward(text)
    assert b.spec.learnable == ("slopes",)
    assert "atomicAdd(&slopes_grad[" in b.source


@pytest.mark.parametrize(
    ("name", "edit", "why"),
    [
        ("alibi", ("Param d = 128", "Param d = 96"), "multiple of 64"),
        ("document_mask", ("Dtype bf16", "Dtype bf16"), "not a float32 side tensor"),
    ],
)
def test_what_the_backward_cannot_derive_is_a_clear_error(name, edit, why):
    text = (VARIANTS / f"{name}.tl").read_text().replace(*edit)
    learn = ("doc",) if "float32" in why else ()
    with pytest.raises(BackwardBuildError, match=why):
        translate_backward(text, learnable=learn)


def test_unequal_head_dims_are_refused():
    with pytest.raises(BackwardBuildError, match="must be equal"):
        translate_backward(ROOT / "examples" / "mla_fwd.tl")


@pytest.mark.nvrtc
@pytest.mark.slow
def test_tl_build_backward_writes_and_compiles(tmp_path):
    from pipeline.cli import main

    tl = tmp_path / "mha_fwd.tl"
    shutil.copy(ROOT / "examples" / "mha_fwd.tl", tl)
    tl.write_text(tl.read_text().replace("Param d = 128", "Param d = 64"))
    assert main(["build", "--backward", str(tl)]) == 0
    cu, js = tmp_path / "mha_fwd.bwd.cu", tmp_path / "mha_fwd.bwd.launch.json"
    assert cu.exists() and js.exists()
    spec = BackwardSpec.from_json(js.read_text())
    assert spec.head_dim == 64 and spec.kernel("dq_dk_dv") in cu.read_text()


def test_a_deterministic_backward_adds_dq_into_its_own_slice_and_sums_the_slices_in_order():
    det = translate_backward(ROOT / "examples" / "mha_fwd.tl", deterministic=True)
    assert det.spec.deterministic and BackwardSpec.from_json(det.spec.to_json()) == det.spec
    main = det.source.split("_bwd_dq_dk_dv(")[1].split("_bwd_convert_dq(")[0]
    assert "float* dq_slice = dq_accum + blockIdx.x * (" in main
    assert "n_block += gridDim.x" in main and "__syncthreads();" in main.split("n_block += gridDim.x")[1]
    assert "for (int s = 0; s < dq_splits; ++s)" in det.source.split("_bwd_convert_dq(")[1]
    plain = translate_backward(ROOT / "examples" / "mha_fwd.tl")
    assert not plain.spec.deterministic and "float* dq_slice = dq_accum;" in plain.source


def test_dq_is_added_in_the_dq_mma_fragment_order_and_read_back_in_it():
    b = translate_backward(ROOT / "examples" / "mha_fwd.tl")
    main = b.source.split("_bwd_dq_dk_dv(")[1].split("_bwd_convert_dq(")[0]
    assert "atomicAdd(dq_tile + i * Traits::kNThreads, acc_dq(i));" in main
    conv = b.source.split("_bwd_convert_dq(")[1]
    assert "tiled_mma_dq.get_thread_slice(threadIdx.x).partition_C(" in conv
    assert "constexpr int kGroup = Traits::kNThreads / 1;" in conv
    assert "src[s * slice + (group * kVectors + j) * kGroup + rank]" in conv


def test_blocks_with_every_score_kept_take_the_loop_without_mask_selects():
    b = translate_backward(VARIANTS / "sliding_window.tl")
    main = b.source.split("_bwd_dq_dk_dv(")[1].split("_bwd_convert_dq(")[0]
    fast, slow = main.split("if (!masked && (m_block + 1) * kBlockM <= seqlen_q) {")[1].split("else {")[:2]
    assert "const bool keep = true;" in fast and "const bool row_in = true;" in fast
    assert "const bool row_in = row < seqlen_q;" in slow
    # the window's bounds on kv_idx − q_idx as limits on the score's offsets (test_column_bounds.py)
    assert "const bool keep = tl_qo < tl_q_end && tl_ko < tl_k_end && tl_ko - tl_qo >= tl_kq_lo" in slow
    relative = translate_backward(VARIANTS / "document_mask.tl").source
    assert "const bool keep = row_in && (!masked ||" in relative  # a mask that is no such bound: per score


@pytest.mark.parametrize("skeleton", ["sm80", "sm90"])
def test_a_launch_time_block_mask_gets_its_own_classes_at_the_backward_tiles(skeleton):
    arch = "sm_90" if skeleton == "sm90" else "sm_80"
    b = translate_backward(VARIANTS / "document_mask.tl", arch=arch, skeleton=skeleton)
    kernel = b.spec.kernel("block_mask")
    assert _signature(b.source, kernel)[-1] == "block_mask"
    body = b.source.split(f"{kernel}(", 1)[1]
    assert f"constexpr int kBlockM = {b.spec.block_m};" in body
    assert f"constexpr int kBlockN = {b.spec.block_n};" in body
    # dq_dk_dv reads the classes (empty blocks skipped, whole ones unmasked), indexed as the kernel writes
    params = _signature(b.source, b.spec.kernel("dq_dk_dv"))
    assert params[-1 - len(BACKWARD_TMA_PARAMS) * b.spec.uses_tma] == "block_mask_ptr"
    main = b.source.split(f"{b.spec.kernel('dq_dk_dv')}(", 1)[1].split(f"{kernel}(", 1)[0]
    index = "((static_cast<long long>(bidb) * 1 + 0) * m_blocks + m_block) * n_blocks + n_block"
    assert f"return block_mask_ptr[{index}];" in main
    assert "return 1;" not in main.split("auto block_class", 1)[1].split("};", 1)[0]


@pytest.mark.parametrize("skeleton", ["sm80", "sm90"])
def test_the_softmax_scale_leaves_ds_and_scales_dk_and_dq_once(skeleton):
    """dX/ds = softmax_scale · rest: dS is dX · rest (no multiply a score where rest is 1), dK takes the
    scale before its store and the convert kernel dQ's, from its extra parameter."""
    b = translate_backward(ROOT / "examples" / "causal_mha_fwd.tl", arch="sm_90", skeleton=skeleton)
    main = b.source.split("_bwd_dq_dk_dv(")[1].split("_bwd_convert_dq(")[0]
    conv = b.source.split("_bwd_convert_dq(")[1]
    assert b.spec.dq_scale
    assert "dscores(r, c) = keep ? dx : 0.f;" in main and "dx_ds" not in main
    assert "for (int i = 0; i < size(acc_dk); ++i) acc_dk(i) *= softmax_scale;" in main
    assert re.search(r"static_cast<Element>\(acc(\.x)? \* softmax_scale\);", conv)  # scalar or float4 reads
    # softcap: the scale is one factor of its derivative, the rest stays per score
    soft = translate_backward(VARIANTS / "softcap.tl", arch="sm_90", skeleton=skeleton)
    main = soft.source.split("_bwd_dq_dk_dv(")[1].split("_bwd_convert_dq(")[0]
    assert soft.spec.dq_scale and "dscores(r, c) = keep ? dx * dx_ds : 0.f;" in main
    dx_ds = next(ln for ln in main.splitlines() if "const float dx_ds = " in ln)
    assert "softmax_scale" not in dx_ds.split("//")[0].replace("softmax_scale * (1.0f / cap)", "")
    # relu attention: its derivative is a where(), not a product with the scale: dS keeps it
    relu = translate_backward(VARIANTS / "relu_attention.tl", arch="sm_90", skeleton=skeleton)
    assert not relu.spec.dq_scale and "acc * softmax_scale" not in relu.source


@pytest.mark.parametrize("skeleton", ["sm80", "sm90"])
def test_the_d_kernel_clears_dq_accum_so_it_needs_no_fill(skeleton):
    """dot_do_o clears its block's rows of dq_accum in every slice (the spec's `dq_zeroed`: the runner then
    allocates dq_accum without zeros and launches the D kernel over its whole query tiles)."""
    mha = ROOT / "examples" / "mha_fwd.tl"
    b = translate_backward(mha, arch="sm_90", skeleton=skeleton, deterministic=True)
    pre = b.source.split("_bwd_dot_do_o(")[1].split("_bwd_dq_dk_dv(")[0]
    assert b.spec.dq_zeroed and b.spec.deterministic
    assert "for (int s = 0; s < dq_slices; ++s) {" in pre
    assert "* heads + bidh) * dq_rows * kHeadDim) + blockIdx.x * kRows * (kHeadDim / 4);" in pre
    assert "const int n = min(kRows, dq_rows - static_cast<int>(blockIdx.x) * kRows) * (kHeadDim / 4);" in pre
    # a build of an earlier translator (its spec lacks the field) gets a zeroed dq_accum from the runner
    old = {k: v for k, v in json.loads(b.spec.to_json()).items() if k != "dq_zeroed"}
    assert not BackwardSpec.from_json(json.dumps(old)).dq_zeroed


def test_d64_takes_fa2s_128_row_tile_where_its_shared_memory_fits():
    """At head dim 64 the sm_80 skeleton runs FA2's 128 × 128 tile (dQ on 4 × 2 warps) where a block may
    take its 162 KB of shared memory (sm_80's opt-in 163 KB, sm_90's 227 KB), 64 × 128 on sm_86 / sm_89."""
    from tl_language import gpu
    from translator.backends.sm80_bwd import STATIC_SHARED, shared_bytes, tiles

    text = (ROOT / "examples" / "mha_fwd.tl").read_text().replace("Param d = 128", "Param d = 64")
    assert shared_bytes(128, 128, 64) + STATIC_SHARED <= gpu.TARGETS["sm_80"].smem_per_block
    for arch, rows in (("sm_80", 128), ("sm_90", 128), ("sm_86", 64), ("sm_89", 64)):
        b = translate_backward(text, arch=arch, skeleton="sm80")
        assert (b.spec.block_m, b.spec.block_n) == (rows, 128) == tiles(64, gpu.TARGETS[arch].smem_per_block)
        dq = "Layout<Shape<_4, _2, _1>>, Tile<_64, _32, _16>" if rows == 128 else "Layout<Shape<_2, _4, _1>>"
        assert f"using TiledMmadQ = TiledMMA<MmaAtom, {dq}" in b.source
    assert tiles(128, 10**6) == (64, 128) and tiles(256, 10**6) == (64, 64)
    with pytest.raises(BackwardBuildError, match="128 at head dim 64"):
        translate_backward(ROOT / "examples" / "mha_fwd.tl", skeleton="sm80", options={"block_m": 128})
