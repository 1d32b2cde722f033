"""Apply text edits (UTF-16 ranges, as LSP sends them) to a document: for tests, `tl` and tools."""

from __future__ import annotations

from collections.abc import Iterable

from tl_language.diagnostics import TextEdit
from tl_language.source import LineText, Position, split_lines


def offset_of(lines: list[str], pos: Position) -> int:
    """Code-point offset in "\\n".join(lines) of a (line, UTF-16 column) position, clamped."""
    line = max(0, min(pos.line, len(lines)))
    base = sum(len(s) + 1 for s in lines[:line])
    if line >= len(lines):
        return base - 1 if lines else 0
    return base + LineText(line, lines[line]).index(pos.character)


def apply_edits(text: str, edits: Iterable[TextEdit]) -> str:
    """`text` (line endings normalised to \\n) with `edits` applied; edits must not overlap."""
    lines = split_lines(text)
    joined = "\n".join(lines)
    spans = [(offset_of(lines, e.range.start), offset_of(lines, e.range.end), e.new_text) for e in edits]
    spans.sort(key=lambda s: (s[0], s[1]), reverse=True)
    for start, end, new in spans:
        joined = joined[:start] + new + joined[end:]
    return joined
