"""TL203/TL204: GEMM operand shapes agree on the reduction dimension, under one explicit convention.

`Compute GEMM A, B and get C` with A = (M, K) always contracts A's last dimension. B is accepted in
either orientation and the shapes decide which:
- K equals B's last dimension and not its first: B is given as (N, K) and the GEMM is A·Bᵀ (Q·Kᵀ with
  Q (BM, d), K (BN, d));
- K equals B's first dimension and not its last: B is (K, N) and the GEMM is A·B (P·V with P (BM, BN),
  V (BN, d_v));
- K equals both in value (e.g. BN == d = 128): the names decide when exactly one of B's dimensions is
  spelled as A's last (Q (BM, d) against K (BN, d): `d` is the reduction, so Q·Kᵀ), since a tile size
  named twice is one quantity. Otherwise the shapes cannot decide; TL204 says so and names the
  convention assumed from the attention pattern: an A operand that is a GEMM result (layout MMA_C or
  MMA_A) means P·V, so B is (K, N); otherwise Q·Kᵀ, so B is (N, K);
- K equals neither: TL203.
A result with a declared register shape must be (M, N).
"""

from __future__ import annotations

from collections.abc import Iterator

from tl_language import syntax as ast
from tl_language.diagnostics import Diagnostic, make
from tl_language.facts import Dim, dim_eq, layouts, operand_shape, shape_text
from tl_language.model import Model
from tl_language.ops import op
from tl_language.source import Range


def orientation(
    a: list[Dim], b: list[Dim], a_is_product: bool
) -> tuple[str, Dim | None, bool]:
    """('transposed' | 'normal' | 'mismatch' | 'unknown', N, ambiguous) for `GEMM A, B`."""
    k = a[-1]
    last, first = dim_eq(k, b[-1]), dim_eq(k, b[0])
    if last is None or first is None:
        return "unknown", None, False
    if last and not first:
        return "transposed", b[0], False
    if first and not last:
        return "normal", b[-1], False
    if first and last:
        named_last, named_first = k.text == b[-1].text, k.text == b[0].text
        if named_last != named_first:
            return ("transposed", b[0], False) if named_last else ("normal", b[-1], False)
        return ("normal", b[-1], True) if a_is_product else ("transposed", b[0], True)
    return "mismatch", None, False


def check(document: ast.Document, model: Model) -> Iterator[Diagnostic]:
    before = layouts(model)
    for i, stmt in enumerate(model.statements):
        if not isinstance(stmt, ast.ComputeStmt) or stmt.op is None or len(stmt.args) != 2:
            continue
        spec = op(stmt.op.name)
        if spec is None or spec.name != "GEMM":
            continue
        ea, eb = stmt.args
        if not isinstance(ea, ast.Name) or not isinstance(eb, ast.Name):
            continue
        a, b = operand_shape(model, ea.name, i), operand_shape(model, eb.name, i)
        if a is None or b is None:
            continue
        span = Range(ea.range.start, eb.range.end)
        if len(a) != 2 or len(b) != 2:
            yield make("TL203", span,
                       f"GEMM operands are 2-D tiles; `{ea.name}` is {shape_text(a)}, "
                       f"`{eb.name}` is {shape_text(b)}")
            continue
        product = before.get(id(stmt), {}).get(ea.name) in ("MMA_C", "MMA_A")
        kind, n, ambiguous = orientation(a, b, product)
        if kind == "mismatch":
            yield make("TL203", span,
                       f"`GEMM {ea.name}, {eb.name}` contracts {ea.name}'s last dimension ({a[-1]}), but "
                       f"{eb.name} is {shape_text(b)}: neither dimension matches; B must be "
                       f"(N, {a[-1].text}) for A·Bᵀ or ({a[-1].text}, N) for A·B")
            continue
        if kind == "unknown" or n is None:
            continue
        if ambiguous:
            how = (f"{eb.name} as (K, N), i.e. {ea.name}·{eb.name} (P·V, because {ea.name} is a GEMM result)"
                   if kind == "normal" else
                   f"{eb.name} as (N, K), i.e. {ea.name}·{eb.name}ᵀ (Q·Kᵀ)")
            yield make("TL204", span,
                       f"{ea.name}'s last dimension ({a[-1]}) equals both dimensions of {eb.name} "
                       f"{shape_text(b)}, so the shapes cannot tell which operand is transposed; assuming "
                       f"{how}. Spell the reduction dimension as in {ea.name} (or make the tile sizes "
                       f"differ) to let the checker verify it")
        yield from _result(model, stmt, i, a[0], n)


def _result(model: Model, stmt: ast.ComputeStmt, i: int, m: Dim, n: Dim) -> Iterator[Diagnostic]:
    if stmt.result is None:
        return
    r = operand_shape(model, stmt.result.name, i + 1)
    if r is None or len(r) != 2:
        return
    if dim_eq(r[0], m) is False or dim_eq(r[1], n) is False:
        yield make("TL203", stmt.result.range,
                   f"`{stmt.result.name}` is {shape_text(r)} but this GEMM produces ({m}, {n})")
