"""The backward's reference: gradients by torch autograd of the kernel IR's float32 forward.

`backward_reference(program, q, k, v, do, …)` differentiates exactly what `runner.ir_reference` evaluates
(the same regions, evaluated by the same `_Evaluator`), so a variant's backward needs no hand-written
gradient either: dQ, dK, dV (K/V gradients summed over each GQA group, as the kernels write them) and,
for the side tensors named in `learnable`, their gradients.

The loss is Σ O ∘ dO, one chunk of query rows at a time (autograd of each chunk alone: dQ's rows are the
chunk's, dK, dV and the side tensors' gradients add up over chunks), so 16k × 16k scores never
materialise. A row that keeps no key has O = 0 and contributes no gradient (its logsumexp is taken over
zeros instead of −∞s, so no NaN flows back through it).

`d_from=o`: dQ and dK as the kernels define them, with the softmax's D = rowsum(dO ∘ O) taken from the O
they are handed (the forward's output, rounded to the input dtype) instead of the exact one. Where a row's
P sits on one key, dP − D cancels and that rounding alone moves dQ and dK by percents
(`benchmarks/backward_d_rounding.py`); FlashAttention's backward defines D the same way. The kernels' dX is
P ∘ (dP − D′) = P ∘ (dP − D) + P ∘ (D − D′), so their dQ and dK are the exact ones plus the gradient of
Σ stop(P ∘ (D − D′)) ∘ X through the scores X; dV and the side tensors' gradients stay exact.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from kernel_ir.program import Forward
from runner.ir_reference import _Evaluator


class _GradEvaluator(_Evaluator):
    """The reference evaluator with the learnable side tensors left attached to autograd."""

    def __init__(self, *args: Any, learnable: tuple[str, ...], **kw: Any) -> None:
        self.learnable = learnable
        super().__init__(*args, **kw)

    def _side_tensors(self, given: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = super()._side_tensors({n: t.detach() for n, t in given.items()})
        for name in self.learnable:
            out[name] = given[name].to(device=self.device, dtype=self.fdtype).reshape(-1)
        return out


def backward_reference(
    program: Forward,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    do: torch.Tensor,
    *,
    softmax_scale: float | None = None,
    window: tuple[int, int] = (-1, -1),
    scalars: dict[str, float | int] | None = None,
    tensors: dict[str, torch.Tensor] | None = None,
    learnable: tuple[str, ...] = (),
    chunk: int = 512,
    dtype: torch.dtype = torch.float32,
    d_from: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """(dQ, dK, dV, {learnable tensor: gradient}) in `dtype`, shaped like q, k, v and the tensors.
    `do` is (batch, seqlen_q, heads, d_v). Raises ValueError as `forward_reference` does, and for a
    learnable tensor that is not a float32 side tensor of the program."""
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"the reference computes in float32 or float64, not {dtype}")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or do.dim() != 4:
        raise ValueError("q, k, v and do are (batch, seqlen, heads, dim)")
    batch, seqlen_q, heads, d_qk = q.shape
    seqlen_k, heads_kv, d_v = k.shape[1], k.shape[2], v.shape[3]
    if tuple(do.shape) != (batch, seqlen_q, heads, d_v):
        raise ValueError(f"do must be {(batch, seqlen_q, heads, d_v)}, got {tuple(do.shape)}")
    if heads_kv < 1 or heads % heads_kv:
        raise ValueError(f"heads ({heads}) must be a multiple of heads_kv ({heads_kv})")
    tensors = dict(tensors or {})
    declared = {t.name: t for t in program.tensors}
    for name in learnable:
        if name not in declared or declared[name].dtype != "float32":
            raise ValueError(f"learnable `{name}` is not a float32 side tensor of the program")
        if name not in tensors:
            raise ValueError(f"learnable side tensor `{name}` is missing from tensors=")
    group = heads // heads_kv
    sizes = {"batch": batch, "heads": heads, "heads_kv": heads_kv, "seqlen_q": seqlen_q, "seqlen_k": seqlen_k}
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(d_qk)
    leaves = {n: tensors[n].detach().to(q.device, dtype).requires_grad_(True) for n in learnable}
    ev = _GradEvaluator(
        program,
        sizes=sizes,
        scale=scale,
        window=window,
        scalars=scalars or {},
        tensors={**tensors, **leaves},
        dtype=dtype,
        device=q.device,
        learnable=tuple(learnable),
    )
    kf = k.detach().to(dtype).permute(0, 2, 3, 1).requires_grad_(True)  # (b, hkv, d, sk)
    vf = v.detach().to(dtype).permute(0, 2, 1, 3).requires_grad_(True)  # (b, hkv, sk, dv)
    qf = q.detach().to(dtype).permute(0, 2, 1, 3).reshape(batch, heads_kv, group, seqlen_q, d_qk)
    dof = do.detach().to(dtype).permute(0, 2, 1, 3)  # (b, h, sq, dv)
    # D′ = rowsum(dO ∘ O) of the O handed to the kernels (b, h, sq, 1), in the reference's precision
    d_given = None
    if d_from is not None:
        d_given = (d_from.detach().to(dtype).permute(0, 2, 1, 3) * dof).sum(-1, keepdim=True)
    dq = torch.zeros(batch, heads_kv, group, seqlen_q, d_qk, dtype=dtype, device=q.device)
    dk = torch.zeros_like(kf)
    dv = torch.zeros_like(vf)
    dside = {n: torch.zeros_like(t) for n, t in leaves.items()}
    softmax = program.normalizer == "softmax"
    for start in range(0, seqlen_q, chunk):
        rows = min(chunk, seqlen_q - start)
        qc = qf[:, :, :, start : start + rows].clone().requires_grad_(True)
        ev.static = {}  # the row-independent values hold this chunk's graph; never reuse them

        def raw_scores(qc: torch.Tensor = qc, rows: int = rows) -> torch.Tensor:
            return torch.matmul(qc.reshape(batch, heads_kv, group * rows, d_qk), kf).reshape(
                batch, heads, rows, seqlen_k
            )

        vals = ev.chunk(start, rows, raw_scores)
        x = vals.pop("score").expand(batch, heads, rows, seqlen_k)
        keep = vals.pop("keep", None)
        if softmax:
            xm = x.masked_fill(~keep, -math.inf) if keep is not None else x
            sink = vals.pop("sink", None)
            if sink is not None:
                xm = torch.cat([xm, sink.expand(batch, heads, rows, 1)], dim=-1)
            empty = torch.isneginf(xm).all(dim=-1, keepdim=True)
            xm = torch.where(empty, torch.zeros((), dtype=dtype, device=q.device), xm)
            p = torch.softmax(xm, dim=-1)[..., :seqlen_k]
            p = p.masked_fill(empty, 0.0)
        else:
            p = torch.where(keep, x, torch.zeros((), dtype=dtype, device=q.device)) if keep is not None else x
        o = torch.matmul(p.reshape(batch, heads_kv, group * rows, seqlen_k), vf).reshape(
            batch, heads, rows, d_v
        )
        factor = vals.pop("output_scale", None)
        if factor is not None:
            o = o * factor
        loss = (o * dof[:, :, start : start + rows]).sum()
        wrt = [qc, kf, vf, *leaves.values()]
        shifted = d_given is not None and softmax
        grads = torch.autograd.grad(loss, wrt, allow_unused=True, retain_graph=shifted)
        if grads[0] is not None:
            dq[:, :, :, start : start + rows] = grads[0]
        for acc, g in zip([dk, dv, *dside.values()], grads[1:], strict=True):
            if g is not None:
                acc += g
        if shifted:
            assert d_given is not None
            d_exact = (o.detach() * dof[:, :, start : start + rows]).sum(-1, keepdim=True)
            shift = (p * (d_exact - d_given[:, :, start : start + rows])).detach()
            dqc, dkc = torch.autograd.grad((shift * x).sum(), [qc, kf], allow_unused=True)
            if dqc is not None:
                dq[:, :, :, start : start + rows] += dqc
            if dkc is not None:
                dk += dkc
    dq_out = dq.reshape(batch, heads, seqlen_q, d_qk).permute(0, 2, 1, 3)
    return dq_out, dk.permute(0, 3, 1, 2), dv.permute(0, 2, 1, 3), dside
