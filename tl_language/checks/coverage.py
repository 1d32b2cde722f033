"""TL401: loops and coordinates visit every tile of the tensors they copy.

Runtime lengths (`seqlen_q`, `seqlen_k`) are tiled by ceiling division and the generated kernel masks the
partial last tile, so `for j = 0: seqlen_k / BN` with a (BN, …) tile covers K exactly and is not
reported. What is reported is a copy that leaves part of the tensor unvisited or a tail that the
document's own constants make partial:
- a loop that starts after tile 0, or whose bound divides by a larger size than the tile it loads;
- a constant length that is not a multiple of the tile (the last tile needs masking) or a constant trip
  count that stops short;
- a copy inside a loop whose coordinate ignores the loop variable (every iteration loads the same tile);
- a tile narrower than the tensor's columns.
"""

from __future__ import annotations

from collections.abc import Iterator

from tl_language import syntax as ast
from tl_language.diagnostics import Diagnostic, make
from tl_language.facts import Dim, dim_eq, dims, enclosing_loops
from tl_language.model import Model


def check(document: ast.Document, model: Model) -> Iterator[Diagnostic]:
    for stmt in model.statements:
        if not isinstance(stmt, ast.CopyStmt) or stmt.tile is None or stmt.name is None:
            continue
        if stmt.src is None or stmt.dst is None:
            continue
        levels = (stmt.src.name.lower(), stmt.dst.name.lower())
        if "global" not in levels:
            continue
        global_name = stmt.name.name if levels[0] == "global" else (stmt.alias or stmt.name).name
        t = model.tensors.get(global_name)
        whole = dims(model, t.shape_at("global")) if t else None
        tile = dims(model, stmt.tile)
        if not whole or not tile or len(whole) != len(tile):
            continue
        yield from _columns(stmt, global_name, whole, tile)
        yield from _rows(model, stmt, global_name, whole[0], tile[0])


def _columns(stmt: ast.CopyStmt, name: str, whole: list[Dim], tile: list[Dim]) -> Iterator[Diagnostic]:
    exprs = stmt.tile or []
    for k in range(1, len(whole)):
        w, c = whole[k], tile[k]
        if w.value is not None and c.value is not None and c.value < w.value:
            yield make("TL401", exprs[k].range,
                       f"the tile covers {c} of {name}'s {w} columns; the rest is never copied")


def _rows(model: Model, stmt: ast.CopyStmt, name: str, rows: Dim, tile_rows: Dim) -> Iterator[Diagnostic]:
    coord = stmt.coordinate.value if stmt.coordinate else None
    loops = enclosing_loops(model, stmt)
    loop_vars = {lp.var.name: lp for lp in loops if lp.var}
    used = {n.name for n in ast.expr_names(coord)}
    where = stmt.coordinate.range if stmt.coordinate else stmt.name.range if stmt.name else stmt.range
    if coord is None and model.is_sketch:
        return  # a sketch's missing coordinate is a hint (TL454), not yet a coverage warning
    if loops and not used & set(loop_vars):
        yield make("TL401", where,
                   f"`{name}` is copied inside `for {loops[0].var.name if loops[0].var else '…'}` but its "
                   "coordinate does not use the loop variable: every iteration loads the same tile")
        return
    if coord is None and dim_eq(rows, tile_rows) is not True:
        yield make("TL401", where,
                   f"`{name}` is copied without a coordinate, so only its first {tile_rows}-row tile of "
                   f"{rows} rows is loaded; add `in coordinate [L = …]`")
        return
    if rows.value is not None and tile_rows.value and rows.value % tile_rows.value:
        yield make("TL401", where,
                   f"{name} has {rows} rows, not a multiple of the {tile_rows}-row tile: the last tile is "
                   f"partial ({rows.value % tile_rows.value} rows) and needs masking")
        return
    if not isinstance(coord, ast.Name) or coord.name not in loop_vars:
        return
    loop = loop_vars[coord.name]
    start = model.evaluate(loop.start)
    if start is not None and start > 0:
        yield make("TL401", loop.start.range if loop.start else loop.range,
                   f"`for {coord.name}` starts at {start}: the first {start} tile(s) of {name} "
                   "are never loaded")
    yield from _trip_count(model, loop, name, rows, tile_rows)


def _trip_count(
    model: Model, loop: ast.ForStmt, name: str, rows: Dim, tile_rows: Dim
) -> Iterator[Diagnostic]:
    stop = loop.stop
    if stop is None:
        return
    rng = stop.range
    if isinstance(stop, ast.BinOp) and stop.op == "/":
        num = Dim(model.evaluate(stop.left), ast.expr_text(stop.left))
        den = Dim(model.evaluate(stop.right), ast.expr_text(stop.right))
        if dim_eq(num, rows) is not True:
            return
        if den.value is not None and tile_rows.value is not None and den.value > tile_rows.value:
            yield make("TL401", rng,
                       f"the loop runs {ast.expr_text(stop)} times over {tile_rows}-row tiles of {name}: "
                       f"it stops after {tile_rows.value}/{den.value} of the rows")
        return
    trips = model.evaluate(stop)
    if (trips is not None and rows.value is not None and tile_rows.value is not None
            and trips * tile_rows.value < rows.value):
        yield make("TL401", rng,
                   f"{trips} iterations × {tile_rows} rows cover {trips * tile_rows.value} of {name}'s "
                   f"{rows} rows")
