"""The reference derived from the program: a PyTorch evaluation of the kernel IR's forward.

Every kernel is verified against `forward_reference(kernel's Forward program, q, k, v, …)`, so a variant
(softcap, ALiBi, a document mask, a sink, sigmoid attention, …) needs no hand-written reference: the
regions the backends render are evaluated here, elementwise, in float32 (or float64), with the semantics
of `kernel_ir.program`:

    s      = q · kᵀ                                 raw scores, in the reference dtype
    X      = score(s, q_idx, kv_idx, …)              the score region
    keep   = ∧ masks(…)                              (keys past seqlen_k are never kept)
    softmax:  LSE = log(Σ_kept exp X [+ exp sink]),  P = exp(X − LSE),  O = P · V
    none:     P = X where kept, 0 elsewhere,         O = (P · V) · output_scale,  no LSE

A row that keeps no key gets O = 0 and LSE = +inf (the kernel ABI's convention); with a sink it gets
O = 0 and LSE = sink (LSE is +inf only when the sink is −inf too).

Values of the expressions:
- `s` (batch, heads, rows, keys); `q_idx`, `kv_idx`, `head_idx`, `kv_head_idx` (= head_idx // (heads /
  heads_kv)), `batch_idx`; the sizes `seqlen_q`, `seqlen_k`, `heads`, `heads_kv` (and `batch`);
  `softmax_scale` (default 1/sqrt(d_qk)); `window_left` / `window_right` (the launch's window, −1:
  unbounded); runtime scalars by name (the program's default unless `scalars=` overrides it).
- Each node is evaluated once per chunk of query rows (the DAG's shared subexpressions are memoised) at
  the smallest shape it varies over: a per-head value is (1, heads, 1, 1), a per-key one (1, 1, 1, keys);
  nodes that do not depend on the row are evaluated once per call, and intermediates are freed after
  their last use.
- Types: f32 in the reference dtype, i32 in int64 (no wrap-around), bool. `/` is real division; `%` has
  C semantics (`torch.fmod`: the result takes the dividend's sign, `-7 % 3 == -1`), as the kernels'
  `%` and `fmodf`; an integer `% 0` is an error. `min`/`max` are torch.minimum/maximum, `relu(x)` is
  max(x, 0).
- `where(c, a, b)`, `a & b` and `a | b` are lazy, as C's `?:`, `&&` and `||`: a side-tensor read (or a
  `% 0`) in the branch not taken is not an error, so `where(kv_idx < n, table[kv_idx], 0.0)` is a valid
  guarded read. Any other out-of-range read of a side tensor, at any score a region is evaluated for
  (masked ones included: the kernels evaluate the score region before the mask), raises ValueError
  naming the tensor, the index and the position, instead of reading garbage.
- Side tensors (`tensors=`) must have the program's dims (row-major, indexed by the `Load`'s index
  tuple, gathered with broadcasting); int32 tensors must hold integers, float32 ones floats.

Computed in chunks of query rows (on q's device), so 16k × 16k scores never materialise; K and V are not
repeated for GQA (queries are grouped by their K/V head instead).

`make_side_tensors` draws random side tensors for verification (see its docstring for what each dims
pattern gets), `side_tensor_shapes` gives their shapes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from kernel_ir.expr import BOOL, F32, I32, INDEX_VARS, Const, Expr, Load, Op, Var, children, text
from kernel_ir.program import SIZE_NAMES, Forward, SideTensor

_ROW_VARS = ("s", "q_idx")  # what varies with the query row; a node without them is evaluated once
_UNARY: dict[str, Callable[..., torch.Tensor]] = {
    "tanh": torch.tanh, "sigmoid": torch.sigmoid, "exp": torch.exp, "exp2": torch.exp2, "log": torch.log,
    "rcp": torch.reciprocal,
}  # fmt: skip
_BINARY: dict[str, Callable[..., torch.Tensor]] = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "min": torch.minimum, "max": torch.maximum,
}  # fmt: skip
_COMPARE: dict[str, Callable[..., torch.Tensor]] = {
    "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge, "eq": torch.eq, "ne": torch.ne,
}  # fmt: skip


def forward_reference(
    program: Forward,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    softmax_scale: float | None = None,
    window: tuple[int, int] = (-1, -1),
    scalars: dict[str, float | int] | None = None,
    tensors: dict[str, torch.Tensor] | None = None,
    chunk: int = 1024,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(O (batch, seqlen_q, heads, d_v), LSE (batch, heads, seqlen_q), natural log, or None when the
    program has no softmax), both in `dtype` (float32 or float64). q (batch, seqlen_q, heads, d_qk),
    k / v (batch, seqlen_k, heads_kv, d), any dtype and strides. Raises ValueError on inconsistent inputs,
    a missing or misshapen side tensor, an unknown scalar, or an out-of-range side-tensor read."""
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"the reference computes in float32 or float64, not {dtype}")
    if program.normalizer not in ("softmax", "none"):
        raise ValueError(f"unknown normalizer {program.normalizer!r} (expected softmax or none)")
    if chunk < 1:
        raise ValueError(f"chunk must be positive, got {chunk}")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("q, k and v are (batch, seqlen, heads, dim)")
    batch, seqlen_q, heads, d_qk = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    if k.shape[0] != batch or v.shape[0] != batch:
        raise ValueError(f"batch sizes differ: q {q.shape[0]}, k {k.shape[0]}, v {v.shape[0]}")
    if v.shape[1] != seqlen_k or v.shape[2] != heads_kv:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} disagree on seqlen_k or heads_kv")
    if k.shape[3] != d_qk:
        raise ValueError(f"q's head dim ({d_qk}) differs from k's ({k.shape[3]})")
    if heads_kv < 1 or heads % heads_kv:
        raise ValueError(f"heads ({heads}) must be a multiple of heads_kv ({heads_kv})")
    group = heads // heads_kv
    d_v = v.shape[3]
    device = q.device
    sizes = {
        "batch": batch,
        "heads": heads,
        "heads_kv": heads_kv,
        "seqlen_q": seqlen_q,
        "seqlen_k": seqlen_k,
    }
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(d_qk)
    ev = _Evaluator(
        program,
        sizes=sizes,
        scale=scale,
        window=window,
        scalars=scalars or {},
        tensors=tensors or {},
        dtype=dtype,
        device=device,
    )

    # (batch, heads_kv, group, seqlen, dim): query head h = kv_head · group + g reads K/V head kv_head, so
    # a chunk's (group, rows) fold into one row dimension of a plain batched matmul (a broadcast one
    # is many times slower).
    qf = q.to(dtype).permute(0, 2, 1, 3).reshape(batch, heads_kv, group, seqlen_q, d_qk)
    kt = k.to(dtype).permute(0, 2, 3, 1)  # (batch, heads_kv, d_qk, seqlen_k)
    vf = v.to(dtype).permute(0, 2, 1, 3)  # (batch, heads_kv, seqlen_k, d_v)
    out = torch.zeros(batch, heads, seqlen_q, d_v, dtype=dtype, device=device)
    softmax = program.normalizer == "softmax"
    lse = torch.full((batch, heads, seqlen_q), math.inf, dtype=dtype, device=device) if softmax else None
    for start in range(0, seqlen_q, chunk):
        rows = min(chunk, seqlen_q - start)
        shape = (batch, heads, rows, seqlen_k)

        def raw_scores(start: int = start, rows: int = rows) -> torch.Tensor:
            qc = qf[:, :, :, start : start + rows].reshape(batch, heads_kv, group * rows, d_qk)
            return torch.matmul(qc, kt).reshape(batch, heads, rows, seqlen_k)

        vals = ev.chunk(start, rows, raw_scores)
        x = vals.pop("score").expand(shape)
        keep = vals.pop("keep", None)
        if softmax:
            xm = x.masked_fill(~keep, -math.inf) if keep is not None else x
            sink = vals.pop("sink", None)
            if sink is not None:
                xm = torch.cat([xm, sink.expand(batch, heads, rows, 1)], dim=-1)
            row_lse = torch.logsumexp(xm, dim=-1)  # -inf where no key is kept (and no finite sink)
            empty = torch.isneginf(row_lse)
            p = torch.exp(xm[..., :seqlen_k] - row_lse.masked_fill(empty, 0.0).unsqueeze(-1))
            p = p.masked_fill(empty.unsqueeze(-1), 0.0)
            assert lse is not None
            lse[:, :, start : start + rows] = row_lse.masked_fill(empty, math.inf)
        else:
            p = torch.where(keep, x, torch.zeros((), dtype=dtype, device=device)) if keep is not None else x
        o = torch.matmul(p.reshape(batch, heads_kv, group * rows, seqlen_k), vf)
        o = o.reshape(batch, heads, rows, d_v)
        factor = vals.pop("output_scale", None)
        if factor is not None:
            o = o * factor
        out[:, :, start : start + rows] = o
    return out.transpose(1, 2), lse


