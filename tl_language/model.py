"""The checked model: what a TL document means, independent of how it was written.

Built from the syntax tree by `build_model`; consumed by the checks, hover, the translator's planner and
the language server. Symbolic sizes (`seqlen_q`, `block_m`) stay symbolic: `evaluate` returns None.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tl_language import gpu
from tl_language import syntax as ast
from tl_language.source import Range

# Names the runtime provides: sequence lengths, the block's coordinates, scalars of the softmax.
BUILTINS: dict[str, str] = {
    "seqlen_q": "number of query rows (runtime)",
    "seqlen_k": "number of key/value rows (runtime)",
    "batch": "batch size (runtime)",
    "heads": "number of query heads (runtime)",
    "heads_kv": "number of key/value heads (runtime; GQA/MQA when smaller than heads)",
    "block_m": "index of this thread block's query tile (grid x)",
    "q_offset": "offset of this (batch, head)'s Q in global memory",
    "kv_offset": "offset of this (batch, kv head)'s K and V in global memory",
    "o_offset": "offset of this (batch, head)'s O in global memory",
    "scale": "softmax scale, 1/sqrt(d_qk) unless the launch overrides it",
    "rowsum": "the running row sum of the online softmax",
    "rowmax": "the running row maximum of the online softmax",
    "lse": "the row log-sum-exp, written beside O",
}

# Index values of score and mask expressions (`Compute … S`, `Compute Mask S, …`, a sink): they exist
# per score, so they are valid only there. `q_idx` is the query row, `kv_idx` the key, both from 0.
INDEX_NAMES: dict[str, str] = {
    "q_idx": "the query row of this score (0 … seqlen_q − 1)",
    "kv_idx": "the key of this score (0 … seqlen_k − 1)",
    "head_idx": "the query head of this score",
    "kv_head_idx": "the key/value head of this score (head_idx / (heads / heads_kv))",
    "batch_idx": "the batch entry of this score",
}


@dataclass(slots=True)
class Param:
    name: str
    ident: Ident
    value: int | None  # None: a `?` hole or a value that does not evaluate
    hole: bool
    stmt: ast.ParamStmt


Ident = ast.Ident


@dataclass(slots=True)
class ScalarDecl:
    """`Scalar cap = 30.0`: a runtime scalar, real when its default is written with a point."""

    name: str
    ident: Ident
    value: float | int | None  # None: the default is not a constant
    is_real: bool
    stmt: ast.ScalarStmt


@dataclass(slots=True)
class Placement:
    """A tensor present at one memory level: where it arrived and with which tile."""

    level: str
    stmt: ast.Stmt
    tile: list[ast.Expr] | None


@dataclass(slots=True)
class Tensor:
    name: str
    definition: ast.Ident
    placements: dict[str, Placement] = field(default_factory=dict)
    # "MMA_C" for a GEMM accumulator, "MMA_A" after a Reshape, None otherwise.
    layout: str | None = None
    produced_by_gemm: ast.ComputeStmt | None = None
    references: list[Range] = field(default_factory=list)

    @property
    def levels(self) -> list[str]:
        return list(self.placements)

    def shape_at(self, level: str) -> list[ast.Expr] | None:
        p = self.placements.get(level)
        return p.tile if p else None


@dataclass(slots=True)
class Model:
    kernel_name: str | None = None
    target: gpu.Target = field(default_factory=lambda: gpu.TARGETS[gpu.DEFAULT_TARGET])
    target_explicit: bool = False
    dtype: str = gpu.DEFAULT_DTYPE
    dtype_explicit: bool = False
    mask: str = "none"  # none | causal | window
    window: tuple[int | None, int | None] = (None, None)
    params: dict[str, Param] = field(default_factory=dict)
    scalars: dict[str, ScalarDecl] = field(default_factory=dict)
    tensors: dict[str, Tensor] = field(default_factory=dict)
    loops: list[ast.ForStmt] = field(default_factory=list)
    statements: list[ast.Stmt] = field(default_factory=list)  # every statement, source order
    is_sketch: bool = False
    # Derived facts computed once per analysis by `tl_language.facts` (statement order, loop nesting,
    # layouts); excluded from comparisons and repr because they are caches, not meaning.
    cache: dict[str, object] = field(default_factory=dict, repr=False, compare=False)

    def evaluate(self, e: ast.Expr | None) -> int | None:
        """Integer value of an expression over the Params; None if symbolic, a hole, or invalid."""
        if e is None or isinstance(e, ast.Hole):
            return None
        if isinstance(e, ast.Num):
            return e.value
        if isinstance(e, ast.Name):
            p = self.params.get(e.name)
            return p.value if p else None
        if isinstance(e, ast.Paren):
            return self.evaluate(e.inner)
        if isinstance(e, ast.Unary):
            v = self.evaluate(e.operand) if e.op == "-" else None
            return -v if v is not None else None
        if not isinstance(e, ast.BinOp) or e.op not in ("+", "-", "*", "/"):
            return None  # reals, calls, subscripts, comparisons: score expressions, not Param arithmetic
        a, b = self.evaluate(e.left), self.evaluate(e.right)
        if a is None or b is None:
            return None
        if e.op == "+":
            return a + b
        if e.op == "-":
            return a - b
        if e.op == "*":
            return a * b
        return a // b if b != 0 and a % b == 0 else None

    def side_tensors(self) -> dict[str, Tensor]:
        """Tensors allocated in global memory that no Copy moves: read element by element inside score,
        mask and sink expressions (ALiBi slopes, document ids, a bias table)."""
        copied = {
            name
            for s in self.statements
            if isinstance(s, ast.CopyStmt)
            for name in (s.name.name if s.name else None, s.alias.name if s.alias else None)
            if name
        }
        return {
            n: t
            for n, t in self.tensors.items()
            if "global" in t.placements
            and isinstance(t.placements["global"].stmt, ast.AllocateStmt)
            and n not in copied
        }

    def shape_values(self, shape: list[ast.Expr] | None) -> list[int | None] | None:
        return None if shape is None else [self.evaluate(e) for e in shape]
