"""Recognise the FlashAttention forward pattern, with its variant regions, in a checked TL model.

Roles come from the data flow, not from names: the GEMM that produces a tensor inside the loop is Q·Kᵀ
(its operands are Q and K, its result S), the GEMM that accumulates is P·V (operands S and V, result the
output accumulator), and the register → global copy of that accumulator names O. Between the two GEMMs,
`Compute … and get new S` statements modify the scores (the score region), `Compute Mask S[, cond]`
masks them, and `Compute Softmax S[, sink]` normalises them (without it the scores are the weights:
sigmoid or ReLU attention). Global tensors that no Copy moves are side tensors, read inside those
expressions. Every statement gets a step kind; anything else is TL501 on that statement, saying what the
kernels support.

The checker runs this on every complete document and the translator builds its plan from the same
match, so `tl check` and `tl build` agree on which programs have a kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tl_language import syntax as ast
from tl_language.diagnostics import Diagnostic, make
from tl_language.model import Model
from tl_language.ops import SCORE_OPS
from tl_language.source import Range


class PatternError(Exception):
    """The statements do not form a forward the kernels implement; TL501 diagnostics on the statements."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        super().__init__(diagnostics[0].message if diagnostics else "not an attention forward")
        self.diagnostics = diagnostics


def unsupported(range: Range, message: str) -> Diagnostic:
    return make("TL501", range, message)


TranslateError = PatternError  # the raise sites below read as the translator's refusals

# Step kinds in the order the attention pattern runs them.
STEP_KINDS = (
    "alloc_q",
    "alloc_k",
    "alloc_v",
    "alloc_o",
    "alloc_side",
    "load_q",
    "q_to_reg",
    "alloc_s",
    "alloc_acc_o",
    "loop",
    "load_k",
    "k_to_reg",
    "gemm_qk",
    "scale",
    "score_mod",
    "mask",
    "mask_expr",
    "softmax",
    "reshape",
    "load_v",
    "v_to_reg",
    "gemm_pv",
    "normalize",
    "output_scale",
    "store_o",
)
REQUIRED = (
    "load_q",
    "loop",
    "load_k",
    "gemm_qk",
    "reshape",
    "load_v",
    "gemm_pv",
    "store_o",
)
# Steps of the score region: between Q·Kᵀ and the Softmax (or the Reshape without one), in source order.
REGION = ("scale", "score_mod", "mask", "mask_expr")
# Steps that may appear more than once.
REPEATABLE = ("alloc_side", "score_mod", "mask", "mask_expr", "output_scale")
# (earlier, later) pairs that must hold in source order: data must arrive before it is used.
ORDER = (
    ("load_q", "q_to_reg"),
    ("q_to_reg", "loop"),
    ("load_q", "loop"),
    ("load_k", "k_to_reg"),
    ("k_to_reg", "gemm_qk"),
    ("load_k", "gemm_qk"),
    ("softmax", "reshape"),
    ("reshape", "gemm_pv"),
    ("load_v", "v_to_reg"),
    ("v_to_reg", "gemm_pv"),
    ("load_v", "gemm_pv"),
    ("loop", "normalize"),
    ("normalize", "store_o"),
)
PATTERN_HELP = (
    "the kernels implement the FlashAttention forward: Q/K/V/O in global, `Copy Q (BM, d) … from "
    "global to shared`, one `for j = 0: seqlen_k / BN` loop with K and V tiles, `Compute GEMM Q, K and get "
    "S`, score statements (`Compute Multiply S, scale and get new S`, `Compute Tanh S and get new S`, "
    "`Compute Mask S, kv_idx <= q_idx`, …), `Compute Softmax S`, the MMA_C → MMA_A `Reshape`, `Compute "
    "GEMM S, V and accumulate acc_o`, then `Compute Divide acc_o, rowsum` and the copy of acc_o to global "
    "as O"
)


