"""Formatting: the language core's formatter (`tl fmt`), as one whole-document edit."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from server.documents import Doc
from server.safe import safe

if TYPE_CHECKING:
    from server.app import TLServer

log = logging.getLogger(__name__)


def format_edits(ls: TLServer, doc: Doc) -> list[lsp.TextEdit] | None:
    """Edits that format `doc` ([] when already formatted); None when the formatter is unavailable."""
    try:
        from tl_language.formatter import format_text
    except ImportError as exc:
        ls.notify_user(f"TL: formatting unavailable: tl_language.formatter ({exc})", lsp.MessageType.Warning)
        return None
    new = format_text(doc.text)
    if new == doc.text:
        return []
    lines = doc.lines()
    end = lsp.Position(line=len(lines) - 1, character=_utf16(lines[-1]))
    return [lsp.TextEdit(range=lsp.Range(start=lsp.Position(line=0, character=0), end=end), new_text=new)]


def _utf16(s: str) -> int:
    from tl_language.source import utf16_len

    return utf16_len(s)


def register(server: TLServer) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_FORMATTING)
    @safe("formatting", empty=list)
    def formatting(ls: TLServer, params: lsp.DocumentFormattingParams) -> list[lsp.TextEdit]:
        doc = ls.docs.get(params.text_document.uri)
        return [] if doc is None else (format_edits(ls, doc) or [])
