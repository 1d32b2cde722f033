"""`tl_attention.compile_decode`: a TL inference kernel (split-KV decode, paged KV, packed batches;
`examples/inference/`) as a PyTorch callable backed by the `tl_attention::inference` custom op.

    kernel = tl_attention.compile_decode("examples/inference/paged_decode.tl", target="auto")
    o = kernel(q, k_cache, v_cache, block_table=table, cache_seqlens=lens)       # decode, paged
    o = kernel(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=m, max_seqlen_k=m)  # varlen

Layouts are FlashAttention's (`tl_attention.decode_checks`); the arguments are checked before the op.
The op has a fake kernel (meta / fake tensors, `torch.compile(fullgraph=True)`), runs on torch's current
stream and allocates through torch, so a decode step can be captured in a CUDA graph once the kernel is
loaded (call it once first). No autograd: inference kernels have no backward. `block_n="auto"` (the
default) lets each call's shape pick the paged decode's key block (`pipeline.inference`); the split
count follows the TL's `Param splits` (0: from the shape) unless `num_splits=` names one.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from pipeline.build import BuildError
from pipeline.inference import InferenceBuildError, InferenceKernel, build_inference
from pipeline.report import format_build_error
from tl_attention import checks, decode_checks
from tl_attention.kernel import TLError, _read, current_arch, device_family

_KERNELS: dict[str, DecodeKernel] = {}
_LOCK = threading.Lock()


@dataclass(eq=False)
class DecodeKernel:
    """A checked, translated TL inference kernel; compiled and loaded on first use on a device."""

    built: InferenceKernel
    origin: str
    key: str
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def spec(self) -> Any:
        return self.built.spec

    @property
    def name(self) -> str:
        return self.spec.kernel_name

    @property
    def kind(self) -> str:
        """'paged', 'contiguous' or 'varlen'."""
        return decode_checks.kind(self.spec)

    def __call__(
        self,
        q: Any,
        k: Any,
        v: Any,
        *,
        block_table: Any = None,
        cache_seqlens: Any = None,
        cu_seqlens_q: Any = None,
        cu_seqlens_k: Any = None,
        max_seqlen_q: int | None = None,
        max_seqlen_k: int | None = None,
        num_splits: int | None = None,
        scale: float | None = None,
        return_lse: bool = False,
        **extras: Any,
    ) -> Any:
        """o in q's layout, and with `return_lse` also lse float32 ((batch, heads, seqlen_q), or
        (heads, total_q) for a packed batch). `extras`: the TL's runtime Scalars and side tensors."""
        spec = self.spec
        shapes = decode_checks.check_call(
            spec, q, k, v, block_table=block_table, cache_seqlens=cache_seqlens, cu_seqlens_q=cu_seqlens_q,
            cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
            num_splits=num_splits,
        )  # fmt: skip
        softmax_scale = checks.check_scale(scale, spec)
        tensors, scalars = checks.check_extras(spec, shapes, q.device, extras)
        if return_lse and not spec.writes_lse:
            raise ValueError(f"return_lse: {self.name} has no softmax, so it has no log-sum-exp to return")
        o, lse = inference_op(
            self.key, q, k, v, block_table, cache_seqlens, cu_seqlens_q, cu_seqlens_k,
            shapes.seqlen_q, shapes.seqlen_k, -1 if num_splits is None else num_splits, softmax_scale,
            [t.contiguous() for t in tensors], scalars,
        )  # fmt: skip
        return (o, lse) if return_lse else o

    def load(self) -> None:
        """Compile (through the disk cache) and load for the current device; a CUDA graph capture needs it
        done before. The shape-picked twin of a paged decode loads on its first call."""
        with self._lock:
            self.built.load()

    def launch(
        self, q: Tensor, k: Tensor, v: Tensor, index: dict[str, Tensor | None], max_q: int, max_k: int,
        num_splits: int, scale: float, tensors: list[Tensor], scalars: list[float],
    ) -> tuple[Tensor, Tensor]:  # fmt: skip
        """The op's CUDA kernel: arguments already checked."""
        built = self.built.for_shape(q, k)
        if torch.cuda.is_current_stream_capturing() and built._loaded is None:
            raise RuntimeError(
                f"{self.name} is not loaded for this shape yet, and loading a module during CUDA graph "
                "capture would break the capture: call the kernel once on this shape before capturing"
            )
        with self._lock:
            loaded = built.load()
        from runner.decode import decode_attention

        extras: dict[str, Any] = dict(zip([n for n, _, _ in (self.spec.program or {}).get("tensors", ())],
                                          tensors, strict=True))  # fmt: skip
        for (name, ty, _), value in zip((self.spec.program or {}).get("scalars", ()), scalars, strict=True):
            extras[name] = value if ty == "f32" else int(value)
        varlen = self.kind == "varlen"
        o, lse = decode_attention(
            loaded, q, k, v, **{n: t for n, t in index.items() if t is not None},
            max_seqlen_q=max_q if varlen else None, max_seqlen_k=max_k if varlen else None,
            num_splits=None if num_splits < 0 else num_splits, softmax_scale=scale, extras=extras or None,
        )  # fmt: skip
        if not self.spec.writes_lse:
            lse.fill_(float("nan"))  # no softmax, no log-sum-exp: never hand out uninitialised memory
        return o, lse