@dataclass
class Match:
    names: dict[str, str] = field(default_factory=dict)  # role → TL name
    steps: list[tuple[str, ast.Stmt]] = field(default_factory=list)

    def stmt(self, kind: str) -> ast.Stmt:
        return next(s for k, s in self.steps if k == kind)

    def find(self, kind: str) -> ast.Stmt | None:
        return next((s for k, s in self.steps if k == kind), None)

    def tile(self, role: str) -> list[ast.Expr | None]:
        kind = {"q": "load_q", "k": "load_k", "v": "load_v", "o": "store_o"}[role]
        s = self.find(kind)
        tile = s.tile if isinstance(s, ast.CopyStmt) else None
        return list(tile) if tile is not None and len(tile) == 2 else [None, None]


def _name(e: ast.Expr | None) -> str | None:
    return e.name if isinstance(e, ast.Name) else None


def _op(s: ast.ComputeStmt) -> str:
    return s.op.name.lower() if s.op else ""


def _level(i: ast.Ident | None) -> str:
    return i.name.lower() if i else ""


def match_attention(model: Model) -> Match:
    errors: list[Diagnostic] = []
    top_loops = [s for s in model.loops if s in model.statements and _is_top(model, s)]
    if len(model.loops) != 1 or len(top_loops) != 1:
        where = model.loops[1].range if len(model.loops) > 1 else _first_body_range(model)
        raise TranslateError(
            [
                unsupported(
                    where,
                    (f"found {len(model.loops)} `for` loops; {PATTERN_HELP} (exactly one loop, not nested)"),
                )
            ]
        )
    loop = top_loops[0]
    in_loop = {id(s) for s in loop.body}
    gemms = [s for s in model.statements if isinstance(s, ast.ComputeStmt) and _op(s) == "gemm"]
    qk = [g for g in gemms if g.mode == "get" and id(g) in in_loop]
    pv = [g for g in gemms if g.mode == "accumulate" and id(g) in in_loop]
    if len(qk) != 1 or len(pv) != 1 or len(gemms) != 2:
        extra = next((g for g in gemms if g not in qk[:1] + pv[:1]), None)
        raise TranslateError(
            [
                unsupported(
                    (extra or loop).range,
                    (
                        f"found {len(gemms)} GEMMs; {PATTERN_HELP} (one `get` GEMM and one "
                        f"`accumulate` GEMM in the loop)"
                    ),
                )
            ]
        )
    q, k = (_name(a) for a in ([*qk[0].args, None, None])[:2])
    s, v = (_name(a) for a in ([*pv[0].args, None, None])[:2])
    s_qk = qk[0].result.name if qk[0].result else None
    acc = pv[0].result.name if pv[0].result else None
    if not (q and k and s and v and acc) or s != s_qk:
        raise TranslateError(
            [
                unsupported(
                    pv[0].range,
                    (
                        f"the accumulating GEMM must read the scores the first GEMM produced "
                        f"(`{s_qk}`); {PATTERN_HELP}"
                    ),
                )
            ]
        )
    m = Match(names={"q": q, "k": k, "v": v, "s": s, "acc_o": acc})
    loop_var = loop.var.name if loop.var else None
    side = set(model.side_tensors())

    for stmt in model.statements:
        if isinstance(stmt, HEADERS):
            continue
        kind = _classify(stmt, m.names, id(stmt) in in_loop, stmt is loop, side)
        if isinstance(kind, str):
            m.steps.append((kind, stmt))
        else:
            errors.append(unsupported(stmt.range, f"{kind[0]}; {PATTERN_HELP}"))
    if errors:
        raise TranslateError(errors)
    store = m.find("store_o")
    if isinstance(store, ast.CopyStmt) and store.alias:
        m.names["o"] = store.alias.name
    _check_steps(m, loop, errors)
    _check_coordinates(m, loop_var, errors)
    _check_loop(model, loop, errors)
    if errors:
        raise TranslateError(errors)
    return m


HEADERS = (ast.KernelStmt, ast.TargetStmt, ast.DtypeStmt, ast.ParamStmt, ast.ScalarStmt, ast.MaskStmt)


