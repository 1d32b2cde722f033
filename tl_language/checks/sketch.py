"""TL450–TL452: what a sketch still lacks, as information (a sketch is valid TL, not an error)."""

from __future__ import annotations

from collections.abc import Iterator

from tl_language import gpu
from tl_language import syntax as ast
from tl_language.diagnostics import Diagnostic, Fix, TextEdit, make
from tl_language.model import Model
from tl_language.source import Range


def _holes(e: ast.Expr | None) -> Iterator[ast.Hole]:
    if isinstance(e, ast.Hole):
        yield e
    elif isinstance(e, ast.Paren):
        yield from _holes(e.inner)
    elif isinstance(e, ast.BinOp):
        yield from _holes(e.left)
        yield from _holes(e.right)


def _exprs(stmt: ast.Stmt) -> list[ast.Expr | None]:
    if isinstance(stmt, ast.ParamStmt):
        return [stmt.value]
    if isinstance(stmt, ast.MaskStmt):
        return list(stmt.args)
    if isinstance(stmt, ast.AllocateStmt):
        return [*(stmt.shape or []), stmt.offset]
    if isinstance(stmt, ast.CopyStmt):
        return [*(stmt.tile or []), stmt.coordinate.value if stmt.coordinate else None]
    if isinstance(stmt, ast.ComputeStmt):
        return list(stmt.args)
    if isinstance(stmt, ast.ForStmt):
        return [stmt.start, stmt.stop]
    return []


def check(document: ast.Document, model: Model) -> Iterator[Diagnostic]:
    for stmt in model.statements:
        for e in _exprs(stmt):
            for hole in _holes(e):
                named = isinstance(stmt, ast.ParamStmt) and stmt.name is not None
                what = f"Param `{stmt.name.name}`" if named else "this value"  # type: ignore[union-attr]
                yield make("TL450", hole.range, f"{what} is a hole (`?`) still to be filled")
        if isinstance(stmt, ast.CopyStmt) and stmt.tile is None and stmt.name is not None:
            yield from _missing_tile(model, stmt, stmt.name)
    yield from _headers(document)


def _missing_tile(model: Model, stmt: ast.CopyStmt, name: ast.Ident) -> Iterator[Diagnostic]:
    """TL451 on a copy from global without its tile; in a sketch, on a store to global too (TL code may
    leave a store's tile out: the kernel stores the accumulator's). The fix writes the suggested tile
    when every name in it is defined, so it never introduces an error."""
    src = stmt.src.name.lower() if stmt.src else ""
    dst = stmt.dst.name.lower() if stmt.dst else ""
    if src != "global" and not (model.is_sketch and dst == "global" and src != "global"):
        return
    tile = _suggest_tile(model, stmt)
    names = [part.strip("() ") for part in tile.split(",")]
    fixes: tuple[Fix, ...] = ()
    if all(n in model.params for n in names):
        at = name.range.end
        fixes = (Fix(f"Insert the tile `{tile}`", (TextEdit(Range(at, at), f" {tile}"),)),)
    where = "from global" if src == "global" else "to global"
    yield make("TL451", name.range,
               f"`Copy {name.name}` {where} has no tile shape yet, e.g. `Copy {name.name} {tile}`",
               fixes=fixes)  # fmt: skip


def _suggest_tile(model: Model, stmt: ast.CopyStmt) -> str:
    coord = ast.expr_text(stmt.coordinate.value) if stmt.coordinate and stmt.coordinate.value else ""
    name = stmt.name.name.upper() if stmt.name else ""
    rows = "BM" if "block_m" in coord or name.startswith(("Q", "O")) else "BN"
    want = "d_qk" if name.startswith(("Q", "K")) else "d_v"
    cols = want if want in model.params else "d"
    return f"({rows}, {cols})"


def _headers(document: ast.Document) -> Iterator[Diagnostic]:
    if not document.statements:
        return
    have = {type(s) for s in document.statements}
    first = document.statements[0].range
    anchor = first
    if ast.TargetStmt not in have:
        yield make("TL452", anchor, f"no `Target`; assuming {gpu.DEFAULT_TARGET} (write e.g. `Target sm_80`)")
    if ast.DtypeStmt not in have:
        yield make("TL452", anchor, f"no `Dtype`; assuming {gpu.DEFAULT_DTYPE} (write e.g. `Dtype bf16`)")
