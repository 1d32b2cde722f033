"""Verify the backward kernels against autograd of the TL-derived float32 reference, every element.

Per case: random q, k, v, dO in the kernel dtype; O and LSE from the float32 forward reference (O rounded
to the dtype, as a forward kernel would hand it over); dQ, dK, dV pre-filled with NaN so an element the
kernels never write is caught; the reference gradients from `runner.backward_reference` on the same
rounded inputs, dQ and dK with the kernels' D = rowsum(dO ∘ O) of that rounded O (`d_from`: where a row's
P sits on one key, D's rounding alone moves them by percents, FlashAttention's too; the line reports the
error against the exact D beside it). Thresholds live in `GRAD_TOLERANCES` and nowhere else. A
deterministic build (`BackwardSpec.deterministic`) runs a second time and must give the same bits for dQ,
dK and dV.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from runner.backward import LoadedBackward, backward
from runner.launch import torch_dtype
from runner.verify import Shape, _side_tensors, make_inputs


@dataclass(frozen=True)
class GradTolerance:
    rel_l2: float  # ‖g − ref‖₂ / ‖ref‖₂
    max_abs: float  # max |g − ref| / max(1, max |ref|)


# P and dS enter the dK, dV and dQ GEMMs rounded to the input dtype (FA2 does the same), so the errors
# are a few units in the last place of that dtype, summed over the key or query dimension.
GRAD_TOLERANCES: dict[str, GradTolerance] = {
    "fp16": GradTolerance(rel_l2=1e-2, max_abs=2e-2),
    "bf16": GradTolerance(rel_l2=3e-2, max_abs=6e-2),
}


@dataclass
class GradCheck:
    name: str
    rel_l2: float
    max_abs: float
    nonfinite: int
    ok: bool


@dataclass
class BackwardResult:
    kernel: str
    shape: Shape
    dtype: str
    checks: list[GradCheck] = field(default_factory=list)
    # deterministic builds: elements of dQ, dK, dV whose bits differ on a second run (None: not checked)
    rerun_differs: int | None = None
    # dQ's and dK's rel_l2 against the exact-D gradient (softmax programs; informative, not a check)
    exact_d: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(c.ok for c in self.checks) and not self.rerun_differs

    def line(self) -> str:
        worst = max(self.checks, key=lambda c: c.rel_l2 / max(GRAD_TOLERANCES[self.dtype].rel_l2, 1e-30))
        bad = [c.name for c in self.checks if not c.ok]
        verdict = (
            "ok"
            if not bad
            else "FAIL "
            + ", ".join(
                f"{c.name} (rel_l2 {c.rel_l2:.2e}, max_abs {c.max_abs:.2e}, nonfinite {c.nonfinite})"
                for c in self.checks
                if not c.ok
            )
        )
        if self.rerun_differs:
            verdict = (
                "" if verdict == "ok" else verdict + "; "
            ) + f"FAIL rerun: {self.rerun_differs} elements differ"
        rerun = (
            "" if self.rerun_differs is None else ", rerun bit-identical" if not self.rerun_differs else ""
        )
        exact = "".join(f", exact D {n} {e:.1e}" for n, e in self.exact_d.items())
        return (
            f"{self.kernel} {self.dtype} {self.shape}: {verdict} "
            f"(worst {worst.name}: rel_l2 {worst.rel_l2:.2e}, max_abs {worst.max_abs:.2e}, "
            f"nonfinite {sum(c.nonfinite for c in self.checks)}{rerun}{exact})"
        )


def compare_grad(name: str, got: Any, ref: Any, tol: GradTolerance) -> GradCheck:
    import torch

    g = got.float()
    r = ref.float().to(g.device)
    nonfinite = int((~torch.isfinite(g)).sum())
    if g.numel() == 0:
        return GradCheck(name, 0.0, 0.0, 0, True)
    diff = (g - r).nan_to_num(nan=math.inf)
    rel = float(diff.norm() / r.norm().clamp_min(1e-30)) if float(r.norm()) > 0 else float(diff.norm())
    mx = float(diff.abs().max() / max(1.0, float(r.abs().max())))
    ok = nonfinite == 0 and rel <= tol.rel_l2 and mx <= tol.max_abs
    return GradCheck(name, rel, mx, nonfinite, ok)


def verify_backward(
    loaded: LoadedBackward,
    shape: Shape,
    *,
    seed: int = 0,
    softmax_scale: float | None = None,
    window: tuple[int, int] | None = None,
    extras: dict[str, Any] | None = None,
) -> BackwardResult:
    import torch

    from kernel_ir.program import PLAIN_SCORE, Forward
    from runner.backward_reference import backward_reference
    from runner.ir_reference import forward_reference

    spec = loaded.spec
    dtype = torch_dtype(spec.dtype)
    device = torch.device("cuda", loaded.device_id)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    program = Forward.from_dict(spec.program) if spec.program else None
    if program is None:
        from kernel_ir.program import CAUSAL_MASK, WINDOW_MASKS

        masks = {"causal": (CAUSAL_MASK,), "window": WINDOW_MASKS}.get(spec.mask, ())
        program = Forward(score=PLAIN_SCORE, masks=masks, header_mask=spec.mask)
    win = tuple(window if window is not None else spec.window) if spec.mask == "window" else (-1, -1)
    q, k, v = make_inputs(shape, spec.head_dim, spec.head_dim, dtype, device, generator=gen)
    do = torch.randn(q.shape, generator=gen, device=device).to(dtype)
    side = _side_tensors(spec, shape, extras, gen, device)
    tensors = {n: t for n, t in side.items() if isinstance(t, torch.Tensor)}
    scalars = {n: t for n, t in side.items() if not isinstance(t, torch.Tensor)}
    ref_o, ref_lse = forward_reference(
        program, q, k, v, softmax_scale=softmax_scale, window=win, scalars=scalars, tensors=tensors
    )
    o = ref_o.to(dtype)
    lse = ref_lse.float().contiguous() if ref_lse is not None else torch.zeros(1, device=device)
    nan = (torch.full_like(q, math.nan), torch.full_like(k, math.nan), torch.full_like(v, math.nan))
    dq, dk, dv, dside = backward(
        loaded, q, k, v, o, lse, do, softmax_scale=softmax_scale, window=win, extras=side, out=nan
    )
    torch.cuda.synchronize(device)
    rerun_differs = None
    if spec.deterministic:
        again = backward(loaded, q, k, v, o, lse, do, softmax_scale=softmax_scale, window=win, extras=side)
        pairs = zip((dq, dk, dv), again[:3], strict=True)
        rerun_differs = sum(int((a.view(torch.int16) != b.view(torch.int16)).sum()) for a, b in pairs)
    def reference(**kw: Any) -> Any:
        return backward_reference(
            program,
            q,
            k,
            v,
            do,
            softmax_scale=softmax_scale,
            window=win,
            scalars=scalars,
            tensors=tensors,
            learnable=spec.learnable,
            **kw,
        )

    softmax = program.normalizer == "softmax"
    rdq, rdk, rdv, rside = reference(d_from=o if softmax else None)
    tol = GRAD_TOLERANCES[spec.dtype]
    result = BackwardResult(kernel=spec.name, shape=shape, dtype=spec.dtype, rerun_differs=rerun_differs)
    if softmax:
        edq, edk = reference()[:2]
        pairs = (("dq", dq, edq), ("dk", dk, edk))
        result.exact_d = {n: compare_grad(n, g, r, tol).rel_l2 for n, g, r in pairs}
    result.checks += [
        compare_grad(n, g, r, tol) for n, g, r in (("dq", dq, rdq), ("dk", dk, rdk), ("dv", dv, rdv))
    ]
    result.checks += [compare_grad(f"d{n}", dside[n], rside[n], tol) for n in spec.learnable]
    return result
