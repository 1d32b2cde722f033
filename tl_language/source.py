"""Positions and ranges in a TL document.

Columns are UTF-16 code units, as the Language Server Protocol counts them, because every consumer of a
range (the editor, the CLI's `line:col`) wants what the user sees in an LSP client. Lines are 0-based.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ASTRAL = re.compile("[\U00010000-\U0010FFFF]")


# Positions and ranges are values: never mutate one. They are not `frozen` only because a frozen
# dataclass's __init__ costs twice as much, and the parser makes thousands per 1,000-line file (the
# 20 ms budget); equality, ordering and hashing are the same.
@dataclass(order=True, slots=True, unsafe_hash=True)
class Position:
    line: int
    character: int  # UTF-16 code units


@dataclass(slots=True, unsafe_hash=True)
class Range:
    start: Position
    end: Position

    @staticmethod
    def of(line: int, start: int, end: int) -> Range:
        return Range(Position(line, start), Position(line, end))

    def contains(self, pos: Position) -> bool:
        return self.start <= pos <= self.end

    def to_json(self) -> dict[str, dict[str, int]]:
        return {
            "start": {"line": self.start.line, "character": self.start.character},
            "end": {"line": self.end.line, "character": self.end.character},
        }


def utf16_len(text: str) -> int:
    """Number of UTF-16 code units in `text` (astral characters count twice)."""
    if text.isascii():
        return len(text)
    return sum(2 if ord(ch) > 0xFFFF else 1 for ch in text)


class LineText:
    """One physical line with a code-point → UTF-16 column map (built only for non-ASCII lines)."""

    __slots__ = ("_utf16", "number", "text")

    def __init__(self, number: int, text: str) -> None:
        self.number = number
        self.text = text
        self._utf16: list[int] | None = None
        # Only astral characters (two UTF-16 units) make columns differ from code-point indices.
        if not text.isascii() and _ASTRAL.search(text):
            cols = [0]
            for ch in text:
                cols.append(cols[-1] + (2 if ord(ch) > 0xFFFF else 1))
            self._utf16 = cols

    def col(self, index: int) -> int:
        """UTF-16 column of code-point index `index` (clamped to the line)."""
        index = max(0, min(index, len(self.text)))
        return index if self._utf16 is None else self._utf16[index]

    def index(self, utf16_col: int) -> int:
        """Code-point index of a UTF-16 column (clamped; a column inside a surrogate pair rounds down)."""
        if self._utf16 is None:
            return max(0, min(utf16_col, len(self.text)))
        for i, c in enumerate(self._utf16):
            if c > utf16_col:
                return i - 1
        return len(self.text)

    def range(self, start: int, end: int) -> Range:
        if self._utf16 is None:  # ASCII fast path: code points are UTF-16 columns
            n = self.number
            return Range(Position(n, start), Position(n, end))
        return Range.of(self.number, self.col(start), self.col(end))

    @property
    def width(self) -> int:
        return self.col(len(self.text))


def split_lines(text: str) -> list[str]:
    """Split like LSP clients do: \\n, \\r\\n and \\r end a line; a trailing newline opens an empty line."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
