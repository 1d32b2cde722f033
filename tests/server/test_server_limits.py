"""The language server on the issue's hostile inputs: every feature answers (diagnostics with the limit's
code included) instead of failing silently on a RecursionError."""

from __future__ import annotations

import pytest
from lsprotocol import types as lsp

from server import convert
from server.documents import Doc
from server.features.completion import complete
from server.features.folding import folding
from server.features.inlay_hints import hints
from server.features.semantic_tokens import encode
from server.features.symbols import symbols
from tl_language.limits import MAX_FOR_DEPTH

HEADER = "Target sm_80\nDtype fp16\n"
CASES = {
    "for": (HEADER + "for j = 0: 4\n" * 5000 + "end\n" * 5000, "TL092"),
    "parens": (HEADER + "Param a = " + "(" * 5000 + "1" + ")" * 5000 + "\n", "TL091"),
    "sum": (HEADER + "Param a = " + " + ".join(["1"] * 200_000) + "\n", "TL090"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_feature_answers_on_hostile_input(case: str) -> None:
    text, code = CASES[case]
    doc = Doc("file:///hostile.tl", text, 1)
    analysis = doc.analysis()
    published = [convert.diagnostic(d) for d in analysis.diagnostics]
    assert any(d.code == code for d in published)
    assert isinstance(symbols(analysis), list)
    assert isinstance(folding(analysis), list)
    assert isinstance(encode(analysis), list)
    assert isinstance(hints(analysis), list)
    for line, col in ((0, 0), (2, 0), (3, 4)):
        assert isinstance(complete(analysis, line, col), list)


def test_document_symbols_nest_no_deeper_than_the_loop_limit() -> None:
    analysis = Doc("file:///deep.tl", CASES["for"][0], 1).analysis()

    def depth(items: list[lsp.DocumentSymbol]) -> int:
        best = 0
        stack = [(s, 1) for s in items]
        while stack:
            sym, d = stack.pop()
            best = max(best, d)
            stack.extend((c, d + 1) for c in sym.children or [])
        return best

    assert depth(symbols(analysis)) <= MAX_FOR_DEPTH + 1