def _is_top(model: Model, loop: ast.ForStmt) -> bool:
    return not any(loop in other.body for other in model.loops if other is not loop)


def _first_body_range(model: Model) -> ast.Range:
    body = [s for s in model.statements if not isinstance(s, HEADERS)]
    return (body or model.statements)[0].range if (body or model.statements) else ast.Range.of(0, 0, 0)


def _classify(
    stmt: ast.Stmt, n: dict[str, str], in_loop: bool, is_loop: bool, side: set[str]
) -> str | tuple[str]:
    roles = {v: k for k, v in n.items()}
    if is_loop:
        return "loop"
    if isinstance(stmt, ast.AllocateStmt):
        name, level = (stmt.name.name if stmt.name else ""), _level(stmt.level)
        role = roles.get(name)
        if level == "global" and not in_loop and name in side:
            return "alloc_side"
        if level == "global" and not in_loop:
            return f"alloc_{role}" if role in ("q", "k", "v") else "alloc_o"
        if level == "register" and role in ("s", "acc_o"):
            return "alloc_s" if role == "s" else "alloc_acc_o"
        return (
            f"`Allocate {name} in {level}` has no role in the kernel (only Q/K/V/O in global and the "
            "two register accumulators are allocated explicitly)",
        )
    if isinstance(stmt, ast.CopyStmt):
        name = stmt.name.name if stmt.name else ""
        role, path = roles.get(name), (_level(stmt.src), _level(stmt.dst))
        want_loop = role in ("k", "v")
        if path == ("global", "shared") and role in ("q", "k", "v") and in_loop == want_loop:
            return f"load_{role}"
        if path == ("shared", "register") and role in ("q", "k", "v") and in_loop == want_loop:
            return f"{role}_to_reg"
        if path == ("register", "global") and role == "acc_o" and not in_loop and stmt.alias:
            return "store_o"
        place = "inside" if in_loop else "outside"
        return (f"`Copy {name}` from {path[0]} to {path[1]} {place} the loop is not a step of the pattern",)
    if isinstance(stmt, ast.ComputeStmt):
        op, args = _op(stmt), [_name(a) for a in stmt.args]
        if op == "gemm":
            return "gemm_qk" if stmt.mode == "get" else "gemm_pv"
        result = stmt.result.name if stmt.result else None
        on_s = in_loop and result == n["s"] and stmt.mode == "get_new"
        if op == "multiply" and on_s and args == [n["s"], "scale"]:
            return "scale"
        if op in SCORE_OPS and on_s:
            return "score_mod"
        if op == "mask" and in_loop and args[:1] == [n["s"]] and stmt.mode == "inplace":
            return "mask_expr" if len(args) == 2 else "mask"
        if op == "softmax" and in_loop and args[:1] == [n["s"]] and stmt.mode == "inplace":
            return "softmax"
        if op == "divide" and not in_loop and args == [n["acc_o"], "rowsum"]:
            return "normalize"
        on_o = not in_loop and result == n["acc_o"] and stmt.mode == "get_new" and args[:1] == [n["acc_o"]]
        if op in ("multiply", "divide") and on_o and len(args) == 2:
            return "output_scale"
        return (
            f"`Compute {stmt.op.name if stmt.op else '?'}` on {', '.join(a or '?' for a in args)} "
            f"{'inside' if in_loop else 'outside'} the loop is not a step of the pattern (the scores "
            f"`{n['s']}` are modified in the loop with `and get new {n['s']}`, masked in place; after the "
            f"loop `{n['acc_o']}` is divided by `rowsum` or scaled with `and get new {n['acc_o']}`)",
        )
    if isinstance(stmt, ast.ReshapeStmt):
        name = stmt.name.name if stmt.name else ""
        if name == n["s"] and in_loop:
            return "reshape"
        return (f"`Reshape {name}`: only the scores S are reshaped (MMA_C → MMA_A, inside the loop)",)
    return ("this line is not a statement the translator knows",)


