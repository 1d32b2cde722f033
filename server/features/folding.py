"""Folding ranges: each `for … end` loop, and runs of consecutive comment lines."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from server.safe import safe
from tl_language import Analysis

if TYPE_CHECKING:
    from server.app import TLServer


def folding(analysis: Analysis) -> list[lsp.FoldingRange]:
    out: list[lsp.FoldingRange] = []
    for loop in analysis.model.loops:
        if loop.end_range is not None:
            end = loop.end_range.start.line
        elif loop.body:  # unterminated: fold what the parser put in the body
            end = loop.body[-1].range.end.line
        else:
            continue
        if end > loop.range.start.line:
            out.append(
                lsp.FoldingRange(
                    start_line=loop.range.start.line, end_line=end, kind=lsp.FoldingRangeKind.Region
                )
            )
    run: list[int] = []
    for line in [*sorted(c.range.start.line for c in analysis.document.comments if not c.trailing), -2]:
        if run and line == run[-1] + 1:
            run.append(line)
            continue
        if len(run) > 1:
            out.append(
                lsp.FoldingRange(start_line=run[0], end_line=run[-1], kind=lsp.FoldingRangeKind.Comment)
            )
        run = [line]
    return sorted(out, key=lambda f: (f.start_line, f.end_line))


def register(server: TLServer) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_FOLDING_RANGE)
    @safe("foldingRange", empty=list)
    def folding_range(ls: TLServer, params: lsp.FoldingRangeParams) -> list[lsp.FoldingRange]:
        analysis = ls.analysis_of(params.text_document.uri)
        return [] if analysis is None else folding(analysis)
