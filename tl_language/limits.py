"""Input limits: how much TL one document, one line and one nesting may hold before the tools stop reading.

A TL kernel is a few dozen lines of a few dozen tokens with one loop. Hostile or generated input (5,000
nested `for` lines, 5,000 nested parentheses, a 200,000-term sum) would otherwise drive the recursive
parts of the toolchain (the expression parser, the walkers over expressions and loop bodies) past
Python's recursion limit. Each limit is checked where it is crossed, before anything recursive sees the
input, and gives one error diagnostic there (TL090–TL093); the text itself is kept, so nothing the user
wrote is lost:

- a line with more than `MAX_LINE_TOKENS` tokens, or with `(`/`[` nested deeper than `MAX_NESTING`,
  becomes an `ErrorStmt` holding its text (TL090, TL091), so no expression tree is deeper than the line
  is long;
- a `for` nested deeper than `MAX_FOR_DEPTH` becomes an `ErrorStmt` and its body joins the loop around it
  (TL092); its `end` closes it silently;
- lines past `MAX_LINES`, or past `MAX_CHARS` characters of the document, are not parsed (TL093).

The numbers are in the codes' summaries (`tl codes`, docs/diagnostics.md); tests/tl_language/test_tl_limits.py
and the property tests pin them.
"""

from __future__ import annotations

from dataclasses import dataclass

from tl_language.lexer import Token

# Tokens on one line. Every expression tree on a line is at most this deep, and the walkers that recurse
# over expressions take a few frames per level: 256 keeps them far below Python's 1000-frame limit.
MAX_LINE_TOKENS = 256
# Brackets open at once on one line: `(` and `[` together. The expression parser spends one frame per
# precedence level for each bracket, so this bounds its recursion independently of the token count.
MAX_NESTING = 32
# `for` loops open at once. The loop body is a nested list that the binder, the checker and the language
# server's document symbols walk recursively.
MAX_FOR_DEPTH = 16
# Lines of one document, and characters of one document: beyond either the rest is not analysed.
MAX_LINES = 20_000
MAX_CHARS = 2_000_000

_OPEN = ("(", "[")
_CLOSE = (")", "]")


@dataclass(frozen=True, slots=True)
class Crossing:
    """Where a line crosses a limit: the token at which it happens and the diagnostic to give."""

    code: str
    token: Token
    message: str


def scan_line(tokens: list[Token]) -> Crossing | None:
    """The first limit the line's tokens cross, reading left to right (token count or bracket depth).

    A pre-scan over the flat token list, so it costs one pass and never recurses; a line it flags is not
    handed to the statement parsers at all.
    """
    depth = 0
    for i, tok in enumerate(tokens):
        if i == MAX_LINE_TOKENS:
            return Crossing(
                "TL090",
                tok,
                f"this line has {len(tokens):,} tokens; TL reads at most {MAX_LINE_TOKENS} per line (this is "
                f"token {MAX_LINE_TOKENS + 1}): split the expression with Params, e.g. `Param part = …`",
            )
        if tok.kind != "punct":
            continue
        if tok.text in _OPEN:
            depth += 1
            if depth > MAX_NESTING:
                return Crossing(
                    "TL091",
                    tok,
                    f"brackets nested {depth} deep here; TL allows at most {MAX_NESTING} open `(` or `[` at "
                    "once: split the expression with Params",
                )
        elif tok.text in _CLOSE:
            depth = max(0, depth - 1)  # an unmatched close is the parser's TL003, not a limit
    return None


def for_depth_message(depth: int) -> str:
    return (
        f"this `for` would be loop {depth + 1} deep; TL allows at most {MAX_FOR_DEPTH} nested loops, so it "
        "is kept as text and its body belongs to the loop around it"
    )


def document_message(line: int, chars: int) -> str:
    """TL093's message for a document cut at 0-based `line` after `chars` characters."""
    if line >= MAX_LINES:
        why = f"more than {MAX_LINES:,} lines"
    else:
        why = f"more than {MAX_CHARS:,} characters (by line {line + 1}: {chars:,})"
    return f"the document has {why}; TL analyses no further than this line, the rest is not checked"
