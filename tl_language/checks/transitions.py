"""TL104/TL105: copies move between two different levels, and global sources are declared.

Every path between two different levels exists on the hardware TL targets: global→shared (cp.async or
TMA), shared→register (ldmatrix), global→register (plain loads), register→shared, register→global and
shared→global (stores). A copy within one level moves nothing and is reported (TL104). Reading a tensor
from global memory needs its `Allocate … in global` (shape and offset), else TL105 with a fix that
inserts one.
"""

from __future__ import annotations

from collections.abc import Iterator

from tl_language import syntax as ast
from tl_language.checks._support import insert_line_fix
from tl_language.diagnostics import Diagnostic, make
from tl_language.facts import LEVELS
from tl_language.model import Model
from tl_language.source import Range

_WHERE = {"global": "global memory", "shared": "shared memory", "register": "registers"}


def check(document: ast.Document, model: Model) -> Iterator[Diagnostic]:
    for stmt in model.statements:
        if not isinstance(stmt, ast.CopyStmt) or stmt.src is None:
            continue
        src = stmt.src.name.lower()
        if stmt.dst is not None and src == stmt.dst.name.lower() and src in LEVELS:
            yield make("TL104", Range(stmt.src.range.start, stmt.dst.range.end),
                       f"a copy from {_WHERE[src]} to {_WHERE[src]} moves nothing; "
                       "copies go between two different levels")
        if src == "global" and stmt.name is not None and not model.is_sketch:  # a sketch's: TL453
            t = model.tensors.get(stmt.name.name)
            if t is None or "global" not in t.placements:
                line, text = _allocate_line(document, model, stmt)
                yield make("TL105", stmt.name.range,
                           f"`{stmt.name.name}` is copied from global memory but never allocated there; "
                           f"declare it: `{text}`",
                           fixes=insert_line_fix(f"Insert `{text}`", line, text))


def _allocate_line(document: ast.Document, model: Model, copy: ast.CopyStmt) -> tuple[int, str]:
    """A sensible `Allocate X in global (rows, cols) with offset …` and the line to insert it before."""
    name = copy.name.name if copy.name else "X"
    coord = ast.expr_text(copy.coordinate.value) if copy.coordinate and copy.coordinate.value else ""
    by_block = "block_m" in coord or name.upper().startswith(("Q", "O"))
    rows = "seqlen_q" if by_block else "seqlen_k"
    offset = "q_offset" if by_block else "kv_offset"
    if copy.tile and len(copy.tile) >= 2:
        cols = ast.expr_text(copy.tile[-1])
    else:
        want = ("d_qk" if name.upper().startswith(("Q", "K")) else "d_v")
        cols = want if want in model.params else ("d" if "d" in model.params else "?")
    text = f"Allocate {name} in global ({rows}, {cols}) with offset {offset}"
    return _insert_at(document), text


def _insert_at(document: ast.Document) -> int:
    """After the last top-level `Allocate … in global`, else before the first body statement."""
    last_global: ast.Stmt | None = None
    for s in document.statements:
        if isinstance(s, ast.AllocateStmt) and s.level and s.level.name.lower() == "global":
            last_global = s
    if last_global is not None:
        return last_global.range.start.line + 1
    for s in document.statements:
        if isinstance(s, ast.AllocateStmt | ast.CopyStmt | ast.ComputeStmt | ast.ReshapeStmt | ast.ForStmt):
            return s.range.start.line
    return document.line_count
