"""Property tests: parse, analyze, format and hover never raise on any text; ranges stay in the document."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tl_language import Position, analyze, parse
from tl_language.formatter import format_text
from tl_language.hover import hover
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
