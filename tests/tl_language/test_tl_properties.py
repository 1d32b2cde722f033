"""Property tests: parse, analyze, format and hover never raise on any text; ranges stay in the document."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tl_language import Position, analyze, parse
from tl_language.formatter import format_text
from tl_language.hover import hover
from tl_language.lexer import lex_line
from tl_language.limits import MAX_FOR_DEPTH, MAX_LINE_TOKENS, MAX_NESTING
from tl_language.source import LineText, Range, split_lines

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_LINES = [
    line
    for p in sorted((ROOT / "examples").glob("*.tl"))
    for line in p.read_text(encoding="utf-8").splitlines()
]
WORDS = ["Allocate", "Copy", "Compute", "Reshape", "for", "end", "Param", "Target", "Dtype", "Mask", "GEMM",
         "in", "from", "to", "global", "shared", "register", "and", "get", "new", "?", "(", ")", "[", "]",
         ",", "=", ":", "/", "*", "#", "𝔸", "é", "\t", "\r", "sm_90", "bf16", "S", "Q", "1", "0"]

# Lines from the examples, shuffled and mutated, plus arbitrary text: the realistic and the hostile.
line = st.one_of(
    st.sampled_from(EXAMPLE_LINES),
    st.lists(st.sampled_from(WORDS), max_size=10).map(" ".join),
    st.text(max_size=40),
)
document = st.one_of(st.lists(line, max_size=30).map("\n".join), st.text(max_size=300))


def inside(rng: Range, lines: list[str]) -> bool:
    for pos in (rng.start, rng.end):
        if not 0 <= pos.line < len(lines):
            return False
        if not 0 <= pos.character <= LineText(pos.line, lines[pos.line]).width:
            return False
    return rng.start <= rng.end


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document)
def test_never_raises_and_ranges_lie_inside_the_document(text: str) -> None:
    lines = split_lines(text)
    doc, _ = parse(text)
    assert doc.line_count == len(lines)
    analysis = analyze(text)
    for d in analysis.diagnostics:
        assert inside(d.range, lines), (d, text)
    for stmt in doc.walk():
        assert inside(stmt.range, lines)
    once = format_text(text)
    assert format_text(once) == once
    for n in range(min(len(lines), 5)):
        for col in (0, 3, 9, 20):
            h = hover(analysis, Position(n, col))
            assert h is None or inside(h.range, lines)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(EXAMPLE_LINES), min_size=1, max_size=40).map("\n".join))
def test_formatting_keeps_the_diagnostics(text: str) -> None:
    before = [(d.code, d.range.start.line) for d in analyze(text).diagnostics]
    after = [(d.code, d.range.start.line) for d in analyze(format_text(text)).diagnostics]
    assert [c for c, _ in before] == [c for c, _ in after]


# ---- deep and long inputs (tl_language/limits.py): the limits hold and nothing recurses without bound ----

PREFIXES = ["Param x = ", "Allocate Q in global (", "Copy Q (", "Compute Multiply S, ", "for j = 0: ",
            "Mask window(", "Param y = [", "Reshape S from ("]  # fmt: skip


def _survives(text: str) -> list[tuple[str, int, int]]:
    """Analyze, format (idempotently) and hover `text`; its diagnostics as (code, line, column)."""
    lines = split_lines(text)
    analysis = analyze(text)
    for d in analysis.diagnostics:
        assert inside(d.range, lines), (d, text[:200])
    once = format_text(text)
    assert format_text(once) == once
    for n in range(min(len(lines), 3)):
        for col in (0, 9, 40):
            h = hover(analysis, Position(n, col))
            assert h is None or inside(h.range, lines)
    return [(d.code, d.range.start.line, d.range.start.character) for d in analysis.diagnostics]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prefix=st.sampled_from(PREFIXES),
    opens=st.lists(st.sampled_from(["(", "["]), max_size=120),
    closed=st.booleans(),
)
def test_bracket_nesting_past_the_limit_is_tl091_at_the_bracket_that_crosses_it(
    prefix: str, opens: list[str], closed: bool
) -> None:
    closes = "".join(")" if o == "(" else "]" for o in reversed(opens)) if closed else ""
    line = prefix + "".join(opens) + "1" + closes
    got = _survives(line)
    tokens, _ = lex_line(LineText(0, line))
    assert len(tokens) <= MAX_LINE_TOKENS  # at most 2 × 120 brackets: only the nesting limit applies
    depth, crossing = 0, None
    for tok in tokens:
        if tok.text in ("(", "["):
            depth += 1
            if depth > MAX_NESTING:
                crossing = tok.start
                break
        elif tok.text in (")", "]"):
            depth = max(0, depth - 1)
    tl091 = [c for c in got if c[0] == "TL091"]
    assert tl091 == ([("TL091", 0, crossing)] if crossing is not None else [])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prefix=st.sampled_from(["Param x = ", "for j = 0: ", "Compute Multiply S, ", "Param BN = "]),
    terms=st.integers(1, 600),
    ops=st.lists(st.sampled_from(["+", "-", "*", "/"]), min_size=1, max_size=4),
)
def test_a_line_past_the_token_limit_is_tl090_at_the_first_token_past_it(
    prefix: str, terms: int, ops: list[str]
) -> None:
    expr = " ".join(f"{ops[i % len(ops)]} 7" if i else "7" for i in range(terms))
    line = prefix + expr
    got = _survives("Target sm_80\nDtype fp16\n" + line)
    tokens, _ = lex_line(LineText(2, line))
    tl090 = [c for c in got if c[0] == "TL090"]
    if len(tokens) > MAX_LINE_TOKENS:
        assert tl090 == [("TL090", 2, tokens[MAX_LINE_TOKENS].start)]
    else:
        assert not tl090 and not [c for c in got if c[0] == "TL006"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    depth=st.integers(0, 60),
    body=st.lists(st.sampled_from(EXAMPLE_LINES), max_size=4),
    closed=st.booleans(),
)
def test_loops_past_the_depth_limit_are_tl092_once_at_the_first_loop_too_deep(
    depth: int, body: list[str], closed: bool
) -> None:
    lines = ["Target sm_80", "Dtype fp16"]
    lines += [f"for i{k} = 0: 2" for k in range(depth)]
    lines += [b for b in body if b.split()[:1] not in (["for"], ["end"])]
    lines += ["end"] * (depth if closed else 0)
    lines.append("Param after = 1")
    text = "\n".join(lines)
    got = _survives(text)
    tl092 = [c for c in got if c[0] == "TL092"]
    assert tl092 == ([("TL092", 2 + MAX_FOR_DEPTH, 0)] if depth > MAX_FOR_DEPTH else [])
    unclosed = [c for c in got if c[0] == "TL004"]
    assert len(unclosed) == (0 if closed else min(depth, MAX_FOR_DEPTH))
    assert not [c for c in got if c[0] == "TL005"]
    assert analyze(text).model.params["after"].value == 1  # what follows the deep part still binds


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            line,
            st.integers(0, 80).map(lambda n: "Param p = " + "(" * n + "1" + ")" * n),
            st.integers(0, 400).map(lambda n: "Param q = " + " + ".join(["1"] * (n + 1))),
            st.integers(0, 40).map(lambda n: "for k = 0: 2\n" * n),
            st.integers(0, 40).map(lambda n: "end\n" * n),
        ),
        max_size=20,
    ).map("\n".join)
)
def test_mixed_deep_and_long_documents_never_raise(text: str) -> None:
    _survives(text)
