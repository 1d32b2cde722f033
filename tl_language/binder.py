"""Walk the syntax tree once and bind names: params, header facts, tensors and where each one lives.

Binding records facts only; every rule about those facts lives in `tl_language/checks/`.
"""

from __future__ import annotations

from tl_language import gpu
from tl_language import syntax as ast
from tl_language.model import Model, Param, Placement, ScalarDecl, Tensor


def _tensor(model: Model, ident: ast.Ident) -> Tensor:
    t = model.tensors.get(ident.name)
    if t is None:
        t = Tensor(ident.name, ident)
        model.tensors[ident.name] = t
    return t


def build_model(doc: ast.Document) -> Model:
    model = Model()
    model.statements = doc.walk()
    mask_seen = False  # like Target and Dtype, the first valid Mask applies (a second one is TL052)
    for stmt in model.statements:
        if isinstance(stmt, ast.KernelStmt) and stmt.name and model.kernel_name is None:
            model.kernel_name = stmt.name.name
        elif isinstance(stmt, ast.TargetStmt) and stmt.arch and not model.target_explicit:
            arch = gpu.target(stmt.arch.name)
            if arch is not None:
                model.target, model.target_explicit = arch, True
        elif isinstance(stmt, ast.DtypeStmt) and stmt.dtype and not model.dtype_explicit:
            if stmt.dtype.name.lower() in gpu.DTYPES:
                model.dtype, model.dtype_explicit = stmt.dtype.name.lower(), True
        elif isinstance(stmt, ast.ParamStmt) and stmt.name and stmt.name.name not in model.params:
            hole = isinstance(stmt.value, ast.Hole) or stmt.value is None
            value = None if hole else model.evaluate(stmt.value)
            model.params[stmt.name.name] = Param(stmt.name.name, stmt.name, value, hole, stmt)
            model.is_sketch |= isinstance(stmt.value, ast.Hole)
        elif isinstance(stmt, ast.ScalarStmt) and stmt.name and stmt.name.name not in model.scalars:
            value, real = _constant(stmt.value)
            model.scalars[stmt.name.name] = ScalarDecl(stmt.name.name, stmt.name, value, real, stmt)
        elif isinstance(stmt, ast.MaskStmt) and stmt.kind and not mask_seen:
            kind = stmt.kind.name.lower()
            if kind not in ("none", "causal", "window"):
                continue  # TL053
            mask_seen = True
            model.mask = kind
            if kind == "window" and len(stmt.args) == 2:
                model.window = (model.evaluate(stmt.args[0]), model.evaluate(stmt.args[1]))
        elif isinstance(stmt, ast.ForStmt):
            model.loops.append(stmt)
        elif isinstance(stmt, ast.AllocateStmt) and stmt.name and stmt.level:
            t = _tensor(model, stmt.name)
            level = stmt.level.name.lower()
            t.placements.setdefault(level, Placement(level, stmt, stmt.shape))
        elif isinstance(stmt, ast.CopyStmt) and stmt.name:
            model.is_sketch |= stmt.tile is None and _src(stmt) == "global"
            target_ident = stmt.alias or stmt.name
            if stmt.dst is not None:
                t = _tensor(model, target_ident)
                level = stmt.dst.name.lower()
                tile = stmt.tile if stmt.tile is not None else _inherit_tile(model, stmt)
                t.placements.setdefault(level, Placement(level, stmt, tile))
            if stmt.name.name in model.tensors:
                model.tensors[stmt.name.name].references.append(stmt.name.range)
        elif isinstance(stmt, ast.ComputeStmt) and stmt.result is not None:
            _reference_args(model, stmt.args)
            t = _tensor(model, stmt.result)
            if t.definition is not stmt.result:
                t.references.append(stmt.result.range)
            t.placements.setdefault("register", Placement("register", stmt, None))
            if stmt.op is not None and stmt.op.name.lower() == "gemm":
                t.layout = "MMA_C"
                t.produced_by_gemm = stmt
        elif isinstance(stmt, ast.ComputeStmt):
            _reference_args(model, stmt.args)
        elif isinstance(stmt, ast.ReshapeStmt) and stmt.name:
            reshaped = model.tensors.get(stmt.name.name)
            if reshaped is not None:
                reshaped.references.append(stmt.name.range)
                if stmt.dst_layout:
                    reshaped.layout = stmt.dst_layout[0].name.upper()
    return model


def _constant(e: ast.Expr | None) -> tuple[float | int | None, bool]:
    """A Scalar's default: a number, optionally negated; (None, …) for anything else (TL126)."""
    sign = 1
    while isinstance(e, ast.Unary | ast.Paren) and (isinstance(e, ast.Paren) or e.op == "-"):
        if isinstance(e, ast.Unary):
            sign, e = -sign, e.operand
        else:
            e = e.inner
    if isinstance(e, ast.Real):
        return sign * e.value, True
    if isinstance(e, ast.Num):
        return sign * e.value, False
    return None, False


def _reference_args(model: Model, args: list[ast.Expr]) -> None:
    for e in args:
        for n in ast.expr_names(e):
            t = model.tensors.get(n.name)
            if t is not None:
                t.references.append(n.range)


def _src(stmt: ast.CopyStmt) -> str | None:
    return stmt.src.name.lower() if stmt.src else None


def _inherit_tile(model: Model, stmt: ast.CopyStmt) -> list[ast.Expr] | None:
    """`Copy Q from shared to register` keeps the tile Q had in shared memory.

    A copy out of global memory never inherits: global holds the whole tensor, and a global copy without
    a tile is a sketch whose tile is still unknown (TL451).
    """
    if stmt.name is None or stmt.src is None or stmt.src.name.lower() == "global":
        return None
    t = model.tensors.get(stmt.name.name)
    if t is None:
        return None
    p = t.placements.get(stmt.src.name.lower())
    return p.tile if p else None