def compile_decode(
    source: str | Path, *, target: str | None = None, block_n: str | None = "auto", lazy: bool = False
) -> DecodeKernel:
    """An inference kernel from a path or TL text (see the module docstring). `target`: None keeps the
    TL's, "auto" the current device's family, or a name ("sm_80"). `lazy`: do not compile until the first
    call even with a device. Raises `TLError` for a TL that does not check or is no inference kernel."""
    text, path, origin = _read(source)
    device_arch = current_arch()
    if target == "auto":
        target = device_family(device_arch) if device_arch else None
    try:
        built = build_inference(text if path.name == "inline.tl" else path, target=target, block_n=block_n)
    except BuildError as err:
        raise TLError(f"{origin}: {err.message}\n{format_build_error(err)}", err.diagnostics) from None
    except InferenceBuildError as err:
        raise TLError(f"{origin}: {err}", []) from None
    t = built.translated
    digest = hashlib.sha256(f"{t.source}\0{t.spec.to_json()}\0{block_n}".encode()).hexdigest()[:16]
    key = f"tl-inference:{t.spec.kernel_name}:{digest}"
    with _LOCK:
        kernel = _KERNELS.setdefault(key, DecodeKernel(built=built, origin=origin, key=key))
    if device_arch is not None and not lazy:
        kernel.load()
    return kernel


@torch.library.custom_op("tl_attention::inference", mutates_args=(), device_types="cuda")
def inference_op(
    key: str,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    block_table: Tensor | None,
    cache_seqlens: Tensor | None,
    cu_seqlens_q: Tensor | None,
    cu_seqlens_k: Tensor | None,
    max_seqlen_q: int,
    max_seqlen_k: int,
    num_splits: int,
    scale: float,
    tensors: list[Tensor],
    scalars: list[float],
) -> tuple[Tensor, Tensor]:
    """o (q's shape with v's head dim) and lse float32; num_splits −1: the kernel's own choice."""
    index = {"block_table": block_table, "cache_seqlens": cache_seqlens, "cu_seqlens_q": cu_seqlens_q,
             "cu_seqlens_k": cu_seqlens_k}  # fmt: skip
    return _KERNELS[key].launch(
        q, k, v, index, max_seqlen_q, max_seqlen_k, num_splits, scale, tensors, scalars
    )


@inference_op.register_fake
def _inference_fake(
    key: str,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    block_table: Tensor | None,
    cache_seqlens: Tensor | None,
    cu_seqlens_q: Tensor | None,
    cu_seqlens_k: Tensor | None,
    max_seqlen_q: int,
    max_seqlen_k: int,
    num_splits: int,
    scale: float,
    tensors: list[Tensor],
    scalars: list[float],
) -> tuple[Tensor, Tensor]:
    o = q.new_empty(*q.shape[:-1], v.shape[-1])
    if cu_seqlens_q is not None:  # a packed batch: (heads, total_q)
        return o, q.new_empty(q.shape[1], q.shape[0], dtype=torch.float32)
    return o, q.new_empty(q.shape[0], q.shape[2], q.shape[1], dtype=torch.float32)
