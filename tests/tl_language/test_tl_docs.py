"""The docs agree with the code: diagnostics.md is the registry's output; language.md names every op."""

from __future__ import annotations

from pathlib import Path

from tl_language.codes import CODES, markdown_document
from tl_language.ops import OPS
from tl_language.parser import STATEMENT_KEYWORDS

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_diagnostics_md_matches_the_registry() -> None:
    committed = (DOCS / "diagnostics.md").read_text(encoding="utf-8")
    assert committed == markdown_document(), "regenerate with: tl codes --markdown > docs/diagnostics.md"
    for code in CODES:
        assert f"## {code}" in committed


def test_language_md_covers_statements_ops_and_the_gemm_convention() -> None:
    text = (DOCS / "language.md").read_text(encoding="utf-8")
    for kw in STATEMENT_KEYWORDS:
        heading = "`for … end`" if kw in ("for", "end") else f"`{kw.capitalize()}"
        assert heading in text, kw
    for op in OPS.values():
        assert f"`{op.name}`" in text, op.name
    for needle in ("MMA_C", "MMA_A", "Q·Kᵀ", "P·V", "BN == d", "sketch", "seqlen_k", "block_m"):
        assert needle in text, needle
