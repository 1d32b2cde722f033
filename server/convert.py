"""Language-core values → lsprotocol values. The core already counts columns in UTF-16, like LSP."""

from __future__ import annotations

from typing import Any

from lsprotocol import types as lsp

from tl_language.diagnostics import Diagnostic, Fix
from tl_language.source import Position, Range

SOURCE = "tl"


def position(p: Position) -> lsp.Position:
    return lsp.Position(line=p.line, character=p.character)


def range_(r: Range) -> lsp.Range:
    return lsp.Range(start=position(r.start), end=position(r.end))


def tl_position(p: lsp.Position) -> Position:
    return Position(p.line, p.character)


def tl_range(r: lsp.Range) -> Range:
    return Range(tl_position(r.start), tl_position(r.end))


def diagnostic(d: Diagnostic, *, source: str = SOURCE) -> lsp.Diagnostic:
    """The fixes ride in `data` so the code-action handler hands them out without re-checking."""
    return lsp.Diagnostic(
        range=range_(d.range),
        message=d.message,
        severity=lsp.DiagnosticSeverity(int(d.severity)),
        code=d.code,
        source=source,
        data={"fixes": [f.to_json() for f in d.fixes]} if d.fixes else None,
    )


def fixes_from_data(data: Any) -> list[Fix]:
    """Fixes back from a diagnostic's `data` (as the client echoes it); malformed data gives none."""
    from tl_language.diagnostics import TextEdit

    out: list[Fix] = []
    if not isinstance(data, dict):
        return out
    for raw in data.get("fixes") or []:
        try:
            edits = tuple(
                TextEdit(
                    Range(
                        Position(e["range"]["start"]["line"], e["range"]["start"]["character"]),
                        Position(e["range"]["end"]["line"], e["range"]["end"]["character"]),
                    ),
                    str(e["newText"]),
                )
                for e in raw["edits"]
            )
            out.append(Fix(str(raw["title"]), edits))
        except (KeyError, TypeError):
            continue
    return out


def text_edit(r: Range, new_text: str) -> lsp.TextEdit:
    return lsp.TextEdit(range=range_(r), new_text=new_text)
