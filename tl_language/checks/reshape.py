"""TL202/TL205: a GEMM accumulator fed to another GEMM is first relabelled from MMA_C to MMA_A.

The accumulator fragment of `mma.sync` (MMA_C) holds its values in a different per-thread order than the
A-operand fragment (MMA_A); FlashAttention-2 converts between them (`convert_layout_acc_Aregs`). TL makes
that step explicit as `Reshape S from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_N_new)`. Layouts flow
through elementwise Computes (see `facts.layouts`).
"""

from __future__ import annotations

from collections.abc import Iterator

from tl_language import syntax as ast
from tl_language.checks._support import indent_of, insert_line_fix, lines_of
from tl_language.diagnostics import Diagnostic, Fix, make
from tl_language.facts import LAYOUTS, layouts, levels_before
from tl_language.model import Model
from tl_language.ops import op

RESHAPE_TO_A = "Reshape {name} from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_N_new)"


def check(document: ast.Document, model: Model) -> Iterator[Diagnostic]:
    before = layouts(model)
    lines: list[str] | None = None
    for i, stmt in enumerate(model.statements):
        if isinstance(stmt, ast.ReshapeStmt):
            # undefined names are TL101's, tensors outside registers TL103's
            if stmt.name is not None and "register" in levels_before(model, stmt.name.name, i):
                yield from _reshape(stmt, before.get(id(stmt), {}))
            continue
        if not isinstance(stmt, ast.ComputeStmt) or stmt.op is None:
            continue
        spec = op(stmt.op.name)
        if spec is None or spec.name != "GEMM":
            continue
        state = before.get(id(stmt), {})
        for pos, e in enumerate(stmt.args[:2]):
            if not isinstance(e, ast.Name) or state.get(e.name) != "MMA_C":
                continue
            role = "A" if pos == 0 else "B"
            msg = (f"`{e.name}` is a GEMM accumulator (layout MMA_C) used as this GEMM's {role} operand "
                   f"without a Reshape to MMA_{role}")
            fixes: tuple[Fix, ...] = ()
            if pos == 0:
                if lines is None:
                    lines = lines_of(document)
                line = stmt.range.start.line
                text = RESHAPE_TO_A.format(name=e.name)
                fixes = insert_line_fix(f"Insert `{text}`", line, indent_of(lines, line) + text)
                msg += f"; insert `{text}` before it"
            yield make("TL202", e.range, msg, fixes=fixes)


def _reshape(stmt: ast.ReshapeStmt, state: dict[str, str | None]) -> Iterator[Diagnostic]:
    if stmt.name is None or not stmt.src_layout or not stmt.dst_layout:
        return
    for ident in (stmt.src_layout[0], stmt.dst_layout[0]):
        if ident.name.upper() not in LAYOUTS:
            yield make("TL205", ident.range,
                       f"unknown fragment layout `{ident.name}`; the first mode is MMA_A, MMA_B or MMA_C")
            return
    src = stmt.src_layout[0].name.upper()
    current = state.get(stmt.name.name)
    if current == src:
        return
    if current is None:
        msg = (f"`{stmt.name.name}` has no {src} layout here: only a GEMM result (MMA_C) or an earlier "
               "Reshape gives a tensor a fragment layout")
    else:
        msg = f"`{stmt.name.name}` is in layout {current} here, not {src}"
    yield make("TL205", stmt.src_layout[0].range, msg)
