"""TL301/TL302/TL305/TL306/TL307, TL308, TL309: the numbers of an attention kernel are ones the translator's
kernels take, so `tl check` refuses what `tl build` would.

The rules themselves are `tl_language.resources.kernel_limits` (the mma.sync family's and the sm_90
kernel's limits, stated once); this module finds the numbers the way the translator's plan does — from the
tiles of the attention pattern's copies (`tl_language.pattern`) and the Params with their defaults — and
reports each broken rule on what sets the number: the Param a tile is written with, else the tile itself.
A limit an older rule already reports at the same place (TL301 on `Param BM`, TL302 on `Param d`, …) is
not reported twice. Sketches (holes, untiled copies) are left to the sketch hints: their numbers are not
known yet.

Two rules are the plan's own, not a backend's: every tile of the pattern's global copies is a number fixed
at compile time (TL308: not a runtime length such as `seqlen_q`), and the output tile agrees with the input
tiles (TL309: O's rows are Q's, O's columns are V's; K's and V's tiles are TL203's, through the GEMMs).
"""

from __future__ import annotations

from collections.abc import Iterator

from tl_language import syntax as ast
from tl_language.checks import dtypes, gemm_shapes, head_dims, params, tiles
from tl_language.checks._location import header_range
from tl_language.diagnostics import Diagnostic, make
from tl_language.model import BUILTINS, Model
from tl_language.pattern import Match, PatternError, match_attention
from tl_language.resources import kernel_limits, kernel_numbers
from tl_language.source import Range

# The tile entries the plan reads: (key, role, index in the 2-D tile, what it is).
_TILES = (
    ("q_rows", "q", 0, "BM (the Q tile's rows)"),
    ("q_cols", "q", 1, "the Q tile's head dimension"),
    ("k_rows", "k", 0, "BN (the K tile's rows)"),
    ("k_cols", "k", 1, "the K tile's head dimension"),
    ("v_rows", "v", 0, "the V tile's rows"),
    ("v_cols", "v", 1, "the V tile's head dimension"),
    ("o_rows", "o", 0, "the O tile's rows"),
    ("o_cols", "o", 1, "the O tile's head dimension"),
)
_STEP = {"q": "load_q", "k": "load_k", "v": "load_v", "o": "store_o"}


def attention_match(model: Model) -> Match | None:
    """The attention pattern of `model`, once per analysis (None: not the pattern; TL501 is its rule)."""
    if "attention_match" not in model.cache:
        try:
            model.cache["attention_match"] = match_attention(model)
        except PatternError:
            model.cache["attention_match"] = None
        except (AttributeError, KeyError, IndexError, TypeError, ValueError, StopIteration):
            # The pattern is written for checked documents (the translator's and `pattern_check`'s callers
            # run it on error-free ones); this rule runs beside the others, so a document with errors
            # elsewhere may hold half-parsed statements it does not expect. Then there are no kernel
            # numbers to check, and `analyze` still never raises.
            model.cache["attention_match"] = None
    got = model.cache["attention_match"]
    return got if isinstance(got, Match) else None


def check(document: ast.Document, model: Model) -> Iterator[Diagnostic]:
    if model.is_sketch or not model.loops:
        return
    m = attention_match(model)
    if m is None:
        return
    exprs: dict[str, ast.Expr | None] = {}
    values: dict[str, int | None] = {}
    for key, role, i, _ in _TILES:
        exprs[key] = m.tile(role)[i]
        values[key] = model.evaluate(exprs[key])
    runtime = list(_runtime_tiles(model, m, exprs, values))
    yield from runtime
    if runtime:
        return
    yield from _mismatches(document, model, m, exprs, values)
    bm, bn, dqk, dv = (values[k] for k in ("q_rows", "k_rows", "q_cols", "v_cols"))
    if bm is None or bn is None or dqk is None or dv is None:
        return  # an undefined or invalid Param: TL101/TL307 say so
    numbers = kernel_numbers(model, bm, bn, dqk, dv)
    if numbers is None:
        return
    seen = _already_reported(document, model)
    for limit in kernel_limits(numbers):
        rng = _where(document, model, m, exprs, limit.keys)
        if (limit.code, rng) in seen:
            continue
        seen.add((limit.code, rng))
        yield make(limit.code, rng, limit.message)


