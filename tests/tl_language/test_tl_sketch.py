"""Sketch semantics: the paper's statements-only sketch gets information-level hints (TL45x), each with a
range and, where mechanical, a fix; what is wrong in itself stays an error; TL code keeps its errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from tl_language import analyze
from tl_language.diagnostics import Severity
from tl_language.edits import apply_edits

ROOT = Path(__file__).resolve().parents[2]
PAPER = (ROOT / "examples" / "sketches" / "sketch_paper.tl").read_text(encoding="utf-8")
PARAMS = "Target sm_80\nDtype fp16\nParam BM = 64\nParam BN = 64\nParam d = 128\n"


def codes(text: str) -> list[str]:
    return [d.code for d in analyze(text).diagnostics]


def test_the_papers_sketch_has_hints_only_one_per_missing_part() -> None:
    analysis = analyze(PAPER)
    assert analysis.model.is_sketch
    assert {d.severity for d in analysis.diagnostics} == {Severity.INFORMATION}
    got = sorted(codes(PAPER))
    # Target and Dtype; tiles of Q, K, V and O; Allocates of Q, K, V; coordinates of all four copies;
    # the loop bound; the accumulator
    assert got == sorted(["TL452"] * 2 + ["TL451"] * 4 + ["TL453"] * 3 + ["TL454"] * 4 + ["TL455", "TL456"])


def test_hints_sit_on_what_they_are_about() -> None:
    lines = PAPER.splitlines()
    by_code = {(d.code, d.range.start.line): d for d in analyze(PAPER).diagnostics}
    loop = next(i for i, ln in enumerate(lines) if ln.startswith("for j"))
    bound = by_code[("TL455", loop)]
    assert lines[loop][bound.range.start.character : bound.range.end.character] == "N"
    acc = next(i for i, ln in enumerate(lines) if "accumulate O" in ln)
    hint = by_code[("TL456", acc)]
    assert lines[acc][hint.range.start.character : hint.range.end.character] == "O"


@pytest.mark.parametrize(
    ("old", "new", "code"),
    [
        # a GEMM of an operand nothing defines
        ("Compute GEMM Q, K and get S", "Compute GEMM Q, X and get S", "TL101"),
        # a copy within one level
        ("Copy K from shared to register", "Copy K from shared to shared", "TL104"),
        # the paper's own failure mode: chained GEMMs without the Reshape
        ("    Reshape S from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_N_new)\n", "", "TL202"),
        # a copy from a level the tensor has not reached
        ("Copy V from shared to register", "Copy V from register to shared", "TL103"),
    ],
)
def test_a_sketch_that_is_wrong_in_itself_keeps_its_error(old: str, new: str, code: str) -> None:
    text = PAPER.replace(old, new, 1)
    assert text != PAPER
    errors = [d.code for d in analyze(text).diagnostics if d.severity == Severity.ERROR]
    assert code in errors


def test_tl_code_keeps_the_errors_the_sketch_hints_at() -> None:
    """With every tile written the document is TL code: a missing Allocate is TL105, `N` is TL101."""
    code = PARAMS + (
        "Copy Q (BM, d) in coordinate [L = block_m] from global to shared\n"
        "Copy Q from shared to register\n"
        "for j = 0: N\n"
        "    Copy K (BN, d) in coordinate [L = j] from global to shared\n"
        "end\n"
    )
    got = codes(code)
    assert "TL105" in got and "TL101" in got and "TL453" not in got and "TL455" not in got


def apply_fix(text: str, code: str) -> str:
    d = next(d for d in analyze(text).diagnostics if d.code == code)
    assert d.fixes, f"{code} carries no fix"
    return apply_edits(text, d.fixes[0].edits)


def errors(text: str) -> list[str]:
    return [f"{d.code} {d.message}" for d in analyze(text).diagnostics if d.severity == Severity.ERROR]


@pytest.mark.parametrize(
    ("code", "expect"),
    [
        ("TL451", "Copy Q (BM, d) from global to shared"),
        ("TL453", "Allocate Q in global (seqlen_q, d) with offset q_offset"),
        ("TL454", "Copy Q in coordinate [L = block_m] from global to shared"),
        ("TL455", "for j = 0: seqlen_k / BN"),
        ("TL456", "Allocate O in register (BM, d)"),
    ],
)
def test_each_mechanical_fix_writes_its_part_and_introduces_no_error(code: str, expect: str) -> None:
    sketch = PARAMS + PAPER
    fixed = apply_fix(sketch, code)
    assert expect in fixed.splitlines() or any(line.strip() == expect for line in fixed.splitlines())
    assert errors(fixed) == []
    before = sum(d.code == code for d in analyze(sketch).diagnostics)
    assert sum(d.code == code for d in analyze(fixed).diagnostics) == before - 1


def test_fixes_that_would_name_undefined_params_are_not_offered() -> None:
    """The paper's sketch has no Params: a tile `(BM, d)` or the bound `seqlen_k / BN` would be TL101."""
    for d in analyze(PAPER).diagnostics:
        if d.code in ("TL451", "TL455", "TL456"):
            assert d.fixes == (), d


def test_the_coordinate_fix_goes_after_a_written_tile() -> None:
    sketch = PARAMS + "Param BM2 = ?\n" + PAPER.replace("Copy K from global", "Copy K (BN, d) from global")
    fixed = apply_fix(
        sketch.replace("Copy Q from global", "Copy Q in coordinate [L = block_m] from global"), "TL454"
    )
    assert "    Copy K (BN, d) in coordinate [L = j] from global to shared" in fixed.splitlines()
