"""Input limits (tl_language/limits.py): the issue's hostile inputs give one diagnostic where the limit is
crossed, never a RecursionError, through the library, the formatter, hover and `tl check`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tl_language import Position, analyze, cli
from tl_language import syntax as ast
from tl_language.formatter import format_text
from tl_language.hover import hover
from tl_language.limits import MAX_CHARS, MAX_FOR_DEPTH, MAX_LINE_TOKENS, MAX_LINES, MAX_NESTING

HEADER = "Target sm_80\nDtype fp16\n"
NESTED_FOR = HEADER + "for j = 0: 4\n" * 5000 + "end\n" * 5000
NESTED_PARENS = HEADER + "Param a = " + "(" * 5000 + "1" + ")" * 5000 + "\n"
LONG_SUM = HEADER + "Param a = " + " + ".join(["1"] * 200_000) + "\n"


def codes(text: str) -> list[tuple[str, int, int]]:
    return [(d.code, d.range.start.line, d.range.start.character) for d in analyze(text).diagnostics]


def test_five_thousand_nested_for_lines_give_one_tl092_at_the_first_loop_too_deep() -> None:
    got = codes(NESTED_FOR)
    assert [c for c in got if c[0] == "TL092"] == [("TL092", 2 + MAX_FOR_DEPTH, 0)]
    # the flattened loops' `end`s close them: no unmatched `end`, no unterminated `for`
    assert not [c for c in got if c[0] in ("TL004", "TL005")]


def test_nested_for_keeps_the_deep_lines_as_text_and_the_loops_within_the_limit() -> None:
    doc = analyze(NESTED_FOR).document
    loop = doc.statements[-1]
    depth = 0
    while isinstance(loop, ast.ForStmt):
        depth += 1
        assert loop.end_range is not None
        inner = [s for s in loop.body if isinstance(s, ast.ForStmt)]
        if not inner:
            kept = [s for s in loop.body if isinstance(s, ast.ErrorStmt)]
            assert len(kept) == 5000 - MAX_FOR_DEPTH and all(s.text == "for j = 0: 4" for s in kept)
            break
        loop = inner[0]
    assert depth == MAX_FOR_DEPTH


def test_five_thousand_nested_parentheses_give_tl091_at_the_33rd_bracket() -> None:
    got = codes(NESTED_PARENS)
    at = len("Param a = ") + MAX_NESTING
    assert ("TL091", 2, at) in got and "TL006" not in {c[0] for c in got}
    stmt = analyze(NESTED_PARENS).document.statements[-1]
    assert isinstance(stmt, ast.ErrorStmt) and stmt.text == NESTED_PARENS.splitlines()[2]


def test_a_200000_term_expression_gives_tl090_at_token_257() -> None:
    got = codes(LONG_SUM)
    tokens = ["Param", "a", "=", *" + ".join(["1"] * 200_000).split(" ")]
    col = sum(len(t) + 1 for t in tokens[:MAX_LINE_TOKENS])
    assert ("TL090", 2, col) in got


def test_lines_at_the_limits_still_parse() -> None:
    # 32 open brackets and 256 tokens are still read: the limits are "more than"
    deep = "Param a = " + "(" * MAX_NESTING + "1" + ")" * MAX_NESTING
    terms = (MAX_LINE_TOKENS - 3 + 1) // 2  # Param, a, = and 1 + 1 + … with 253 tokens
    long = "Param b = " + " + ".join(["1"] * terms)
    got = codes(HEADER + deep + "\n" + long + "\n")
    assert not [c for c in got if c[0] in ("TL090", "TL091", "TL006")]
    model = analyze(HEADER + deep + "\n" + long + "\n").model
    assert model.params["a"].value == 1 and model.params["b"].value == terms


def test_a_document_past_the_line_limit_stops_with_tl093_on_the_first_unread_line() -> None:
    text = HEADER + "Param BM = 64\n" + "\n" * (MAX_LINES - 3) + "  Param BN = 64\nParam d = 64\n"
    got = codes(text)
    assert ("TL093", MAX_LINES, 2) in got
    assert "BN" not in analyze(text).model.params  # not read


def test_a_document_past_the_character_limit_stops_with_tl093() -> None:
    filler = "# " + "x" * 998 + "\n"  # 1,000 characters a line
    text = HEADER + filler * (MAX_CHARS // 1000) + "Param BM = 64\n"
    got = [c for c in codes(text) if c[0] == "TL093"]
    assert got and got[0][1] < MAX_LINES
    assert "characters" in next(d.message for d in analyze(text).diagnostics if d.code == "TL093")


@pytest.mark.parametrize("text", [NESTED_FOR, NESTED_PARENS, LONG_SUM], ids=["for", "parens", "sum"])
def test_formatter_and_hover_survive_and_keep_the_text(text: str) -> None:
    out = format_text(text)
    assert format_text(out) == out
    kept = [line.strip() for line in out.splitlines()]
    for line in text.splitlines():
        assert line.strip() in kept  # nothing the user wrote is lost
    analysis = analyze(text)
    # hover lexes the line under the cursor: on the long line that is 400,000 tokens, so few positions
    for line, col in ((0, 0), (2, 0), (2, 12), (3, 4), (len(text.splitlines()) - 1, 0)):
        hover(analysis, Position(line, col))


def test_formatter_indents_no_deeper_than_the_loop_limit() -> None:
    out = format_text(NESTED_FOR)
    assert max(len(line) - len(line.lstrip()) for line in out.splitlines()) == 4 * MAX_FOR_DEPTH


@pytest.mark.parametrize(
    ("text", "code"),
    [(NESTED_FOR, "TL092"), (NESTED_PARENS, "TL091"), (LONG_SUM, "TL090")],
    ids=["for", "parens", "sum"],
)
def test_tl_check_reports_the_limit_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, code: str
) -> None:
    f = tmp_path / "hostile.tl"
    f.write_text(text, encoding="utf-8")
    assert cli.main(["check", str(f)]) == 1
    out = capsys.readouterr()
    assert f"error[{code}]" in out.out and "Traceback" not in out.err
