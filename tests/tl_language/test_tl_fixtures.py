"""Every diagnostic code has a fixture that triggers it and clean lines that must not trigger it."""

from __future__ import annotations

from pathlib import Path

import pytest
from tl_expect import expectations, mismatches, split_documents

from tl_language import analyze
from tl_language.codes import CODES
from tl_language.edits import apply_edits

FIXTURES = Path(__file__).parent / "fixtures"
LANGUAGE_CODES = [c for c in CODES if c < "TL500"]  # TL5xx come from the translator and the runner


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.tl")), ids=lambda p: p.name)
def test_fixture_expectations_hold(path: Path) -> None:
    for doc in split_documents(path.read_text(encoding="utf-8")):
        assert mismatches(doc) == []


@pytest.mark.parametrize("code", LANGUAGE_CODES)
def test_every_code_has_a_triggering_and_a_clean_case(code: str) -> None:
    path = FIXTURES / f"{code}.tl"
    assert path.exists(), f"no fixture for {code}"
    docs = split_documents(path.read_text(encoding="utf-8"))
    triggered = [e for d in docs for e in expectations(d) if e.code == code]
    assert triggered, f"{path.name} never expects {code}"
    # A clean case: a statement line with no expectation of this code (exact matching proves it silent).
    expected_lines = {(i, e.line) for i, d in enumerate(docs) for e in expectations(d)}
    clean = [
        (i, n) for i, d in enumerate(docs) for n, line in enumerate(d.splitlines())
        if line.strip() and not line.lstrip().startswith("#") and (i, n) not in expected_lines
    ]
    assert clean, f"{path.name} has no line that must stay silent"


def _fix_of(text: str, code: str) -> str:
    d = next(d for d in analyze(text).diagnostics if d.code == code)
    assert d.fixes, f"{code} carries no fix"
    return apply_edits(text, d.fixes[0].edits)


def test_missing_reshape_fix_inserts_the_reshape_with_the_gemm_indentation() -> None:
    text = (FIXTURES / "TL202.tl").read_text(encoding="utf-8")
    fixed = _fix_of(text, "TL202")
    lines = fixed.splitlines()
    at = lines.index("      Reshape P from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_N_new)")
    assert lines[at + 1] == "      Compute GEMM P, V and accumulate acc_o"
    assert lines[at - 1] == "      Compute Exp S and get P"
    assert not [d for d in analyze(fixed).diagnostics if d.code == "TL202" and d.range.start.line == at + 1]


def test_global_allocation_fix_inserts_a_sensible_allocate() -> None:
    text = (FIXTURES / "TL105.tl").read_text(encoding="utf-8")
    fixed = _fix_of(text, "TL105")
    lines = fixed.splitlines()
    assert "Allocate K in global (seqlen_k, d) with offset kv_offset" in lines
    assert lines.index("Allocate K in global (seqlen_k, d) with offset kv_offset") == \
        lines.index("  Allocate Q in global (seqlen_q, d) with offset q_offset") + 1
    assert not any(d.code == "TL105" for d in analyze(fixed).diagnostics)


@pytest.mark.parametrize(("code", "before", "after"), [
    ("TL106", "to shraed", "to shared"),
    ("TL050", "Target sm80", "Target sm_80"),
    ("TL051", "Dtype bfloat16", "Dtype bf16"),
    ("TL107", "Compute Softmx A", "Compute Softmax A"),
])
def test_replacement_fixes(code: str, before: str, after: str) -> None:
    text = (FIXTURES / f"{code}.tl").read_text(encoding="utf-8")
    doc = next(d for d in split_documents(text) if before in d)
    assert after in _fix_of(doc, code)


def test_gemm_operand_fix_copies_to_registers() -> None:
    doc = split_documents((FIXTURES / "TL201.tl").read_text(encoding="utf-8"))[0]
    fixed = _fix_of(doc, "TL201")
    assert "      Copy K from shared to register\n      Compute GEMM Q, K and get S" in fixed


def test_duplicate_header_fix_removes_the_line() -> None:
    doc = (FIXTURES / "TL052.tl").read_text(encoding="utf-8")
    fixed = _fix_of(doc, "TL052")
    assert "Target sm_90" not in fixed and "Target sm_80" in fixed
