"""Document symbols: the kernel, its parameters and tensors, and the loops with their bodies."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from server import convert
from server.safe import safe
from tl_language import Analysis
from tl_language import syntax as ast
from tl_language.source import Range

if TYPE_CHECKING:
    from server.app import TLServer

S = lsp.SymbolKind


def _sym(
    name: str,
    kind: lsp.SymbolKind,
    rng: Range,
    sel: Range,
    detail: str | None = None,
    children: list[lsp.DocumentSymbol] | None = None,
) -> lsp.DocumentSymbol:
    if not (rng.start <= sel.start and sel.end <= rng.end):  # LSP: the selection lies inside the range
        rng = Range(min(rng.start, sel.start), max(rng.end, sel.end))
    return lsp.DocumentSymbol(
        name=name,
        kind=kind,
        range=convert.range_(rng),
        selection_range=convert.range_(sel),
        detail=detail,
        children=children,
    )


def symbols(analysis: Analysis) -> list[lsp.DocumentSymbol]:
    model = analysis.model
    doc = analysis.document
    out: list[lsp.DocumentSymbol] = []
    for p in model.params.values():
        out.append(
            _sym(
                p.name,
                S.Constant,
                p.stmt.range,
                p.ident.range,
                "= ?" if p.hole else f"= {ast.expr_text(p.stmt.value)}",
            )
        )
    for t in model.tensors.values():
        levels = ", ".join(t.levels)
        first = next(iter(t.placements.values()), None)
        rng = first.stmt.range if first is not None else t.definition.range
        out.append(_sym(t.name, S.Variable, rng, t.definition.range, levels or None))

    def loops(stmts: list[ast.Stmt]) -> list[lsp.DocumentSymbol]:
        res = []
        for s in stmts:
            if isinstance(s, ast.ForStmt):
                end = (
                    s.end_range.end
                    if s.end_range is not None
                    else (s.body[-1].range.end if s.body else s.range.end)
                )
                name = (
                    f"for {s.var.name if s.var else '…'} = {ast.expr_text(s.start)}: {ast.expr_text(s.stop)}"
                )
                res.append(
                    _sym(
                        name,
                        S.Namespace,
                        Range(s.range.start, end),
                        s.var.range if s.var else s.range,
                        None if s.end_range else "unterminated",
                        loops(s.body),
                    )
                )
        return res

    out += loops(doc.statements)
    kernel = next((s for s in doc.statements if isinstance(s, ast.KernelStmt)), None)
    if kernel is None:
        return out
    last = doc.statements[-1]
    end = last.end_range.end if isinstance(last, ast.ForStmt) and last.end_range else last.range.end
    for child in out:  # the kernel spans all its children (statements may precede `Kernel`)
        c_end = convert.tl_position(child.range.end)
        end = max(end, c_end)
    detail = f"{model.target.arch} · {model.dtype} · mask {model.mask}"
    name = kernel.name.name if kernel.name else "kernel"
    start = min([kernel.range.start] + [convert.tl_position(c.range.start) for c in out])
    return [
        _sym(
            name,
            S.Function,
            Range(start, end),
            kernel.name.range if kernel.name else kernel.range,
            detail,
            out,
        )
    ]


def register(server: TLServer) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
    @safe("documentSymbol", empty=list)
    def document_symbol(ls: TLServer, params: lsp.DocumentSymbolParams) -> list[lsp.DocumentSymbol]:
        analysis = ls.analysis_of(params.text_document.uri)
        return [] if analysis is None else symbols(analysis)
