"""The operations `Compute` knows: canonical spelling, operand count, whether a result is required, meaning.

One table used by the checker (TL107/TL108), the formatter (canonical case), hover and the translator.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Op:
    name: str  # canonical spelling, e.g. "GEMM"
    min_args: int
    max_args: int
    needs_result: bool  # False: may run in place (`Compute Softmax S`)
    elementwise: bool  # the result keeps the fragment layout of its first tensor operand
    meaning: str

    @property
    def arity(self) -> str:
        if self.min_args == self.max_args:
            return f"{self.min_args} operand{'s' if self.min_args != 1 else ''}"
        return f"{self.min_args} to {self.max_args} operands"


_TABLE = [
    Op("GEMM", 2, 2, True, False,
       "Tensor-core matrix multiply of two register (or, on sm_90, shared) tiles into an fp32 accumulator. "
       "`GEMM A, B` contracts A's last dimension with the dimension of B that matches it: with Q (BM, d) "
       "and K (BN, d) it computes Q·Kᵀ (B given as (N, K)); with P (BM, BN) and V (BN, d_v) it computes "
       "P·V (B given as (K, N)). `and get X` overwrites X, `and accumulate X` adds to X."),
    Op("Softmax", 1, 2, False, True,
       "Online softmax of the score tile in place: updates the running row max and row sum "
       "(`rowmax`, `rowsum`) and rescales the output accumulator by exp(old max − new max). "
       "`Compute Softmax S, sinks[head_idx]` adds a learnable sink: one more logit per head in every "
       "row's denominator (gpt-oss). Without a Softmax the scores are the weights themselves (sigmoid or "
       "ReLU attention)."),
    Op("Multiply", 2, 2, True, True, "Elementwise product; a scalar operand (e.g. `scale`) broadcasts."),
    Op("Divide", 2, 2, True, True,
       "Elementwise quotient; a row vector operand (e.g. `rowsum`) broadcasts along the rows."),
    Op("Add", 2, 2, True, True, "Elementwise sum; a scalar or row vector operand broadcasts."),
    Op("Subtract", 2, 2, True, True, "Elementwise difference; a scalar or row vector operand broadcasts."),
    Op("Exp", 1, 1, True, True, "Elementwise exponential (computed as exp2 with a log2(e) factor)."),
    Op("Exp2", 1, 1, True, True, "Elementwise 2^x."),
    Op("Log", 1, 1, True, True, "Elementwise natural logarithm."),
    Op("Tanh", 1, 1, True, True, "Elementwise hyperbolic tangent (softcapping: `cap · tanh(S / cap)`)."),
    Op("Sigmoid", 1, 1, True, True, "Elementwise 1 / (1 + exp(−x)) (sigmoid attention)."),
    Op("Abs", 1, 1, True, True, "Elementwise absolute value."),
    Op("Relu", 1, 1, True, True, "Elementwise max(x, 0) (ReLU attention)."),
    Op("Min", 2, 2, True, True, "Elementwise minimum of two operands."),
    Op("Max", 1, 2, True, True,
       "With one operand: the row maximum of a tile; with two: the elementwise maximum."),
    Op("Where", 3, 3, True, True,
       "`Where cond, a, b`: a where the boolean expression cond holds, else b, elementwise."),
    Op("Sum", 1, 1, True, True, "Row sum of a tile."),
    Op("Mask", 1, 2, False, True,
       "`Compute Mask S` applies the document's `Mask` header (causal or window); `Compute Mask S, cond` "
       "keeps the scores where the boolean expression `cond` holds (e.g. `kv_idx <= q_idx`), the rest "
       "become −∞ (0 without a Softmax). Several masks keep what all of them keep; the kernels skip key "
       "blocks a mask empties and run blocks it keeps whole without the per-score test."),
    Op("Cast", 1, 1, True, True,
       "Converts a register tile from fp32 to the input dtype (e.g. P before the second GEMM)."),
]

OPS: dict[str, Op] = {op.name.lower(): op for op in _TABLE}


def op(name: str) -> Op | None:
    """The operation named `name`, case-insensitively."""
    return OPS.get(name.lower())


@dataclass(frozen=True, slots=True)
class Function:
    """A function inside a score or mask expression: `tanh(S / cap)`, `where(c, a, b)`."""

    name: str
    arity: int
    kind: str  # "float": real in, real out; "numeric": keeps int or real; "where"
    meaning: str


_FUNCTIONS = [
    Function("tanh", 1, "float", "hyperbolic tangent"),
    Function("sigmoid", 1, "float", "1 / (1 + exp(−x))"),
    Function("exp", 1, "float", "e^x"),
    Function("exp2", 1, "float", "2^x"),
    Function("log", 1, "float", "natural logarithm"),
    Function("abs", 1, "numeric", "absolute value (int or real)"),
    Function("relu", 1, "numeric", "max(x, 0)"),
    Function("min", 2, "numeric", "the smaller of two values"),
    Function("max", 2, "numeric", "the larger of two values"),
    Function("where", 3, "where", "`where(c, a, b)`: a where the boolean c holds, else b"),
]

FUNCTIONS: dict[str, Function] = {f.name: f for f in _FUNCTIONS}

# Compute ops that transform the score tile elementwise (the score region), mapped to the functions
# and operators of expressions; `Mask` and `Softmax` are the mask and normaliser regions.
SCORE_OPS: dict[str, str] = {
    "multiply": "*", "divide": "/", "add": "+", "subtract": "-",
    "tanh": "tanh", "sigmoid": "sigmoid", "exp": "exp", "exp2": "exp2", "log": "log", "abs": "abs",
    "relu": "relu", "min": "min", "max": "max", "where": "where",
}  # fmt: skip
