"""TL201: GEMM operands are tiles in registers; on sm_90 (wgmma) an operand may stay in shared memory."""

from __future__ import annotations

from collections.abc import Iterator

from tl_language import syntax as ast
from tl_language.checks._support import indent_of, insert_line_fix, lines_of
from tl_language.diagnostics import Diagnostic, Fix, make
from tl_language.facts import first_placement, is_scalar_name, levels_before
from tl_language.model import Model
from tl_language.ops import op


def check(document: ast.Document, model: Model) -> Iterator[Diagnostic]:
    lines: list[str] | None = None
    shared_ok = model.target.wgmma
    for i, stmt in enumerate(model.statements):
        if not isinstance(stmt, ast.ComputeStmt) or stmt.op is None:
            continue
        spec = op(stmt.op.name)
        if spec is None or spec.name != "GEMM":
            continue
        for e in stmt.args:
            if not isinstance(e, ast.Name):
                yield make("TL201", e.range, f"GEMM operand `{ast.expr_text(e)}` is not a tile")
                continue
            if is_scalar_name(model, e.name) and e.name not in model.tensors:
                yield make("TL201", e.range, f"GEMM operand `{e.name}` is a scalar, not a tile")
                continue
            first = first_placement(model, e.name)
            if first is None or first[0] >= i:
                continue  # undefined: TL101
            have = levels_before(model, e.name, i)
            if "register" in have or (shared_ok and "shared" in have):
                continue
            where = "shared memory" if "shared" in have else "global memory"
            allowed = "registers or shared memory (sm_90)" if shared_ok else "registers"
            if "shared" in have:
                allowed += " (only sm_90's wgmma reads operands from shared memory)"
            msg = f"GEMM operand `{e.name}` is in {where}; it must be in {allowed}"
            fixes: tuple[Fix, ...] = ()
            if "shared" in have:
                if lines is None:
                    lines = lines_of(document)
                line = stmt.range.start.line
                text = f"{indent_of(lines, line)}Copy {e.name} from shared to register"
                fixes = insert_line_fix(f"Insert `Copy {e.name} from shared to register`", line, text)
                msg += f": add `Copy {e.name} from shared to register` before the GEMM"
            else:
                msg += ": copy it to shared memory and then to registers first"
            yield make("TL201", e.range, msg, fixes=fixes)