# ---- side tensors for verification ----------------------------------------------------------------------


def side_tensor_shapes(
    program: Forward, batch: int, heads: int, heads_kv: int, seqlen_q: int, seqlen_k: int
) -> dict[str, tuple[int, ...]]:
    """The shape of each side tensor of `program` at these sizes (its dims, size names resolved)."""
    sizes = {"batch": batch, "heads": heads, "heads_kv": heads_kv, "seqlen_q": seqlen_q, "seqlen_k": seqlen_k}
    return {t.name: _shape(t, sizes) for t in program.tensors}


# Magnitudes of random float32 side tensors: log-uniform over this range with a random sign, so a
# learnable sink is sometimes large enough to carry a visible share of the softmax (a kernel that drops
# it must fail) and an ALiBi slope or a bias table sometimes small enough to leave the scores in play.
FLOAT_MAGNITUDES = (0.05, 8.0)
# int32 tensors over (…, seqlen_q | seqlen_k): nondecreasing ids in [0, DOC_IDS) along the sequence. Id 0
# covers the first quarter to three quarters of it and ids 1 … DOC_IDS − 1 split the rest at random: as
# document ids, one long document (whole key blocks) and several short ones (partial blocks); as `!= 0`
# flags (Longformer's global tokens), a flagged tail and an unflagged head where the other masks still
# decide (uniform ids in [0, 8) would flag 7/8 of the tokens, i.e. nearly dense attention).
DOC_IDS = 8
_PER_SEQUENCE = ("batch", "heads", "heads_kv")


