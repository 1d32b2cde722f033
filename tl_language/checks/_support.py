"""Small helpers the rules share: suggestions, fixes as text edits, source lines."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from tl_language.diagnostics import Fix, TextEdit
from tl_language.source import Position, Range, split_lines
from tl_language.syntax import Document


def closest(word: str, choices: Iterable[str]) -> str | None:
    found = difflib.get_close_matches(word.lower(), list(choices), n=1, cutoff=0.5)
    return found[0] if found else None


def replace_fix(range: Range, new_text: str) -> tuple[Fix, ...]:
    return (Fix(f"Replace with `{new_text}`", (TextEdit(range, new_text),)),)


def lines_of(document: Document) -> list[str]:
    """The document's lines, split once per analysis."""
    return split_lines(document.text)


def indent_of(lines: list[str], line: int) -> str:
    if 0 <= line < len(lines):
        raw = lines[line]
        return raw[: len(raw) - len(raw.lstrip(" \t"))]
    return ""


def insert_line_fix(title: str, line: int, text: str) -> tuple[Fix, ...]:
    """A fix inserting `text` as a whole line before `line` (the caller supplies the indentation)."""
    at = Position(line, 0)
    return (Fix(title, (TextEdit(Range(at, at), text + "\n"),)),)


def line_of(stmt_range: Range) -> int:
    return stmt_range.start.line
