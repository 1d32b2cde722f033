"""The bundled Hopper example (`Target sm_90`): its plan, the generated kernel's ABI and launch, its source
map, an NVRTC build for sm_90a, and the same document built for sm_80 once its tiles fit there."""

from __future__ import annotations

import re

import pytest
from translator_cases import HOPPER, example_text, translate_example

from runner.abi import ATTENTION_PARAMS, TMA_PARAMS
from tl_language import analyze
from translator import TranslateError, make_plan
from translator.backends.sm90.config import hopper_config

NAME = "hopper_mha_fwd"


def test_the_hopper_example_is_bundled() -> None:
    assert HOPPER == [NAME]


def test_plan_reads_the_hopper_params() -> None:
    text = example_text(NAME)
    p = make_plan(analyze(text).model, text)
    got = (p.arch, p.dtype, p.block_m, p.block_n, p.head_dim_qk, p.stages, p.mask)
    assert got == ("sm_90", "bf16", 128, 160, 128, 2, "none")
    assert (p.consumers, p.overlap, p.pingpong, p.persistent) == (2, True, True, False)


def test_kernel_abi_launch_and_source_map() -> None:
    t = translate_example(NAME, line_directives=False)
    m = re.search(r'extern "C" __global__ void __launch_bounds__\((\d+), 1\) (\w+)\(\s*([^)]*)\)', t.source)
    assert m is not None and m.group(2) == NAME
    params = [x.strip() for x in m.group(3).split(",")]
    assert params[: len(ATTENTION_PARAMS)] == [f"{ctype} {pname}" for pname, ctype, _ in ATTENTION_PARAMS]
    assert len(params) == len(ATTENTION_PARAMS) + len(TMA_PARAMS)
    spec = t.launch
    assert int(m.group(1)) == spec.threads == 384  # a producer and two consumer warp groups
    assert (spec.arch, spec.block_m, spec.block_n, spec.persistent) == ("sm_90a", 128, 160, False)
    assert spec.shared_bytes == hopper_config(t.plan).smem()["total"]
    assert spec.tl_file == f"examples/{NAME}.tl"
    # every TL statement is tagged, and the Q·Kᵀ wgmma maps back to its GEMM statement
    tags = {int(n) for n in re.findall(r"// TL:(\d+)  ", t.source)}
    assert all(step.tl_line in tags for step in t.plan.steps)
    lines = t.source.splitlines()
    qk = next(i + 1 for i, ln in enumerate(lines) if "tl::wgmma</*kZeroInit=*/true" in ln)
    assert t.source_map[qk] == t.plan.line_of("gemm_qk")


def test_the_same_document_builds_for_sm_80_once_its_tiles_fit() -> None:
    with pytest.raises(TranslateError) as err:  # 128×160 with two stages needs more than an A100 block
        translate_example(NAME, target="sm_80")
    assert {d.code for d in err.value.diagnostics} == {"TL303"}
    t = translate_example(NAME, target="sm_80", BN=64)
    assert t.launch.arch == "sm_80" and "cute::gemm(tiled_mma, tSrQ" in t.source


@pytest.mark.nvrtc
@pytest.mark.slow
def test_compiles_for_sm90a_through_nvrtc() -> None:
    pytest.importorskip("cuda.bindings")
    pytest.importorskip("cutlass_library")
    from runner.compile import compile_source

    t = translate_example(NAME)
    compiled = compile_source(t.source, arch=t.launch.arch, name=f"{NAME}.cu")
    assert compiled.kind == "cubin" and compiled.code[:4] == b"\x7fELF"
    assert "C7508" not in compiled.log  # setmaxnreg honoured