def make_side_tensors(
    program: Forward,
    batch: int,
    heads: int,
    heads_kv: int,
    seqlen_q: int,
    seqlen_k: int,
    *,
    generator: torch.Generator | None = None,
    device: Any = None,
    tensors: dict[str, torch.Tensor] | None = None,
) -> dict[str, torch.Tensor]:
    """Random valid side tensors for `program` (float32 / int32 as declared, on `device`); those given in
    `tensors` are kept as they are (the others' values do not depend on which are given). Only the dims
    are known, not the meaning, so each dims pattern gets values that are meaningful for the usual uses of
    that pattern:

    - float32, any dims: random sign · magnitude log-uniform in `FLOAT_MAGNITUDES` (ALiBi slopes, bias
      tables, learnable sinks: some heads weak, some strong);
    - int32 over (batch | heads | heads_kv …, seqlen_q | seqlen_k): ids sorted nondecreasing along the
      sequence, in [0, DOC_IDS), id 0 over 1/4 … 3/4 of it (document / packed-sequence ids; as `!= 0`
      flags, a flagged tail);
    - int32 over batch / heads / heads_kv only (e.g. (batch,)): uniform in [0, seqlen_k] (per-batch prefix
      lengths, per-head sink counts);
    - any other int32 tensor: uniform in {0, 1} (flags, a valid index into any dim).

    Pass the tensors whose meaning needs other values (e.g. ALiBi's slopes 2^(−8(h+1)/H)) in `tensors`."""
    given = dict(tensors or {})
    declared = {t.name for t in program.tensors}
    unknown = sorted(set(given) - declared)
    if unknown:
        raise ValueError(f"the program has no side tensor {', '.join(f'`{n}`' for n in unknown)}")
    sizes = {"batch": batch, "heads": heads, "heads_kv": heads_kv, "seqlen_q": seqlen_q, "seqlen_k": seqlen_k}
    gen_device = generator.device if generator is not None else torch.device("cpu")
    out: dict[str, torch.Tensor] = {}
    for t in program.tensors:  # every tensor is drawn, so overriding one leaves the others' values alone
        shape = _shape(t, sizes)
        if t.dtype == "float32":
            mag = torch.empty(shape, device=gen_device).uniform_(
                math.log(FLOAT_MAGNITUDES[0]), math.log(FLOAT_MAGNITUDES[1]), generator=generator
            )
            sign = torch.randint(0, 2, shape, generator=generator, device=gen_device) * 2 - 1
            value = (mag.exp() * sign).to(torch.float32)
        elif (
            t.dims and t.dims[-1] in ("seqlen_q", "seqlen_k") and all(d in _PER_SEQUENCE for d in t.dims[:-1])
        ):
            length = shape[-1]
            ids = torch.randint(1, DOC_IDS, shape, generator=generator, device=gen_device).sort(dim=-1).values
            first = torch.randint(length // 4, 3 * length // 4 + 1, (*shape[:-1], 1), generator=generator,
                                  device=gen_device)  # fmt: skip
            value = ids.masked_fill(torch.arange(length, device=gen_device) < first, 0).to(torch.int32)
        elif t.dims and all(d in _PER_SEQUENCE for d in t.dims):
            value = torch.randint(0, seqlen_k + 1, shape, generator=generator, device=gen_device)
            value = value.to(torch.int32)
        else:
            value = torch.randint(0, 2, shape, generator=generator, device=gen_device).to(torch.int32)
        if t.name in given:
            out[t.name] = given[t.name]
        else:
            out[t.name] = value.to(device) if device is not None else value
    return out


