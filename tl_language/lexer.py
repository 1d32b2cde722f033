"""Line lexer. TL is line-oriented, so tokens never cross a line and the line is the recovery unit."""

from __future__ import annotations

from dataclasses import dataclass

from tl_language.source import LineText

PUNCT = set("()[],=:+-*/?")


@dataclass(slots=True)
class Token:
    kind: str  # "ident" | "int" | "punct" | "bad"
    text: str
    start: int  # code-point index in the line
    end: int

    @property
    def lower(self) -> str:
        return self.text.lower()


def lex_line(line: LineText) -> tuple[list[Token], int | None]:
    """Tokens of one line and the code-point index where a `#` comment starts (or None)."""
    text = line.text
    tokens: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in " \t\f\v\ufeff":
            i += 1
        elif ch == "#":
            return tokens, i
        elif ch.isalpha() or ch == "_":
            j = i + 1
            while j < n and (text[j].isalnum() or text[j] == "_") and text[j].isascii():
                j += 1
            tokens.append(Token("ident", text[i:j], i, j))
            i = j
        elif ch.isdigit() and ch.isascii():
            j = i + 1
            while j < n and text[j].isdigit() and text[j].isascii():
                j += 1
            tokens.append(Token("int", text[i:j], i, j))
            i = j
        elif ch in PUNCT:
            tokens.append(Token("punct", ch, i, i + 1))
            i += 1
        else:
            tokens.append(Token("bad", ch, i, i + 1))
            i += 1
    return tokens, None
