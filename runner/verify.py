"""Verify a kernel against the float32 reference on fresh random inputs, every element checked.

Each run uses new inputs (normal, then Q and K scaled ×8 so the scores span ±hundreds and the online
softmax's running max and rescaling really work), O and LSE pre-filled with NaN so an element the kernel
never writes is caught. Pass thresholds per dtype live in `TOLERANCES`, and nowhere else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from runner.launch import LoadedKernel, launch, torch_dtype


@dataclass(frozen=True)
class Tolerance:
    rel_l2: float  # ‖O − ref‖₂ / ‖ref‖₂
    max_abs: float  # max |O − ref|, relative to max(1, max |ref|)
    lse_atol: float  # per element: |LSE − ref| ≤ lse_atol + lse_rtol·|ref|
    lse_rtol: float
    # The output dtype's smallest normal: the relative L2 error is taken against a reference norm of at
    # least this per element, since outputs below it (e.g. sigmoid weights of 1e-19) are not
    # representable in the dtype at all and round to zero in any kernel.
    tiny: float = 0.0


# The one place pass/fail thresholds are written. rel-L2 bounds are the issue's; max-abs allows a few
# units in the last place of the output dtype (bf16 has 8 mantissa bits, fp16 11); LSE is fp32 math on the
# same rounded inputs, so only accumulation order and exp2/log2 approximations separate it from the reference.
TOLERANCES: dict[str, Tolerance] = {
    "fp16": Tolerance(rel_l2=5e-3, max_abs=2e-2, lse_atol=2e-3, lse_rtol=1e-4, tiny=6.103515625e-05),
    "bf16": Tolerance(rel_l2=1e-2, max_abs=8e-2, lse_atol=2e-3, lse_rtol=1e-4, tiny=1.1754943508222875e-38),
}

INPUT_SCALES: tuple[tuple[str, float], ...] = (("normal", 1.0), ("scaled x8", 8.0))


@dataclass(frozen=True)
class Shape:
    batch: int
    heads: int
    heads_kv: int
    seqlen_q: int
    seqlen_k: int

    @staticmethod
    def parse(text: str) -> Shape:
        """`B,H,Hkv,Sq,Sk` (or `B,H,Hkv,S` for Sq = Sk)."""
        try:
            parts = [int(p) for p in text.replace(" ", "").split(",")]
        except ValueError:
            parts = []
        if len(parts) == 4:
            parts.append(parts[3])
        if len(parts) != 5 or min(parts) < 0 or parts[1] < 1 or parts[2] < 1:
            raise ValueError(f"bad shape {text!r}: expected B,H,Hkv,Sq,Sk (e.g. 2,16,16,1024,1024)")
        return Shape(*parts)

    def __str__(self) -> str:
        return f"B={self.batch} H={self.heads} Hkv={self.heads_kv} Sq={self.seqlen_q} Sk={self.seqlen_k}"


@dataclass
class CaseResult:
    inputs: str  # "normal" | "scaled x8"
    max_abs: float
    rel_l2: float
    nonfinite: int  # NaN/inf elements of O (NaN: never written)
    lse_max_err: float  # over rows with a finite reference LSE
    lse_bad: int  # LSE elements outside tolerance, NaN, or disagreeing on +inf (rows with no key)
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures


@dataclass
class VerifyResult:
    kernel: str
    shape: Shape
    dtype: str
    head_dim_qk: int
    head_dim_v: int
    mask: str
    window: tuple[int, int]
    strided: bool
    gpu: str
    cases: list[CaseResult]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.cases)

    def __str__(self) -> str:
        mask = self.mask if self.mask != "window" else f"window{self.window}"
        head = (
            f"{'PASS' if self.passed else 'FAIL'} {self.kernel} [{self.shape} d={self.head_dim_qk}/"
            f"{self.head_dim_v} {self.dtype} {mask}{' strided' if self.strided else ''}] on {self.gpu}"
        )
        return "\n".join([head, *case_lines(self.cases)])


def case_lines(cases: list[CaseResult]) -> list[str]:
    """Two-space-indented lines per case: its errors, then each failure."""
    lines = []
    for c in cases:
        lines.append(
            f"  {c.inputs:10s} max_abs={c.max_abs:.3e} rel_l2={c.rel_l2:.3e} "
            f"nonfinite={c.nonfinite} lse_err={c.lse_max_err:.3e} lse_bad={c.lse_bad}"
        )
        lines += [f"    ✗ {f}" for f in c.failures]
    return lines


def make_inputs(
    shape: Shape,
    d_qk: int,
    d_v: int,
    dtype: Any,
    device: Any,
    *,
    strided: bool = False,
    generator: Any = None,
) -> tuple[Any, Any, Any]:
    """Random q, k, v (batch, seqlen, heads, dim). `strided`: views with padded seqlen and every other head,
    so batch, row and head strides all differ from the packed ones (the last dim stays contiguous)."""
    import torch

    def one(seqlen: int, heads: int, d: int) -> Any:
        if not strided:
            return torch.randn(shape.batch, seqlen, heads, d, generator=generator, device=device).to(dtype)
        base = torch.randn(shape.batch, seqlen + 3, 2 * heads, d, generator=generator, device=device).to(
            dtype
        )
        return base[:, 1 : seqlen + 1, ::2]

    return (
        one(shape.seqlen_q, shape.heads, d_qk),
        one(shape.seqlen_k, shape.heads_kv, d_qk),
        one(shape.seqlen_k, shape.heads_kv, d_v),
    )


def compare(o: Any, lse: Any, ref_o: Any, ref_lse: Any, tol: Tolerance, label: str) -> CaseResult:
    import torch

    of = o.float()
    nonfinite = int((~torch.isfinite(of)).sum().item())
    diff = (of - ref_o).abs()
    diff = torch.where(torch.isfinite(diff), diff, torch.full_like(diff, math.inf))
    max_abs = float(diff.max().item()) if diff.numel() else 0.0
    ref_norm = float(ref_o.norm().item())
    err_norm = float(torch.where(torch.isfinite(of), of - ref_o, torch.zeros_like(of)).norm().item())
    floor = tol.tiny * math.sqrt(max(1, ref_o.numel()))
    rel_l2 = err_norm / max(ref_norm, floor) if max(ref_norm, floor) > 0 else err_norm
    if nonfinite:
        rel_l2 = math.inf
    ref_max = float(ref_o.abs().max().item()) if ref_o.numel() else 0.0

    empty_ref = torch.isinf(ref_lse)
    finite_rows = ~empty_ref
    lse_diff = (lse - ref_lse).abs()
    lse_ok = lse_diff <= tol.lse_atol + tol.lse_rtol * ref_lse.abs()
    lse_ok = torch.where(empty_ref, torch.isposinf(lse), lse_ok & torch.isfinite(lse))
    lse_bad = int((~lse_ok).sum().item())
    finite_diff = lse_diff[finite_rows & torch.isfinite(lse)]
    lse_max_err = float(finite_diff.max().item()) if finite_diff.numel() else 0.0
    if lse_bad and finite_rows.any() and not torch.isfinite(lse[finite_rows]).all():
        lse_max_err = math.inf

    failures = []
    if nonfinite:
        failures.append(f"{nonfinite} output elements are NaN/inf (NaN = never written)")
    if rel_l2 > tol.rel_l2:
        failures.append(f"relative L2 error {rel_l2:.3e} > {tol.rel_l2:.0e}")
    if max_abs > tol.max_abs * max(1.0, ref_max):
        failures.append(f"max abs error {max_abs:.3e} > {tol.max_abs:.0e}·max(1, {ref_max:.2f})")
    if lse_bad:
        failures.append(
            f"{lse_bad} LSE elements wrong (tolerance {tol.lse_atol:.0e} + {tol.lse_rtol:.0e}·|lse|)"
        )
    return CaseResult(
        inputs=label,
        max_abs=max_abs,
        rel_l2=rel_l2,
        nonfinite=nonfinite,
        lse_max_err=lse_max_err,
        lse_bad=lse_bad,
        failures=failures,
    )


def verify(
    loaded: LoadedKernel,
    shape: Shape,
    *,
    seed: int = 0,
    strided: bool = False,
    softmax_scale: float | None = None,
    window: tuple[int, int] | None = None,
    extras: dict[str, Any] | None = None,
) -> VerifyResult:
    """Run the kernel on normal and scaled-up random inputs of `shape` and check every output element.

    A variant (a spec with a program) is checked against the float32 evaluation of its own kernel IR
    (`runner.ir_reference`), with random side tensors unless `extras` gives them; the plain forward
    against the hand-written reference (`runner.reference`), which also cross-checks the IR's."""
    import torch

    from runner.reference import attention_reference

    spec = loaded.spec
    dtype = torch_dtype(spec.dtype)
    device = torch.device("cuda", loaded.device_id)
    win = tuple(window if window is not None else spec.window) if spec.mask == "window" else (-1, -1)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    tol = TOLERANCES[spec.dtype]
    cases = []
    for label, factor in INPUT_SCALES:
        q, k, v = make_inputs(
            shape, spec.head_dim_qk, spec.head_dim_v, dtype, device, strided=strided, generator=gen
        )
        if factor != 1.0:
            q, k = (q * factor).to(dtype), (k * factor).to(dtype)
            if strided:  # keep the strided layout: scale in place through the views
                q, k = _restride(q), _restride(k)
        o = torch.full(
            (shape.batch, shape.seqlen_q, shape.heads, spec.head_dim_v), math.nan, dtype=dtype, device=device
        )
        lse = torch.full(
            (shape.batch, shape.heads, shape.seqlen_q), math.nan, dtype=torch.float32, device=device
        )
        side = _side_tensors(spec, shape, extras, gen, device)
        launch(loaded, q, k, v, o, lse, softmax_scale=softmax_scale, window=win, extras=side)
        torch.cuda.synchronize(device)
        if spec.program:
            from kernel_ir.program import Forward
            from runner.ir_reference import forward_reference

            ref_o, ref_lse = forward_reference(
                Forward.from_dict(spec.program),
                q,
                k,
                v,
                softmax_scale=softmax_scale,
                window=win,
                scalars={n: v for n, v in side.items() if not isinstance(v, torch.Tensor)},
                tensors={n: v for n, v in side.items() if isinstance(v, torch.Tensor)},
            )
        else:
            ref_o, ref_lse = attention_reference(
                q, k, v, mask=spec.mask, window=win, softmax_scale=softmax_scale
            )
        if ref_lse is None:  # no softmax, no LSE: the kernel leaves it as it was
            lse, ref_lse = torch.zeros_like(lse), torch.zeros_like(lse)
        cases.append(compare(o, lse, ref_o, ref_lse, tol, label))
    return VerifyResult(
        kernel=spec.kernel_name,
        shape=shape,
        dtype=spec.dtype,
        head_dim_qk=spec.head_dim_qk,
        head_dim_v=spec.head_dim_v,
        mask=spec.mask,
        window=win,
        strided=strided,
        gpu=torch.cuda.get_device_name(device),
        cases=cases,
    )


def _side_tensors(
    spec: Any, shape: Shape, extras: dict[str, Any] | None, gen: Any, device: Any
) -> dict[str, Any]:
    """The variant's side tensors (random unless `extras` gives them) and any scalars `extras` sets."""
    if not spec.program:
        return dict(extras or {})
    from kernel_ir.program import Forward
    from runner.ir_reference import make_side_tensors

    made = make_side_tensors(
        Forward.from_dict(spec.program),
        batch=shape.batch,
        heads=shape.heads,
        heads_kv=shape.heads_kv,
        seqlen_q=shape.seqlen_q,
        seqlen_k=shape.seqlen_k,
        generator=gen,
        device=device,
    )
    return {**made, **(extras or {})}


def _restride(t: Any) -> Any:
    """A copy of `t` laid out like `make_inputs(strided=True)` views (padded seqlen, every other head)."""
    import torch

    b, s, h, d = t.shape
    base = torch.zeros(b, s + 3, 2 * h, d, dtype=t.dtype, device=t.device)
    view = base[:, 1 : s + 1, ::2]
    view.copy_(t)
    return view
