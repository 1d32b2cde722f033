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
    Op("Softmax", 1, 1, False, True,
       "Online softmax of the score tile in place: updates the running row max and row sum "
       "(`rowmax`, `rowsum`) and rescales the output accumulator by exp(old max − new max)."),
    Op("Multiply", 2, 2, True, True, "Elementwise product; a scalar operand (e.g. `scale`) broadcasts."),
    Op("Divide", 2, 2, True, True,
       "Elementwise quotient; a row vector operand (e.g. `rowsum`) broadcasts along the rows."),
    Op("Add", 2, 2, True, True, "Elementwise sum; a scalar or row vector operand broadcasts."),
    Op("Subtract", 2, 2, True, True, "Elementwise difference; a scalar or row vector operand broadcasts."),
    Op("Exp", 1, 1, True, True, "Elementwise exponential (computed as exp2 with a log2(e) factor)."),
    Op("Max", 1, 2, True, True,
       "With one operand: the row maximum of a tile; with two: the elementwise maximum."),
    Op("Sum", 1, 1, True, True, "Row sum of a tile."),
    Op("Mask", 1, 1, False, True,
       "Applies the document's `Mask` (causal or window) to the score tile: masked entries become −∞."),
    Op("Cast", 1, 1, True, True,
       "Converts a register tile from fp32 to the input dtype (e.g. P before the second GEMM)."),
]

OPS: dict[str, Op] = {op.name.lower(): op for op in _TABLE}


def op(name: str) -> Op | None:
    """The operation named `name`, case-insensitively."""
    return OPS.get(name.lower())