def _check_steps(m: Match, loop: ast.ForStmt, errors: list[Diagnostic]) -> None:
    seen: dict[str, ast.Stmt] = {}
    for kind, stmt in m.steps:
        if kind in seen and kind not in REPEATABLE:
            errors.append(
                unsupported(
                    stmt.range,
                    (
                        f"a second `{kind}` step (first on line {seen[kind].range.start.line + 1}); "
                        f"each step of the "
                        "attention pattern appears once"
                    ),
                )
            )
        seen.setdefault(kind, stmt)
    for kind in REQUIRED:
        if kind not in seen:
            errors.append(
                unsupported(
                    loop.range if kind != "store_o" else _last(m).range,
                    f"the pattern lacks its `{kind}` step; {PATTERN_HELP}",
                )
            )
    has_softmax = "softmax" in seen
    if has_softmax != ("normalize" in seen):
        stmt = seen.get("softmax") or seen["normalize"]
        errors.append(
            unsupported(
                stmt.range,
                "`Compute Softmax S` in the loop and `Compute Divide acc_o, rowsum` after it go together "
                "(without a Softmax the scores are the weights and acc_o is not divided by a row sum)",
            )
        )
    if has_softmax and "output_scale" in seen:
        errors.append(
            unsupported(
                seen["output_scale"].range,
                "with a Softmax, acc_o is only divided by `rowsum`; scaling it is for kernels without one",
            )
        )
    end = "softmax" if has_softmax else "reshape"
    for kind, stmt in m.steps:
        if kind not in REGION:
            continue
        for before, after in (("gemm_qk", stmt), (stmt, end)):
            first = seen.get(before) if isinstance(before, str) else before
            last = seen.get(after) if isinstance(after, str) else after
            if first is not None and last is not None and first.range.start >= last.range.start:
                errors.append(
                    unsupported(
                        stmt.range,
                        f"statements on the scores run after `Compute GEMM … and get {m.names['s']}` and "
                        f"before the {'Softmax' if has_softmax else 'Reshape'}",
                    )
                )
                break
    for a, b in ORDER:
        if a in seen and b in seen and seen[a].range.start >= seen[b].range.start:
            errors.append(
                unsupported(
                    seen[b].range,
                    (
                        f"this `{b}` step comes before its `{a}` step (line "
                        f"{seen[a].range.start.line + 1}); data "
                        "must arrive before it is used"
                    ),
                )
            )


def _last(m: Match) -> ast.Stmt:
    return m.steps[-1][1]


def _check_coordinates(m: Match, loop_var: str | None, errors: list[Diagnostic]) -> None:
    want = {"load_q": "block_m", "store_o": "block_m", "load_k": loop_var, "load_v": loop_var}
    for kind, name in want.items():
        s = m.find(kind)
        if not isinstance(s, ast.CopyStmt) or s.coordinate is None:
            continue
        got = _name(s.coordinate.value)
        if got != name:
            errors.append(
                unsupported(
                    s.coordinate.range,
                    (
                        f"coordinate `{ast.expr_text(s.coordinate.value)}`: this tile is indexed by `{name}` "
                        f"({'the block of query rows' if name == 'block_m' else 'the loop variable'})"
                    ),
                )
            )


def _check_loop(model: Model, loop: ast.ForStmt, errors: list[Diagnostic]) -> None:
    """The loop walks all key blocks: from 0 to seqlen_k / BN (the kernel rounds up and masks the tail)."""
    start = model.evaluate(loop.start)
    stop_names = {n.name for n in ast.expr_names(loop.stop)}
    if start != 0 or "seqlen_k" not in stop_names:
        errors.append(
            unsupported(
                loop.range,
                (
                    f"`for {loop.var.name if loop.var else '?'} = {ast.expr_text(loop.start)}: "
                    f"{ast.expr_text(loop.stop)}`: the key loop must run from 0 to seqlen_k / BN "
                    f"(every key block; "
                    "causal and window masks skip blocks themselves)"
                ),
            )
        )
