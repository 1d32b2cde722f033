"""The inference examples (examples/inference/*.tl) build for sm_80 and sm_90 through the inference
backend: the mma.sync kernel with the inference ABI, paged/packed addressing as the TL asks, and a
combine kernel where the key range may be split. (On the GPU: benchmarks/verify_decode.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.build import translate_text
from runner.abi import INFERENCE_PARAMS

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
    assert t.spec.arch == target  # sm_90 too: the cp.async + mma.sync kernel, not sm_90a's wgmma one
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
