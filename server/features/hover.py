"""Hover: the language core's `tl_language.hover.hover(analysis, position)` (keyword, op, level, tensor
facts, diagnostic codes) rendered as markdown."""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from lsprotocol import types as lsp

from server import convert
from server.safe import safe

if TYPE_CHECKING:
    from server.app import TLServer

log = logging.getLogger(__name__)


def _core_hover() -> tuple[Any, str]:
    try:
        return importlib.import_module("tl_language.hover").hover, ""
    except (ImportError, AttributeError) as exc:
        return None, str(exc)


def hover_at(ls: TLServer, uri: str, position: lsp.Position) -> lsp.Hover | None:
    analysis = ls.analysis_of(uri)
    if analysis is None:
        return None
    fn, why = _core_hover()
    if fn is None:
        return lsp.Hover(
            contents=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value=f"TL hover unavailable: {why}")
        )
    result = fn(analysis, convert.tl_position(position))
    if result is None:
        return None
    text = getattr(result, "markdown", None) or getattr(result, "contents", None) or str(result)
    rng = getattr(result, "range", None)
    return lsp.Hover(
        contents=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value=text),
        range=convert.range_(rng) if rng is not None else None,
    )


def register(server: TLServer) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_HOVER)
    @safe("hover")
    def hover(ls: TLServer, params: lsp.HoverParams) -> lsp.Hover | None:
        return hover_at(ls, params.text_document.uri, params.position)
