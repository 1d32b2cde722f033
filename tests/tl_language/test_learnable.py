"""`with learnable` on a side tensor's Allocate: parsed, kept by the formatter, clean where it is valid."""

from __future__ import annotations

from pathlib import Path

from tl_language import analyze
from tl_language import syntax as ast
from tl_language.formatter import format_text

ALIBI = Path(__file__).resolve().parents[2] / "examples" / "variants" / "alibi.tl"
MARKED = ALIBI.read_text().replace(
    "Allocate slopes in global (heads)", "Allocate slopes in global (heads) with learnable"
)


def test_the_mark_parses_checks_clean_and_survives_formatting():
    a = analyze(MARKED)
    assert [d for d in a.diagnostics if d.severity.name == "ERROR"] == []
    stmt = next(
        s for s in a.document.statements if isinstance(s, ast.AllocateStmt) and s.name.name == "slopes"
    )
    assert stmt.learnable is not None
    assert "Allocate slopes in global (heads) with learnable" in format_text(MARKED)
    assert format_text(format_text(MARKED)) == format_text(MARKED)
