"""Argument checks of a kernel call, before anything reaches the op or a GPU.

Each failure names the argument and what was expected: `TypeError` for a wrong kind of value (not a
tensor, a dtype the kernel was not built for, an unknown keyword), `ValueError` for a wrong value (rank,
device, head dim, head counts, shapes). They run on real, fake and meta tensors alike, so the errors are
the same in eager mode, under `torch.compile` and on a CPU-only machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from runner.abi import LaunchSpec

LAYOUTS = ("bhsd", "bshd")
# Devices a call accepts: CUDA runs the kernel; meta only propagates shapes (the op's fake kernel).
_DEVICES = ("cuda", "meta")
_DTYPE_NAMES = {"fp16": "float16", "bf16": "bfloat16"}


@dataclass(frozen=True)
class Shapes:
    batch: int
    seqlen_q: int
    seqlen_k: int
    heads: int
    heads_kv: int


def kernel_dtype(spec: LaunchSpec) -> Any:
    import torch

    return getattr(torch, _DTYPE_NAMES[spec.dtype])


def check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(
            f"layout: expected 'bhsd' (batch, heads, seqlen, dim; like scaled_dot_product_attention) or "
            f"'bshd' (batch, seqlen, heads, dim; like FlashAttention), got {layout!r}"
        )


def check_qkv(spec: LaunchSpec, q: Any, k: Any, v: Any, layout: str) -> Shapes:
    """q, k, v in `layout` against the kernel's dtype, head dims and head counts."""
    import torch

    check_layout(layout)
    dims = "(batch, heads, seqlen, dim)" if layout == "bhsd" else "(batch, seqlen, heads, dim)"
    want = kernel_dtype(spec)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(
                f"{name}: expected 4 dims {dims} for layout={layout!r}, got shape {tuple(t.shape)}"
            )
        if t.device.type not in _DEVICES:
            raise ValueError(f"{name}: tensor is on {t.device}, expected a CUDA tensor")
        if t.device != q.device:
            raise ValueError(f"{name}: tensor is on {t.device}, but q is on {q.device}")
        if t.dtype != want:
            raise TypeError(
                f"{name}: dtype {t.dtype}, but {spec.kernel_name} was built for {want} (Dtype {spec.dtype})"
            )
    seq, head = (2, 1) if layout == "bhsd" else (1, 2)
    for name, t, d, param in (
        ("q", q, spec.head_dim_qk, "head_dim_qk"),
        ("k", k, spec.head_dim_qk, "head_dim_qk"),
        ("v", v, spec.head_dim_v, "head_dim_v"),
    ):
        if t.shape[3] != d:
            raise ValueError(
                f"{name}: head dim {t.shape[3]}, but {spec.kernel_name} was built for {d} ({param}); "
                f"shape {tuple(t.shape)} read as {dims}"
            )
    batch, heads, seqlen_q = q.shape[0], q.shape[head], q.shape[seq]
    if k.shape[0] != batch or v.shape[0] != batch:
        raise ValueError(f"k, v: batch sizes {k.shape[0]}, {v.shape[0]} differ from q's {batch}")
    if k.shape[seq] != v.shape[seq] or k.shape[head] != v.shape[head]:
        raise ValueError(
            f"k, v: (seqlen, heads) differ: k {(k.shape[seq], k.shape[head])}, "
            f"v {(v.shape[seq], v.shape[head])}"
        )
    heads_kv = k.shape[head]
    if heads_kv == 0 or heads % heads_kv:
        raise ValueError(
            f"k: {heads_kv} key/value head(s) do not divide q's {heads} heads "
            "(GQA needs heads % heads_kv == 0)"
        )
    if spec.heads_kv and heads_kv != spec.heads_kv:
        raise ValueError(
            f"k: {heads_kv} key/value head(s), but {spec.kernel_name} was built for {spec.heads_kv} "
            "(Param heads_kv)"
        )
    if spec.group and heads // heads_kv != spec.group:
        raise ValueError(
            f"q, k: GQA group {heads}/{heads_kv}, but {spec.kernel_name} was built for group {spec.group}"
        )
    return Shapes(batch, seqlen_q, k.shape[seq], heads, heads_kv)


