"""TL453–TL456: the parameter-level parts a sketch still lacks, as information with a fix where it is
mechanical.

The paper's first stage writes statements only (`Copy Q from global to shared`, `for j = 0: N`,
`Compute GEMM S, V and accumulate O`); its second stage adds the global Allocates with their offsets
(TL453), the tiles' coordinates (TL454), the loop bound over the key blocks (TL455) and the register
accumulators (TL456), with the tiles (TL451) and the Params (TL450). `tl complete` adds all of them at once.
Each hint here applies only to a sketch (`Model.is_sketch`, see `checks/_sketch.py`); in TL code the same
absence is an error of another rule (TL105, TL101) or a coverage warning (TL401).

A fix is offered when its text only names what the document defines, so applying it never turns a hint
into an error.
"""

from __future__ import annotations

from collections.abc import Iterator

from tl_language import syntax as ast
from tl_language.checks._sketch import defined_anywhere, placeholder_accumulator, placeholder_bound
from tl_language.checks._support import indent_of, insert_line_fix, lines_of
from tl_language.checks.transitions import _allocate_line
from tl_language.diagnostics import Diagnostic, Fix, TextEdit, make
from tl_language.facts import enclosing_loops
from tl_language.model import Model
from tl_language.source import LineText, Position, Range


def check(document: ast.Document, model: Model) -> Iterator[Diagnostic]:
    if not model.is_sketch:
        return
    lines = lines_of(document)
    allocated_hint: set[str] = set()
    for stmt in model.statements:
        if isinstance(stmt, ast.CopyStmt) and stmt.name is not None:
            yield from _missing_allocate(document, model, stmt, allocated_hint)
            yield from _missing_coordinate(model, lines, stmt)
        elif isinstance(stmt, ast.ForStmt) and (bound := placeholder_bound(model, stmt)) is not None:
            yield _loop_bound(model, stmt, bound)
        elif isinstance(stmt, ast.ComputeStmt) and stmt.result and placeholder_accumulator(model, stmt):
            yield _accumulator(model, lines, stmt, stmt.result)


def _level(ident: ast.Ident | None) -> str:
    return ident.name.lower() if ident is not None else ""


def _missing_allocate(
    document: ast.Document, model: Model, stmt: ast.CopyStmt, done: set[str]
) -> Iterator[Diagnostic]:
    """TL453 (TL105 in TL code): a tensor read from global memory with no `Allocate … in global`."""
    name = stmt.name.name if stmt.name else ""
    if _level(stmt.src) != "global" or name in done or stmt.name is None:
        return
    t = model.tensors.get(name)
    placed = t.placements.get("global") if t is not None else None
    if placed is not None and isinstance(placed.stmt, ast.AllocateStmt):
        return
    done.add(name)
    line, text = _allocate_line(document, model, stmt)
    yield make(
        "TL453",
        stmt.name.range,
        f"the sketch reads `{name}` from global memory; TL code declares it there with its shape and "
        f"offset: `{text}`",
        fixes=insert_line_fix(f"Insert `{text}`", line, text),
    )


def _missing_coordinate(model: Model, lines: list[str], stmt: ast.CopyStmt) -> Iterator[Diagnostic]:
    """TL454: a copy between global memory and the block that does not say which tile it moves."""
    if stmt.coordinate is not None or stmt.name is None or stmt.src is None or stmt.dst is None:
        return
    levels = (_level(stmt.src), _level(stmt.dst))
    if "global" not in levels or levels[0] == levels[1]:
        return
    loops = enclosing_loops(model, stmt)
    var = loops[0].var.name if loops and loops[0].var else None
    value = var or "block_m"
    why = f"the loop's key block `{var}`" if var else "this block's query tile `block_m`"
    clause = f" in coordinate [L = {value}]"
    at = _after_tile(lines, stmt)
    fixes = (Fix(f"Insert `{clause.strip()}`", (TextEdit(Range(at, at), clause),)),) if at else ()
    yield make(
        "TL454",
        stmt.name.range,
        f"`Copy {stmt.name.name}` does not say which tile it moves; TL code picks {why}: `{clause.strip()}`",
        fixes=fixes,
    )


def _after_tile(lines: list[str], stmt: ast.CopyStmt) -> Position | None:
    """Where a coordinate clause goes: after the tile's `)`, else after the tensor's name."""
    if stmt.name is None:
        return None
    if not stmt.tile:
        return stmt.name.range.end
    end = stmt.tile[-1].range.end
    if end.line >= len(lines):
        return None
    line = LineText(end.line, lines[end.line])
    i = line.text.find(")", line.index(end.character))
    return Position(end.line, line.col(i + 1)) if i >= 0 else None


def _loop_bound(model: Model, loop: ast.ForStmt, bound: ast.Name) -> Diagnostic:
    """TL455: `for j = 0: N` with N a placeholder; the key loop visits every BN-row block of K."""
    want = "seqlen_k / BN"
    fixes = _replace(bound.range, want) if "BN" in model.params else ()
    return make(
        "TL455",
        bound.range,
        f"the loop bound `{bound.name}` is a placeholder nothing defines; TL code loops over the key "
        f"blocks: `{want}` (`seqlen_k` is a runtime length, BN the key tile's rows)",
        fixes=fixes,
    )


def _replace(rng: Range, text: str) -> tuple[Fix, ...]:
    return (Fix(f"Replace with `{text}`", (TextEdit(rng, text),)),)


def _accumulator(model: Model, lines: list[str], stmt: ast.ComputeStmt, res: ast.Ident) -> Diagnostic:
    """TL456: a sketch accumulates into a tensor before allocating it (an fp32 register tile)."""
    rows = "BM"
    cols = _width(model, stmt)
    text = f"Allocate {res.name} in register ({rows}, {cols})"
    loops = enclosing_loops(model, stmt)
    fixes: tuple[Fix, ...] = ()
    if loops and all(defined_anywhere(model, n) for n in (rows, cols)):
        outer = loops[-1]
        line = outer.range.start.line
        fixes = insert_line_fix(f"Insert `{text}`", line, indent_of(lines, line) + text)
    where = "is only the global output" if res.name in model.tensors else "does not exist yet"
    return make(
        "TL456",
        res.range,
        f"the sketch accumulates into `{res.name}`, which {where}; TL code allocates the fp32 "
        f"accumulator in registers before the loop: `{text}`",
        fixes=fixes,
    )


def _width(model: Model, stmt: ast.ComputeStmt) -> str:
    """The accumulator's columns: the global width of the GEMM's second operand (V), else d_v or d."""
    if len(stmt.args) == 2 and isinstance(stmt.args[1], ast.Name):
        t = model.tensors.get(stmt.args[1].name)
        shape = t.shape_at("global") if t else None
        if shape and len(shape) == 2:
            return ast.expr_text(shape[1])
    return "d_v" if "d_v" in model.params else "d"