def _runtime_tiles(
    model: Model, m: Match, exprs: dict[str, ast.Expr | None], values: dict[str, int | None]
) -> Iterator[Diagnostic]:
    """TL308: a tile entry that names a runtime value (a builtin or the loop variable) has no number."""
    loop_vars = {lp.var.name for lp in model.loops if lp.var}
    for key, _role, _i, what in _TILES:
        e = exprs[key]
        if e is None or values[key] is not None:
            continue
        runtime = [
            n.name
            for n in ast.expr_names(e)
            if n.name not in model.params and (n.name in BUILTINS or n.name in loop_vars)
        ]
        if runtime:
            yield make(
                "TL308",
                e.range,
                f"{what} is `{ast.expr_text(e)}`, but `{runtime[0]}` is known only when the kernel runs; a "
                "tile is a number fixed when it is compiled: use a Param such as BM or BN",
            )


def _mismatches(
    document: ast.Document,
    model: Model,
    m: Match,
    exprs: dict[str, ast.Expr | None],
    values: dict[str, int | None],
) -> Iterator[Diagnostic]:
    """TL309: the tiles the plan requires to agree (`translator/plan.py` `_agree`). K's head dimension and
    V's rows are checked through the GEMMs (TL203); they are reported here only where TL203 is silent."""
    gemm_reported = any(d.code == "TL203" for d in gemm_shapes.check(document, model))
    rules = [
        ("o_rows", "q_rows", "O's tile rows must equal Q's (BM)"),
        ("o_cols", "v_cols", "O's head dimension must equal V's"),
    ]
    if not gemm_reported:
        rules += [
            ("k_cols", "q_cols", "K's head dimension must equal Q's"),
            ("v_rows", "k_rows", "V's tile rows must equal K's (BN)"),
        ]
    for key, want, what in rules:
        got, expected = values[key], values[want]
        e = exprs[key]
        if e is None or got is None or expected is None or got == expected:
            continue
        yield make("TL309", e.range, f"{what}: `{ast.expr_text(e)}` is {got}, expected {expected}")


def _already_reported(document: ast.Document, model: Model) -> set[tuple[str, Range]]:
    """(code, range) of what the resource rules say on their own, so a limit is reported once."""
    out: set[tuple[str, Range]] = set()
    for rule in (tiles.check, head_dims.check, dtypes.check, params.check):
        out.update((d.code, d.range) for d in rule(document, model))
    return out


def _where(
    document: ast.Document, model: Model, m: Match, exprs: dict[str, ast.Expr | None], keys: tuple[str, ...]
) -> Range:
    """The first of `keys` the document writes: a tile entry (on the Param it names, if it names one), a
    Param's value, or the Dtype."""
    for key in keys:
        if key in exprs:
            e = exprs[key]
            if isinstance(e, ast.Name) and e.name in model.params:
                return _param_value(model, e.name)
            if e is not None:
                return e.range
            stmt = m.find(_STEP[key[0]])
            if stmt is not None:
                return stmt.range
        elif key == "dtype":
            stmt = next((s for s in document.statements if isinstance(s, ast.DtypeStmt) and s.dtype), None)
            if stmt is not None and stmt.dtype is not None:
                return stmt.dtype.range
        elif key in model.params:
            return _param_value(model, key)
    return header_range(document) or Range.of(0, 0, 0)


def _param_value(model: Model, name: str) -> Range:
    p = model.params[name]
    return p.stmt.value.range if p.stmt.value is not None else p.ident.range
