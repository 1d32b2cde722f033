"""Inlay hints: shared-memory bytes of each tile staged into shared memory (× pipeline stages inside the
loop) and, on the Kernel line, the block's total against the target's limit. Numbers come from
`tl_language.resources`, the same ones the checker enforces (TL303)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from server import convert
from server.safe import safe
from tl_language import Analysis
from tl_language import syntax as ast

if TYPE_CHECKING:
    from server.app import TLServer


def kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB" if n % 1024 else f"{n // 1024} KiB"


def hints(analysis: Analysis, rng: lsp.Range | None = None) -> list[lsp.InlayHint]:
    try:
        from tl_language import resources
        from tl_language.facts import enclosing_loops
    except ImportError:
        return []
    model = analysis.model
    out: list[lsp.InlayHint] = []
    stages = resources.stages(model)
    for stmt in model.statements:
        if not (
            isinstance(stmt, ast.CopyStmt)
            and stmt.dst is not None
            and stmt.dst.name.lower() == "shared"
            and stmt.name is not None
        ):
            continue
        name = (stmt.alias or stmt.name).name
        t = model.tensors.get(name)
        placed = t.placements.get("shared") if t else None
        if placed is None or placed.stmt is not stmt:
            continue
        n = resources.bytes_per_block(model, name, "shared")
        if n is None:
            continue
        staged = bool(enclosing_loops(model, stmt))
        label = f"smem {kib(n)}" + (
            f" × {stages} stages = {kib(n * stages)}" if staged and stages > 1 else ""
        )
        out.append(
            lsp.InlayHint(
                position=convert.position(stmt.range.end),
                label=label,
                kind=lsp.InlayHintKind.Type,
                padding_left=True,
            )
        )
    total = resources.shared_memory_bytes(model)
    kernel = next((s for s in model.statements if isinstance(s, ast.KernelStmt)), None)
    if total is not None and kernel is not None:
        limit = model.target.smem_per_block
        mark = "⚠ over " if total > limit else ""
        out.append(
            lsp.InlayHint(
                position=convert.position(kernel.range.end),
                label=f"smem {kib(total)} / {kib(limit)} {mark}({model.target.arch})".replace("  ", " "),
                kind=lsp.InlayHintKind.Type,
                padding_left=True,
            )
        )
    if rng is not None:
        out = [h for h in out if rng.start.line <= h.position.line <= rng.end.line]
    return out


def register(server: TLServer) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_INLAY_HINT, lsp.InlayHintOptions(resolve_provider=False))
    @safe("inlayHint", empty=list)
    def inlay_hint(ls: TLServer, params: lsp.InlayHintParams) -> list[lsp.InlayHint]:
        analysis = ls.analysis_of(params.text_document.uri)
        return [] if analysis is None else hints(analysis, params.range)