def _shape(t: SideTensor, sizes: dict[str, int]) -> tuple[int, ...]:
    for d in t.dims:
        if isinstance(d, str) and d not in sizes:
            raise ValueError(
                f"side tensor `{t.name}`: unknown dim {d!r} (expected {', '.join(SIZE_NAMES)} or ints)"
            )
    return t.shape(sizes)


# ---- the evaluator --------------------------------------------------------------------------------------


@dataclass
class _Val:
    t: torch.Tensor
    # label → bool tensor (broadcastable to t): where this value depends on an invalid read (an
    # out-of-range side-tensor index, an integer % 0). None: valid everywhere (the usual case, no cost).
    bad: dict[str, torch.Tensor] | None = None


@dataclass
class _Bad:
    """What an invalid operation was, for the error message: its node and, for a read, its indices."""

    node: Expr
    tensor: SideTensor | None = None
    shape: tuple[int, ...] = ()
    index: tuple[torch.Tensor, ...] = ()


class _Evaluator:
    def __init__(
        self,
        program: Forward,
        *,
        sizes: dict[str, int],
        scale: float,
        window: tuple[int, int],
        scalars: dict[str, float | int],
        tensors: dict[str, torch.Tensor],
        dtype: torch.dtype,
        device: Any,
    ) -> None:
        self.p = program
        self.sizes = sizes
        self.fdtype = dtype
        self.device = device
        self.roots: list[tuple[str, Expr]] = [("score", program.score)]
        self.roots += [("mask", m) for m in program.masks]
        if program.normalizer == "softmax" and program.sink is not None:
            self.roots.append(("sink", program.sink))
        if program.normalizer == "none" and program.output_scale is not None:
            self.roots.append(("output_scale", program.output_scale))
        root_exprs = [e for _, e in self.roots]
        # One representative per distinct subexpression (equal nodes are one value even where the DAG
        # does not share them, e.g. when a program was built in pieces), keyed by identity.
        self.order, self.key = _distinct_nodes(root_exprs)
        self.row_dependent: set[int] = set()
        self.uses: dict[int, int] = {}
        for n in self.order:
            kids = self._kids(n)
            if (isinstance(n, Var) and n.name in _ROW_VARS) or any(c in self.row_dependent for c in kids):
                self.row_dependent.add(id(n))
            for c in kids:
                self.uses[c] = self.uses.get(c, 0) + 1
        self.keep_alive = {self.key[id(e)] for e in root_exprs}
        self.static: dict[int, _Val] = {}  # row-independent nodes, evaluated on the first chunk
        self.bad_info: dict[str, _Bad] = {}
        self.labels = 0
        self.consts = self._constants(scale, window, scalars)
        self.tensors = self._side_tensors(tensors)

    # -- inputs --

    def _constants(
        self, scale: float, window: tuple[int, int], scalars: dict[str, float | int]
    ) -> dict[str, tuple[float | int, str]]:
        out: dict[str, tuple[float | int, str]] = {name: (v, I32) for name, v in self.sizes.items()}
        out["softmax_scale"] = (float(scale), F32)
        left, right = window
        out["window_left"], out["window_right"] = (int(left), I32), (int(right), I32)
        declared = {s.name: s for s in self.p.scalars}
        unknown = sorted(set(scalars) - set(declared))
        if unknown:
            names = ", ".join(f"`{n}`" for n in unknown)
            raise ValueError(f"the program has no runtime scalar {names} (it declares: {sorted(declared)})")
        for name, s in declared.items():
            value = scalars.get(name, s.default)
            if s.type == I32:
                if isinstance(value, bool) or float(value) != int(value):
                    raise ValueError(f"runtime scalar `{name}` is an integer, got {value!r}")
                value = int(value)
            else:
                value = float(value)
            out[name] = (value, s.type)
        return out

    def _side_tensors(self, given: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        declared = {t.name: t for t in self.p.tensors}
        unknown = sorted(set(given) - set(declared))
        if unknown:
            raise ValueError(f"the program has no side tensor {', '.join(f'`{n}`' for n in unknown)}")
        used = {n.tensor for n in self.order if isinstance(n, Load)}
        for name in sorted(used - set(declared)):
            raise ValueError(f"the program reads side tensor `{name}` but does not declare it")
        out: dict[str, torch.Tensor] = {}
        for name, t in declared.items():
            if name not in given:
                if name in used:
                    raise ValueError(
                        f"side tensor `{name}` {_dims(t)} is missing (pass it in tensors=, e.g. from "
                        "make_side_tensors)"
                    )
                continue
            x = given[name]
            if not isinstance(x, torch.Tensor):
                raise ValueError(f"side tensor `{name}` must be a torch.Tensor, got {type(x).__name__}")
            want = _shape(t, self.sizes)
            if tuple(x.shape) != want:
                raise ValueError(
                    f"side tensor `{name}` {_dims(t)} must have shape {want}, got {tuple(x.shape)}"
                )
            if t.dtype == "int32" and (x.dtype.is_floating_point or x.dtype.is_complex):
                raise ValueError(f"side tensor `{name}` is int32, got a {x.dtype} tensor")
            if t.dtype == "float32" and not x.dtype.is_floating_point:
                raise ValueError(f"side tensor `{name}` is float32, got a {x.dtype} tensor")
            dt = self.fdtype if t.dtype == "float32" else torch.int64
            out[name] = x.detach().to(device=self.device, dtype=dt).reshape(-1)
        return out

    # -- one chunk of query rows --

    def chunk(self, start: int, rows: int, raw_scores: Any) -> dict[str, torch.Tensor]:
        """The roots' values for rows [start, start + rows): "score", "keep" (the masks' conjunction, absent
        without masks), "sink" (…, 1) and "output_scale" (…, 1) when the program has them."""
        memo: dict[int, _Val] = {}
        uses = dict(self.uses)
        labels_before = set(self.bad_info)
        for n in self.order:
            key = id(n)
            if key in self.static:
                memo[key] = self.static[key]
            else:
                memo[key] = self._node(n, memo, start, rows, raw_scores)
                if key not in self.row_dependent:
                    self.static[key] = memo[key]
            for c in self._kids(n):
                uses[c] -= 1
                if uses[c] == 0 and c not in self.keep_alive:
                    del memo[c]
        out: dict[str, torch.Tensor] = {}
        keep: torch.Tensor | None = None
        for region, e in self.roots:
            val = memo[self.key[id(e)]]
            self._check(region, val, start)
            t = val.t
            if region == "score":
                out["score"] = t.to(self.fdtype)
            elif region == "mask":
                t = t.to(torch.bool)
                keep = t if keep is None else keep & t
            else:
                if t.shape[-1] != 1:
                    raise ValueError(f"the {region} must not depend on kv_idx: `{text(e)}`")
                out[region] = t.to(self.fdtype)
        if keep is not None:
            out["keep"] = keep
        # forget this chunk's invalid reads (they were not reached); the static nodes' stay referenced
        static_labels = {label for v in self.static.values() for label in (v.bad or {})}
        for label in set(self.bad_info) - labels_before - static_labels:
            del self.bad_info[label]
        return out

    def _check(self, region: str, val: _Val, start: int) -> None:
        for label, where in (val.bad or {}).items():
            if not bool(where.any()):
                continue
            pos = tuple(int(i) for i in where.nonzero()[0])
            info = self.bad_info[label]
            at = _position(where.shape, pos, start)
            if info.tensor is None:
                raise ValueError(
                    f"`{text(info.node)}` divides by zero (an integer % 0) in the {region} at {at}"
                )
            idx = tuple(
                int(i[tuple(p if s > 1 else 0 for p, s in zip(pos, i.shape, strict=True))])
                for i in info.index
            )
            raise ValueError(
                f"side tensor `{info.tensor.name}` {_dims(info.tensor)} = {info.shape} is read out of "
                f"range at index {idx} by `{text(info.node)}` in the {region} at {at}"
            )

    def _kids(self, n: Expr) -> set[int]:
        return {self.key[id(c)] for c in children(n)}

    def _label(self, kind: str) -> str:
        self.labels += 1
        return f"{kind}{self.labels}"

    def _node(self, n: Expr, memo: dict[int, _Val], start: int, rows: int, raw_scores: Any) -> _Val:
        if isinstance(n, Const):
            return _Val(self._full(n.value, n.type))
        if isinstance(n, Var):
            return _Val(self._var(n, start, rows, raw_scores))
        if isinstance(n, Load):
            return self._load(n, [memo[self.key[id(c)]] for c in n.index])
        if isinstance(n, Op):
            return self._op(n, [memo[self.key[id(c)]] for c in n.args])
        raise ValueError(f"not a kernel IR node: {n!r}")

    def _dt(self, ty: str) -> torch.dtype:
        if ty == F32:
            return self.fdtype
        if ty == I32:
            return torch.int64
        if ty == BOOL:
            return torch.bool
        raise ValueError(f"unknown IR type {ty!r}")

    def _full(self, value: float | int | bool, ty: str) -> torch.Tensor:
        return torch.full((1, 1, 1, 1), value, dtype=self._dt(ty), device=self.device)

    def _arange(self, n: int, dim: int, offset: int = 0) -> torch.Tensor:
        shape = [1, 1, 1, 1]
        shape[dim] = n
        return torch.arange(offset, offset + n, device=self.device).view(shape)

    def _var(self, n: Var, start: int, rows: int, raw_scores: Any) -> torch.Tensor:
        name = n.name
        if name == "s":
            return raw_scores()
        if name == "q_idx":
            return self._arange(rows, 2, start)
        if name == "kv_idx":
            return self._arange(self.sizes["seqlen_k"], 3)
        if name == "head_idx":
            return self._arange(self.sizes["heads"], 1)
        if name == "kv_head_idx":
            return self._arange(self.sizes["heads"], 1) // (self.sizes["heads"] // self.sizes["heads_kv"])
        if name == "batch_idx":
            return self._arange(self.sizes["batch"], 0)
        if name in self.consts:
            value, ty = self.consts[name]
            return self._full(value, ty)
        known = sorted(set(INDEX_VARS) | set(self.consts))
        raise ValueError(f"`{name}` is neither an index value nor a runtime scalar of the program ({known})")

    def _load(self, n: Load, index: list[_Val]) -> _Val:
        spec = next((t for t in self.p.tensors if t.name == n.tensor), None)
        if spec is None:
            raise ValueError(f"the program reads side tensor `{n.tensor}` but does not declare it")
        shape = _shape(spec, self.sizes)
        if len(index) != len(shape):
            raise ValueError(
                f"`{text(n)}` indexes side tensor `{n.tensor}` {_dims(spec)} with {len(index)} indices, "
                f"it has {len(shape)} dims"
            )
        data = self.tensors[n.tensor]
        if not index:  # a 0-d tensor
            return _Val(data.reshape(1, 1, 1, 1))
        idx = torch.broadcast_tensors(*(v.t.to(torch.int64) for v in index))
        ok: torch.Tensor | None = None
        flat = torch.zeros_like(idx[0])
        for i, size in zip(idx, shape, strict=True):
            inside = (i >= 0) & (i < size)
            ok = inside if ok is None else ok & inside
            flat = flat * size + i.clamp(0, max(size - 1, 0))
        assert ok is not None
        bad = _union([v.bad for v in index])
        if data.numel() == 0:
            out = torch.zeros(flat.shape, dtype=data.dtype, device=self.device)
        else:
            out = data[flat]
        if not bool(ok.all()):
            label = self._label("read")
            self.bad_info[label] = _Bad(n, spec, shape, idx)
            bad = _union([bad, {label: ~ok}])
        return _Val(out, bad)

    def _op(self, n: Op, args: list[_Val]) -> _Val:
        name = n.op
        a = [v.t for v in args]
        bad = None
        if any(v.bad for v in args):
            if name == "where":  # lazy, as C's ?:
                c = a[0].to(torch.bool)
                bad = _union([args[0].bad, _restrict(args[1].bad, c), _restrict(args[2].bad, ~c)])
            elif name in ("and", "or"):  # lazy, as && and ||
                first = a[0].to(torch.bool)
                bad = _union([args[0].bad, _restrict(args[1].bad, first if name == "and" else ~first)])
            else:
                bad = _union([v.bad for v in args])
        f = self.fdtype
        ty = self._dt(n.type)
        if name in _UNARY:
            return _Val(_UNARY[name](a[0].to(f)), bad)
        if name == "float":
            return _Val(a[0].to(f), bad)
        if name in ("abs", "neg", "relu"):
            x = a[0].to(ty)
            r = torch.abs(x) if name == "abs" else (torch.neg(x) if name == "neg" else torch.clamp_min(x, 0))
            return _Val(r, bad)
        if name in ("add", "sub", "mul", "min", "max"):
            x, y = a[0].to(ty), a[1].to(ty)
            return _Val(_BINARY[name](x, y), bad)
        if name == "div":
            return _Val(torch.div(a[0].to(f), a[1].to(f)), bad)
        if name == "mod":
            x, y = a[0].to(ty), a[1].to(ty)
            if ty.is_floating_point:
                return _Val(torch.fmod(x, y), bad)
            zero = y == 0
            if bool(zero.any()):
                label = self._label("mod")
                self.bad_info[label] = _Bad(n)
                bad = _union([bad, {label: zero}])
                y = torch.where(zero, torch.ones_like(y), y)
            return _Val(torch.fmod(x, y), bad)
        if name in ("lt", "le", "gt", "ge", "eq", "ne"):
            common = f if any(t.dtype.is_floating_point for t in a) else torch.int64
            x, y = a[0].to(common), a[1].to(common)
            return _Val(_COMPARE[name](x, y), bad)
        if name in ("and", "or"):
            x, y = a[0].to(torch.bool), a[1].to(torch.bool)
            return _Val(torch.logical_and(x, y) if name == "and" else torch.logical_or(x, y), bad)
        if name == "not":
            return _Val(torch.logical_not(a[0].to(torch.bool)), bad)
        if name == "where":
            return _Val(torch.where(a[0].to(torch.bool), a[1].to(ty), a[2].to(ty)), bad)
        raise ValueError(f"unknown operation {name!r} in `{text(n)}`")


def _distinct_nodes(roots: list[Expr]) -> tuple[list[Expr], dict[int, int]]:
    """The distinct subexpressions under `roots`, children before parents, and the map from the identity
    of every node to the identity of its representative (the first equal node met)."""
    order: list[Expr] = []
    key: dict[int, int] = {}
    reps: dict[tuple[Any, ...], Expr] = {}
    for root in roots:
        stack: list[tuple[Expr, bool]] = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if id(node) in key:
                continue
            if not expanded:
                stack.append((node, True))
                stack.extend((c, False) for c in reversed(children(node)) if id(c) not in key)
                continue
            kids = tuple(key[id(c)] for c in children(node))
            if isinstance(node, Const):  # 1, 1.0, True and -0.0 are all different
                sig: tuple[Any, ...] = ("const", type(node.value).__name__, repr(node.value), node.type)
            elif isinstance(node, Var):
                sig = ("var", node.name, node.type)
            elif isinstance(node, Load):
                sig = ("load", node.tensor, node.type, kids)
            else:
                sig = ("op", node.op, node.type, kids)
            rep = reps.get(sig)
            if rep is None:
                reps[sig] = rep = node
                order.append(node)
            key[id(node)] = id(rep)
    return order, key


def _union(parts: Iterable[dict[str, torch.Tensor] | None]) -> dict[str, torch.Tensor] | None:
    out: dict[str, torch.Tensor] = {}
    for p in parts:
        for label, where in (p or {}).items():
            out[label] = out[label] | where if label in out else where
    return out or None


def _restrict(bad: dict[str, torch.Tensor] | None, cond: torch.Tensor) -> dict[str, torch.Tensor] | None:
    return {label: where & cond for label, where in bad.items()} if bad else None


def _dims(t: SideTensor) -> str:
    return "(" + ", ".join(str(d) for d in t.dims) + ")"


def _position(shape: tuple[int, ...], pos: tuple[int, ...], start: int) -> str:
    names = ("batch_idx", "head_idx", "q_idx", "kv_idx")
    parts = [
        f"{nm}={p + (start if nm == 'q_idx' else 0)}"
        for nm, p, s in zip(names, pos, shape, strict=True)
        if s > 1
    ]
    return ", ".join(parts) if parts else "every score"
