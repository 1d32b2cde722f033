"""The forward skeleton and its regions: what one attention forward computes, as data.

    S      = Q·Kᵀ                            (raw scores `s`, fp32)
    X      = score(s, q_idx, kv_idx, …)       (the score region; the plain kernel's is s · softmax_scale)
    keep   = ∧ masks(q_idx, kv_idx, …)        (the mask region; keys past seqlen_k are never kept)
    softmax normaliser:  P = exp(X − LSE) on kept keys, LSE = log(Σ exp X [+ exp sink])
    none (pointwise):    P = X on kept keys, 0 elsewhere (sigmoid or ReLU attention write their
                         function into the score region)
    O      = (P · V) · output_scale           (output_scale only without softmax; 1 when absent)

Side tensors are row-major float32 or int32 arrays in global memory whose dims are named sizes
(`batch`, `heads`, `heads_kv`, `seqlen_q`, `seqlen_k`) or integers; runtime scalars are kernel arguments
with a default. The backends render the regions; `runner.ir_reference` evaluates the same program in
float32 as the reference every kernel is verified against.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kernel_ir.expr import F32, I32, Const, Expr, Op, Var, from_json, to_json

SIZE_NAMES = ("batch", "heads", "heads_kv", "seqlen_q", "seqlen_k")
TENSOR_DTYPES = {"float32": F32, "int32": I32}


@dataclass(frozen=True, slots=True)
class Scalar:
    name: str
    type: str  # f32 | i32
    default: float | int


@dataclass(frozen=True, slots=True)
class SideTensor:
    name: str
    dims: tuple[str | int, ...]  # SIZE_NAMES or positive integers
    dtype: str  # "float32" | "int32"

    @property
    def type(self) -> str:
        return TENSOR_DTYPES[self.dtype]

    def shape(self, sizes: dict[str, int]) -> tuple[int, ...]:
        return tuple(d if isinstance(d, int) else sizes[d] for d in self.dims)


@dataclass(frozen=True, slots=True)
class Forward:
    score: Expr
    masks: tuple[Expr, ...] = ()
    normalizer: str = "softmax"  # "softmax" | "none"
    sink: Expr | None = None  # softmax only: an extra logit in each row's denominator (uniform per head)
    output_scale: Expr | None = None  # normalizer "none" only: O = (P·V) · output_scale (per row)
    scalars: tuple[Scalar, ...] = ()
    tensors: tuple[SideTensor, ...] = ()
    # "none" | "causal" | "window": the document's `Mask` header when it is the only mask, so backends
    # keep their specialised block ranges for it; "expr" when `masks` holds anything else.
    header_mask: str = "none"
    # "" | "shared" | "per_head": the masks read per-token side tensors (document ids, flags), which
    # interval arithmetic cannot bound, so a small kernel classifies every (query block, key block) at
    # launch (FlexAttention's block mask), once per (batch) or per (batch, head).
    block_mask: str = ""
    # `Param fast_tanh = 1`: the kernels compute tanh (and sigmoid through it) with the SFU's
    # tanh.approx.f32, as FlashAttention 3 and 4 do; the reference keeps the exact functions.
    fast_tanh: bool = False
    lines: dict[str, int] = field(default_factory=dict)  # region → TL line (1-based), for the tags

    # ---- what the emitters ask ----

    @property
    def plain(self) -> bool:
        """The FlashAttention forward without variants: the score is s · softmax_scale, at most the
        `Mask` header's mask, softmax without a sink. Its kernels stay exactly as they were tuned."""
        return (
            self.score == PLAIN_SCORE
            and self.header_mask != "expr"
            and self.normalizer == "softmax"
            and self.sink is None
            and self.output_scale is None
        )

    def tensor(self, name: str) -> SideTensor:
        return next(t for t in self.tensors if t.name == name)

    def scalar(self, name: str) -> Scalar | None:
        return next((s for s in self.scalars if s.name == name), None)

    # ---- JSON ----

    def to_dict(self) -> dict[str, Any]:
        return {
            "score": to_json(self.score),
            "masks": [to_json(m) for m in self.masks],
            "normalizer": self.normalizer,
            "sink": to_json(self.sink) if self.sink is not None else None,
            "output_scale": to_json(self.output_scale) if self.output_scale is not None else None,
            "scalars": [[s.name, s.type, s.default] for s in self.scalars],
            "tensors": [[t.name, list(t.dims), t.dtype] for t in self.tensors],
            "header_mask": self.header_mask,
            "block_mask": self.block_mask,
            "fast_tanh": self.fast_tanh,
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Forward:
        return Forward(
            score=from_json(d["score"]),
            masks=tuple(from_json(m) for m in d.get("masks", ())),
            normalizer=d.get("normalizer", "softmax"),
            sink=from_json(d["sink"]) if d.get("sink") is not None else None,
            output_scale=from_json(d["output_scale"]) if d.get("output_scale") is not None else None,
            scalars=tuple(Scalar(n, t, v) for n, t, v in d.get("scalars", ())),
            tensors=tuple(SideTensor(n, tuple(dims), dt) for n, dims, dt in d.get("tensors", ())),
            header_mask=d.get("header_mask", "none"),
            block_mask=d.get("block_mask", ""),
            fast_tanh=bool(d.get("fast_tanh", False)),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict())


PLAIN_SCORE: Expr = Op("mul", (Var("s", F32), Var("softmax_scale", F32)), F32)

# The `Mask` header's masks as expressions over the indices (bottom-right aligned, FlashAttention's
# convention): the reference and the generic backends read these; `window_left/right` are the launch's.
_DIAG: Expr = Op(
    "add", (Var("q_idx", I32), Op("sub", (Var("seqlen_k", I32), Var("seqlen_q", I32)), I32)), I32
)
CAUSAL_MASK: Expr = Op("le", (Var("kv_idx", I32), _DIAG), "bool")


def _unbounded_or(side: str, keep: Expr) -> Expr:
    return Op("or", (Op("lt", (Var(side, I32), Const(0, I32)), "bool"), keep), "bool")


# `diag − window_left ≤ kv_idx ≤ diag + window_right`, each side unbounded when its launch value is < 0.
WINDOW_MASKS: tuple[Expr, ...] = (
    _unbounded_or(
        "window_right",
        Op("le", (Var("kv_idx", I32), Op("add", (_DIAG, Var("window_right", I32)), I32)), "bool"),
    ),
    _unbounded_or(
        "window_left",
        Op("ge", (Var("kv_idx", I32), Op("sub", (_DIAG, Var("window_left", I32)), I32)), "bool"),
    ),
)