def check_scale(scale: Any, spec: LaunchSpec) -> float:
    """The softmax scale: 1/sqrt(head_dim_qk) by default; a positive finite number otherwise."""
    if scale is None:
        return 1.0 / math.sqrt(spec.head_dim_qk)
    if isinstance(scale, bool) or not isinstance(scale, int | float):
        raise TypeError(f"scale: expected a float or None, got {type(scale).__name__}")
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale: expected a positive finite number, got {scale}")
    return float(scale)


def check_window(window: Any, spec: LaunchSpec) -> list[int]:
    """(left, right) of a `Mask window(L, R)` kernel (its TL defaults when None); [-1, -1] otherwise."""
    if spec.mask != "window":
        if window is not None:
            raise TypeError(
                f"window: {spec.kernel_name} has `Mask {spec.mask}`, not `Mask window(L, R)`; "
                "it takes no window= argument"
            )
        return [-1, -1]
    if window is None:
        return [int(spec.window[0]), int(spec.window[1])]
    if (
        not isinstance(window, tuple | list)
        or len(window) != 2
        or not all(isinstance(w, int) and not isinstance(w, bool) for w in window)
    ):
        raise TypeError(f"window: expected (left, right) as two ints, got {window!r}")
    return [int(window[0]), int(window[1])]


def check_extras(
    spec: LaunchSpec, shapes: Shapes, device: Any, extras: dict[str, Any]
) -> tuple[list[Any], list[float]]:
    """The runtime scalars and side tensors given by their TL names, in the kernel's parameter order:
    (side tensors, scalars). A scalar not given takes its `Scalar NAME = default`."""
    import torch

    program = spec.program or {}
    extras = dict(extras)
    scalars: list[float] = []
    for name, ty, default in program.get("scalars", ()):
        value = extras.pop(name, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"{name}: the kernel's Scalar {name} takes a number, got {type(value).__name__}")
        if ty != "f32" and value != int(value):
            raise TypeError(f"{name}: the kernel's Scalar {name} is an integer, got {value!r}")
        if ty != "f32" and not -(2**31) <= value < 2**31:
            raise ValueError(f"{name}: {value} does not fit the kernel's int32 Scalar {name}")
        scalars.append(float(value))
    sizes = {
        "batch": shapes.batch,
        "seqlen_q": shapes.seqlen_q,
        "seqlen_k": shapes.seqlen_k,
        "heads": shapes.heads,
        "heads_kv": shapes.heads_kv,
    }
    tensors: list[Any] = []
    for name, dims, dtype in program.get("tensors", ()):
        if name not in extras:
            raise TypeError(
                f"{name}: missing side tensor ({dtype}, dims {tuple(dims)}) of {spec.kernel_name}"
            )
        t = extras.pop(name)
        want = torch.float32 if dtype == "float32" else torch.int32
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor ({dtype}), got {type(t).__name__}")
        if t.dtype != want:
            raise TypeError(f"{name}: dtype {t.dtype}, the kernel declares it {want}")
        if t.device != device:
            raise ValueError(f"{name}: tensor is on {t.device}, but q is on {device}")
        shape = tuple(d if isinstance(d, int) else sizes[d] for d in dims)
        if tuple(t.shape) != shape:
            raise ValueError(f"{name}: shape {tuple(t.shape)}, expected {shape} (dims {tuple(dims)})")
        tensors.append(t)
    if extras:
        names = [n for n, _, _ in program.get("scalars", ())] + [n for n, _, _ in program.get("tensors", ())]
        takes = ", ".join(names) if names else "no runtime scalars or side tensors"
        raise TypeError(
            f"unexpected keyword argument(s) {', '.join(map(repr, extras))} for {spec.kernel_name} "
            f"(it takes {takes})"
        )
    return tensors, scalars
