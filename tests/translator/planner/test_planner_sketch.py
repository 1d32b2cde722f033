"""Stage 2 without a model (`translator.planner.sketch.complete_sketch`): the paper's statements-only
sketch becomes TL code that checks clean and translates for sm_80 and sm_90 (and compiles through NVRTC),
keeping every statement and comment the sketch wrote."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tl_language import analyze
from tl_language.codes import SKETCH_CODES
from tl_language.diagnostics import Severity
from translator import translate
from translator.planner.sketch import complete_sketch, needs_stage2

ROOT = Path(__file__).resolve().parents[3]
PAPER = (ROOT / "examples" / "sketches" / "sketch_paper.tl").read_text(encoding="utf-8")
MHA = (ROOT / "examples" / "mha_fwd.tl").read_text(encoding="utf-8")


def statements(text: str) -> list[str]:
    """The statement lines without comments, blank lines and indentation (the TL code's content)."""
    out = []
    for line in text.splitlines():
        code = line.split("#", 1)[0].strip()
        if code:
            out.append(code)
    return out


def assert_buildable(text: str, *, warnings: bool = False) -> None:
    """No error, no sketch hint (and with `warnings=False` no warning), and the translator takes it."""
    analysis = analyze(text)
    worst = Severity.ERROR if warnings else Severity.WARNING
    bad = [d for d in analysis.diagnostics if d.severity <= worst or d.code in SKETCH_CODES]
    assert bad == [], bad
    assert not analysis.model.is_sketch
    translate(analysis, tl_path="completed.tl")  # raises TranslateError on any refusal


def test_the_papers_sketch_becomes_the_mha_example() -> None:
    r = complete_sketch(PAPER, kernel="mha_fwd", dtype="bf16")
    assert r.recognised and r.values == {"BM": 128, "BN": 64, "warps": 4, "stages": 2}
    assert_buildable(r.text)
    # the same statements as the hand-written example, apart from the example's comments and Mask line
    assert statements(r.text) == statements(MHA)


@pytest.mark.parametrize(("target", "dtype"), [("sm_80", "fp16"), ("sm_90", "bf16"), ("sm_86", "bf16")])
def test_it_builds_for_each_target(target: str, dtype: str) -> None:
    r = complete_sketch(PAPER, target=target, dtype=dtype, head_dim=64)
    assert_buildable(r.text)
    model = analyze(r.text).model
    assert model.target.arch == target and model.dtype == dtype and model.params["d"].value == 64
    if target == "sm_90":
        assert "from shared to register" in r.text  # the sketch's own copies stay, though wgmma needs none
        assert "Param warps" not in r.text  # the wgmma kernel has no warps knob


def test_every_line_the_sketch_wrote_is_kept() -> None:
    r = complete_sketch(PAPER)
    out = r.text.splitlines()
    for line in PAPER.splitlines():
        if line.startswith("#"):
            assert line in out  # comments unchanged
        elif line.strip():
            # a statement keeps its words, with the added parts inserted (`Copy Q` + tile + coordinate …);
            # the placeholder bound `N` and the accumulator named after the output `O` are what changes
            words = [w for w in re.findall(r"\w+", line) if w not in ("N", "O")]
            assert any(all(w in re.findall(r"\w+", o) for w in words) for o in out), line


def test_completing_twice_changes_nothing() -> None:
    once = complete_sketch(PAPER).text
    again = complete_sketch(once)
    assert again.text == once and again.changes == []


@pytest.mark.parametrize(
    ("old", "new", "added"),
    [
        # the Reshape between the chained GEMMs (TL202's fix)
        (
            "    Reshape S from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_N_new)\n",
            "",
            "    Reshape S from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_N_new)",
        ),
        # the register copies mma.sync needs (TL201's fix)
        ("    Copy K from shared to register\n", "", "    Copy K from shared to register"),
        # P·V inside the key loop accumulates
        ("accumulate O", "get O", "    Compute GEMM S, V and accumulate acc_o"),
        # the softmax's division by the row sum after the loop
        ("Compute Divide O, rowsum and get new O\n", "", "Compute Divide acc_o, rowsum and get new acc_o"),
    ],
)
def test_the_mechanical_statement_level_parts_are_added(old: str, new: str, added: str) -> None:
    sketch = PAPER.replace(old, new, 1)
    assert sketch != PAPER
    r = complete_sketch(sketch)
    assert added in r.text.splitlines()
    assert_buildable(r.text)


def test_what_the_sketch_fixes_is_kept() -> None:
    sketch = "Kernel mine\nTarget sm_80\nDtype bf16\nParam BM = 64\nParam d = 64\nMask causal\n" + PAPER
    r = complete_sketch(sketch, target="sm_90", dtype="fp16", head_dim=128)
    model = analyze(r.text).model
    assert model.kernel_name == "mine" and model.target.arch == "sm_80" and model.dtype == "bf16"
    assert model.params["BM"].value == 64 and model.params["d"].value == 64 and model.mask == "causal"
    assert r.text.count("Param BM") == 1 and "Kernel attention_fwd" not in r.text
    assert_buildable(r.text)


def test_mla_head_dims_are_used_for_the_allocates() -> None:
    sketch = "Param d_qk = 128\nParam d_v = 64\n" + PAPER
    r = complete_sketch(sketch)
    lines = r.text.splitlines()
    assert "Allocate K in global (seqlen_k, d_qk) with offset kv_offset" in lines
    assert "Allocate O in global (seqlen_q, d_v) with offset o_offset" in lines
    assert "Allocate acc_o in register (BM, d_v)" in lines
    # BN = d_qk = 128: the names (Q (BM, d_qk), K (BN, d_qk)) decide Q·Kᵀ's orientation, so no TL204
    assert_buildable(r.text)


def test_the_assumed_head_dimension_is_said() -> None:
    r = complete_sketch(PAPER)
    assert any("assumed head dimension 128" in n for n in r.notes)
    assert not any("head dimension" in n for n in complete_sketch(PAPER, head_dim=64).notes)


def test_a_document_that_is_not_attention_is_returned_as_it_was() -> None:
    text = "Copy Q from global to shared\nCompute Exp Q and get P\n"
    r = complete_sketch(text)
    assert not r.recognised and r.text == text and r.changes == []
    assert "attention forward" in r.notes[0]


def test_stage2_is_needed_only_for_statement_level_parts() -> None:
    assert needs_stage2(analyze(PAPER))
    assert not needs_stage2(analyze((ROOT / "examples" / "sketch_fwd.tl").read_text()))  # holes only
    assert not needs_stage2(analyze(MHA))
    assert needs_stage2(analyze(MHA.replace("Target sm_80\n", "")), target="sm_90")


@pytest.mark.nvrtc
@pytest.mark.slow
def test_the_completed_sketch_compiles_through_nvrtc_for_sm80_and_sm90() -> None:
    try:
        from runner.compile import CompileJob, compile_many
        from runner.toolchain import ToolchainError, toolchain

        toolchain()
    except (ImportError, ToolchainError) as exc:
        pytest.skip(f"no NVRTC toolchain: {exc}")
    jobs = []
    for target in ("sm_80", "sm_90"):
        r = complete_sketch(PAPER, target=target, kernel=f"paper_{target}")
        t = translate(analyze(r.text), tl_path=f"paper_{target}.tl")
        jobs.append(CompileJob(source=t.source, arch=t.launch.arch, name=f"paper_{target}.cu",
                               source_map=t.source_map, tl_file=t.launch.tl_file))  # fmt: skip
    results = compile_many(jobs, max_workers=os.cpu_count() or 2)
    assert not [r for r in results if isinstance(r, Exception)], results
