"""Inline expectations in `.tl` fixtures, rust-analyzer style: the one reader every fixture test uses.

A comment line made of `#`, spaces and carets marks a span of the nearest code line above it:

        Copy K from shraed to register
    #               ^^^^^^ TL106 unknown memory level

The carets' columns (characters of the fixture line) are the expected range on the code line; after
the code, optional text must occur in the message. A single caret also matches an empty range that
starts there (e.g. "expected X, found end of line"). A file may hold several documents separated by a
line starting with `#====`; each is analysed on its own. The expected diagnostics must equal the actual
ones exactly: a line without carets asserts that nothing is reported there.

`annotate(text)` writes the expectations for what the checker reports now (for drafting fixtures; every
drafted expectation is reviewed by hand before it is committed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tl_language import analyze
from tl_language.analysis import Analysis
from tl_language.source import LineText, split_lines

EXPECT = re.compile(r"^(\s*#\s*)(\^+)\s+(TL\d{3})\b\s*(.*?)\s*$")
SEPARATOR = "#===="


@dataclass(frozen=True)
class Expected:
    line: int
    start: int  # UTF-16 columns on the code line
    end: int
    code: str
    message: str


def split_documents(text: str) -> list[str]:
    parts: list[list[str]] = [[]]
    for raw in split_lines(text):
        if raw.startswith(SEPARATOR):
            parts.append([])
        else:
            parts[-1].append(raw)
    return ["\n".join(p) for p in parts]


def expectations(text: str) -> list[Expected]:
    out: list[Expected] = []
    code_line = -1
    lines = split_lines(text)
    for number, raw in enumerate(lines):
        m = EXPECT.match(raw)
        if m is None:
            code_line = number
            continue
        if code_line < 0:
            raise ValueError(f"line {number + 1}: an expectation with no code line above it")
        target = LineText(code_line, lines[code_line])
        start = len(m.group(1))
        end = start + len(m.group(2))
        out.append(Expected(code_line, target.col(start), target.col(end), m.group(3), m.group(4)))
    return out


def _matches(e: Expected, line: int, start: int, end: int, code: str) -> bool:
    if e.line != line or e.code != code or e.start != start:
        return False
    return e.end == end or (start == end and e.end == e.start + 1)


def mismatches(text: str) -> list[str]:
    """Differences between a document's expectations and its diagnostics (empty: the fixture passes)."""
    analysis = analyze(text)
    expected = expectations(text)
    problems: list[str] = []
    unmatched = list(expected)
    for d in analysis.diagnostics:
        r = d.range
        start, end = r.start.character, r.end.character
        hit = next((e for e in unmatched if _matches(e, r.start.line, start, end, d.code)), None)
        if hit is None:
            problems.append(f"unexpected {d.code} at {r.start.line + 1}:{start}-{end}: {d.message}")
            continue
        unmatched.remove(hit)
        if hit.message and hit.message not in d.message:
            problems.append(f"{d.code} at line {r.start.line + 1}: {d.message!r} lacks {hit.message!r}")
    problems += [f"missing {e.code} at {e.line + 1}:{e.start}-{e.end}" for e in unmatched]
    return problems


def annotate(text: str) -> str:
    """`text` with expectation lines for its current diagnostics (ASCII code lines only)."""
    analysis: Analysis = analyze(text)
    lines = [ln for ln in split_lines(text) if not EXPECT.match(ln)]
    analysis = analyze("\n".join(lines))
    by_line: dict[int, list[str]] = {}
    for d in analysis.diagnostics:
        r = d.range
        width = max(1, r.end.character - r.start.character) if r.end.line == r.start.line else 1
        pad = max(r.start.character - 1, 0)
        mark = "#" + " " * pad + "^" * width if r.start.character else "^" * width
        by_line.setdefault(r.start.line, []).append(f"{mark} {d.code}")
    out: list[str] = []
    for number, raw in enumerate(lines):
        out.append(raw)
        out += by_line.get(number, [])
    return "\n".join(out)
