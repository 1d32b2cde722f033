"""The inference examples (examples/inference/*.tl) build for sm_80 and sm_90 through the inference
backend: the mma.sync kernel with the inference ABI, paged/packed addressing as the TL asks, and a
combine kernel where the key range may be split. A packed prefill on sm_90 is the Hopper kernel with the
inference ABI and TMA descriptors. (On the GPU: benchmarks/verify_decode.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.build import BuildError, translate_text
from runner.abi import INFERENCE_PARAMS, TMA_PARAMS

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples" / "inference").glob("*.tl"))
TARGETS = ("sm_80", "sm_90")


def _translate(path: Path, target: str):
    text = re.sub(r"(?m)^Target .*$", f"Target {target}", path.read_text())
    return translate_text(text, Path(f"{path.stem}_{target}.tl"))


def test_the_examples_are_there() -> None:
    assert {p.stem for p in EXAMPLES} >= {"paged_decode", "spec_decode", "varlen_prefill"}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_builds_the_inference_kernel(path: Path, target: str) -> None:
    t = _translate(path, target)
    inf = t.spec.inference
    assert inf is not None
    if target == "sm_90" and path.stem == "varlen_prefill":
        pytest.skip("a packed prefill on sm_90 is the wgmma kernel's: test_packed_prefill_on_sm90_…")
    assert t.spec.arch == target  # decode on sm_90 too: the cp.async + mma.sync kernel, not sm_90a's wgmma
    assert "wgmma" not in t.source and "SM80_16x8x16_F32BF16BF16F32_TN" in t.source
    assert t.spec.params[: len(INFERENCE_PARAMS)] == tuple(p[0] for p in INFERENCE_PARAMS)
    assert "tl::cp_async_16(" in t.source
    assert ("kPageSize" in t.source) == bool(inf["page_size"])
    assert ("cu_seqlens_q[bidb]" in t.source) == inf["varlen"]
    assert ("r % group_size" in t.source) == inf["pack_gqa"]
    assert (f"{t.spec.kernel_name}_combine(" in t.source) == (inf["splits"] != 1)
    assert t.spec.combine_name == (f"{t.spec.kernel_name}_combine" if inf["splits"] != 1 else None)


def test_paged_decode_reads_rows_through_the_block_table() -> None:
    t = _translate(next(p for p in EXAMPLES if p.stem == "paged_decode"), "sm_80")
    assert t.spec.inference == {
        "splits": 0, "page_size": 64, "pack_gqa": True, "varlen": False, "combine": "paged_decode_combine",
        "combine_warps": 8,
    }  # fmt: skip
    assert "block_table[bidb * max_pages + key / kPageSize]" in t.source
    assert "constexpr int kPageSize = 64;" in t.source


def test_spec_decode_renders_its_score_region_on_packed_rows() -> None:
    t = _translate(next(p for p in EXAMPLES if p.stem == "spec_decode"), "sm_80")
    assert t.spec.program is not None and t.spec.program["scalars"] == [["cap", "f32", 50.0]]
    # the softcap's tanh, lowered to an exp2 and a reciprocal (kernel_ir.passes.lower_transcendentals)
    assert " = tl::exp2_approx(tl_e" in t.source and " = __fdividef(1.f, tl_e" in t.source
    assert "const int row = (m_block * kBlockM + get<0>(coords(r, 0))) / group_size;" in t.source


@pytest.mark.nvrtc
@pytest.mark.slow
def test_every_inference_example_compiles_for_both_targets() -> None:
    from runner.compile import CompileError, CompileJob, compile_many

    jobs, names = [], []
    for path in EXAMPLES:
        for target in TARGETS:
            t = _translate(path, target)
            jobs.append(
                CompileJob(source=t.source, arch=t.spec.arch, name=f"{path.stem}_{target}.cu",
                           source_map=t.source_map, tl_file=t.spec.tl_file)
            )  # fmt: skip
            names.append(f"{path.stem} {target}")
    failed = [
        f"{n}: {r}"[:800]
        for n, r in zip(names, compile_many(jobs), strict=True)
        if isinstance(r, CompileError)
    ]
    assert not failed, "\n".join(failed)


def test_packed_prefill_on_sm90_is_the_wgmma_kernel_with_the_inference_abi() -> None:
    t = _translate(next(p for p in EXAMPLES if p.stem == "varlen_prefill"), "sm_90")
    spec = t.spec
    assert spec.arch == "sm_90a" and "wgmma" in t.source and "SM80_16x8x16" not in t.source
    n = len(INFERENCE_PARAMS)
    assert spec.params[:n] == tuple(p[0] for p in INFERENCE_PARAMS) and spec.params[n:] == TMA_PARAMS
    assert spec.uses_tma and spec.combine_name is None
    assert spec.inference == {"splits": 1, "page_size": 0, "pack_gqa": False, "varlen": True, "combine": None}
    src = t.source
    # the sequence's rows: TMA coordinates count from cu_seqlens, the batch coordinate is the one packed batch
    assert "const int seqlen_q = cu_seqlens_q[bidb + 1] - q_start;" in src
    assert "if (m_block * kBlockM >= seqlen_q) return;" in src
    assert "q_start + m_block * kBlockM, bidh, 0);" in src
    assert "k_start + n_block * kBlockN, bidh_kv, 0);" in src
    # O: no TMA store (it would write the next sequence's rows); LSE (heads, total_q)
    assert "SM90_TMA_STORE_4D" not in src and "if (row < rows_left)" in src
    assert "lse + static_cast<long long>(bidh) * cu_seqlens_q[batch] + q_start;" in src
    # the L2 sections are sized by the longest sequence (per-sequence lengths come later)
    assert "1ll * max_seqlen_k * (kHeadDimQK + kHeadDimV)" in src


def test_paged_decode_on_sm90_stays_on_the_mma_sync_kernel() -> None:
    t = _translate(next(p for p in EXAMPLES if p.stem == "paged_decode"), "sm_90")
    assert t.spec.arch == "sm_90" and not t.spec.uses_tma and "wgmma" not in t.source


def test_packed_prefill_cannot_be_persistent_on_sm90() -> None:
    path = next(p for p in EXAMPLES if p.stem == "varlen_prefill")
    text = re.sub(r"(?m)^Target .*$", "Target sm_90", path.read_text())
    text = text.replace("Param varlen = 1", "Param varlen = 1\nParam persistent = 1", 1)
    with pytest.raises(BuildError) as info:  # the checker's TL132, before the Hopper config's TL501
        translate_text(text, Path("varlen_persistent.tl"))
    (diag,) = info.value.diagnostics
    assert diag.code == "TL132" and "persistent = 1" in diag.message
    assert text.splitlines()[diag.range.start.line].startswith("Param persistent = 1")
