"""Launch an inference kernel (split-KV decode, paged KV, packed batches) on PyTorch tensors.

`decode_attention` is the public entry point: it checks the tensors against the kernel's spec, picks the
split count when the TL leaves it to the launch (`Param splits = 0`, `num_splits_heuristic`), launches
the attention kernel and, with more than one split, `<name>_combine`, on PyTorch's current stream.
The kernel ABI is `runner.abi.INFERENCE_PARAMS`.

Layouts (the last dim contiguous, 16-byte aligned rows):
- q (batch, seqlen_q, heads, d); o alike; lse (batch, heads, seqlen_q) fp32;
- contiguous K/V (batch, seqlen_k, heads_kv, d), optionally with cache_seqlens (batch,) int32;
- paged K/V (pages, page_size, heads_kv, d) with block_table (batch, max_pages) int32 and
  cache_seqlens (batch,) int32;
- packed batch (varlen): q (total_q, heads, d), k / v (total_k, heads_kv, d), cu_seqlens_q / _k
  (batch + 1,) int32; o (total_q, heads, d_v), lse (heads, total_q).
"""

from __future__ import annotations

import functools
import math
from typing import Any

from runner.abi import COMBINE_PARAMS, COMBINE_THREADS, INFERENCE_PARAMS, LaunchSpec, program_params
from runner.launch import LaunchError, LoadedKernel, program_args, sm_count, torch_dtype
from runner.struct_launch import StructLauncher

MAX_SPLITS = 128  # the combine kernel's limit (tl_language.inference.MAX_SPLITS)
SMEM_PER_SM = 228 * 1024  # shared memory of an sm_80/sm_90 SM (1 KB of it reserved per block)
THREADS_PER_SM = 2048


def blocks_per_sm(spec: LaunchSpec) -> int:
    """How many of the kernel's blocks fit on one SM by shared memory and threads (registers permitting)."""
    by_smem = SMEM_PER_SM // (spec.shared_bytes + 1024)
    return max(1, min(by_smem, THREADS_PER_SM // spec.threads, 32))


@functools.cache
def num_splits_heuristic(tiles: int, n_blocks: int, sms: int, per_sm: int) -> int:
    """Splits of each tile's key range so that the grid's blocks fill whole waves of the GPU's
    `sms · per_sm` resident blocks: the fewest splits whose wave efficiency (blocks / slots of the
    waves they occupy) reaches 90 %, else the fewest within 95 % of the best; at most one split per
    key block and at most MAX_SPLITS. Unlike FlashAttention 2's rule this also splits a grid of 1.3
    waves (B 64 × 8 K/V heads on 132 SMs × 3: 512 tiles run at 65 % of the second wave, 3 splits at 97 %)."""
    slots = sms * per_sm
    limit = max(1, min(MAX_SPLITS, n_blocks))
    if tiles <= 0 or limit == 1:
        return 1

    def efficiency(s: int) -> float:
        blocks = tiles * s
        return blocks / (math.ceil(blocks / slots) * slots)

    good = next((s for s in range(1, limit + 1) if efficiency(s) >= 0.9), None)
    if good is not None:
        return good
    best = max(efficiency(s) for s in range(1, limit + 1))
    return next(s for s in range(1, limit + 1) if efficiency(s) >= 0.95 * best)


def _check(name: str, t: Any, dtype: Any, device: Any, dims: int, last: int | None = None) -> None:
    import torch

    if not isinstance(t, torch.Tensor):
        raise LaunchError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.device != device:
        raise LaunchError(f"{name}: tensor is on {t.device}, expected {device}")
    if t.dtype != dtype:
        raise LaunchError(f"{name}: dtype {t.dtype}, expected {dtype}")
    if t.dim() != dims:
        raise LaunchError(f"{name}: expected {dims} dims, got shape {tuple(t.shape)}")
    if last is not None:
        if t.shape[-1] != last:
            raise LaunchError(f"{name}: last dim {t.shape[-1]}, the kernel was built for {last}")
        if t.stride(-1) != 1 or t.data_ptr() % 16 or any(s % 8 for s in t.stride()[:-1] if s):
            raise LaunchError(f"{name}: the last dim must be contiguous with 16-byte aligned rows")


def _int_vector(name: str, t: Any, n: int, device: Any) -> None:
    import torch

    _check(name, t, torch.int32, device, 1)
    if t.shape[0] != n or not t.is_contiguous():
        raise LaunchError(f"{name}: expected a contiguous int32 vector of {n}, got shape {tuple(t.shape)}")


def decode_attention(
    loaded: LoadedKernel,
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
    softmax_scale: float | None = None,
    window: tuple[int, int] | None = None,
    extras: dict[str, Any] | None = None,
    out: tuple[Any, Any] | None = None,
) -> tuple[Any, Any]:
    """Run an inference kernel; returns (o, lse) (`out` = preallocated (o, lse) to write into).

    `num_splits`: None takes the TL's `Param splits` (0 there: `num_splits_heuristic`); a number
    overrides it. `max_seqlen_*` of a packed batch are read from the cu_seqlens when not given (a
    device-to-host copy). `extras`: the program's runtime scalars and side tensors by TL name (side-tensor
    dims `seqlen_q` / `seqlen_k` are the maxima)."""
    import torch

    spec = loaded.spec
    inf = spec.inference
    if not inf:
        raise LaunchError(
            f"{spec.kernel_name} is no inference kernel; launch it with runner.launch.attention"
        )
    dtype = torch_dtype(spec.dtype)
    device = q.device
    page = int(inf["page_size"])
    varlen = bool(inf["varlen"])
    dims = 3 if varlen else 4
    _check("q", q, dtype, device, dims, spec.head_dim_qk)
    _check("k", k, dtype, device, dims if not page else 4, spec.head_dim_qk)
    _check("v", v, dtype, device, dims if not page else 4, spec.head_dim_v)
    if tuple(k.shape[:-1]) != tuple(v.shape[:-1]):
        raise LaunchError(f"k {tuple(k.shape)} and v {tuple(v.shape)} disagree")
    heads, heads_kv = q.shape[-2], k.shape[-2]
    if heads_kv == 0 or heads % heads_kv:
        raise LaunchError(f"query heads ({heads}) must be a multiple of key/value heads ({heads_kv})")
    if spec.group and heads // heads_kv != spec.group:
        raise LaunchError(f"the kernel was built for GQA group {spec.group}, got {heads}/{heads_kv}")
    if spec.heads_kv and heads_kv != spec.heads_kv:
        raise LaunchError(f"the kernel was built for {spec.heads_kv} key/value heads, got {heads_kv}")
    if varlen:
        if cu_seqlens_q is None or cu_seqlens_k is None:
            raise LaunchError(f"{spec.kernel_name} takes a packed batch: give cu_seqlens_q and cu_seqlens_k")
        batch = cu_seqlens_q.shape[0] - 1
        _int_vector("cu_seqlens_q", cu_seqlens_q, batch + 1, device)
        _int_vector("cu_seqlens_k", cu_seqlens_k, batch + 1, device)
        if max_seqlen_q is None:
            max_seqlen_q = int((cu_seqlens_q[1:] - cu_seqlens_q[:-1]).max().item()) if batch else 0
        if max_seqlen_k is None:
            max_seqlen_k = int((cu_seqlens_k[1:] - cu_seqlens_k[:-1]).max().item()) if batch else 0
        total_q = q.shape[0]
    else:
        batch, max_seqlen_q = q.shape[0], q.shape[1]
        if page:
            if block_table is None or cache_seqlens is None:
                raise LaunchError(
                    f"{spec.kernel_name} reads a paged KV cache: give block_table and cache_seqlens"
                )
            if k.shape[1] != page:
                raise LaunchError(f"k: pages of {k.shape[1]} tokens, the kernel was built for {page}")
            _check("block_table", block_table, torch.int32, device, 2)
            if block_table.shape[0] != batch or block_table.stride(1) != 1:
                raise LaunchError(
                    f"block_table: expected (batch={batch}, max_pages) int32 with contiguous rows"
                )
            max_seqlen_k = max_seqlen_k if max_seqlen_k is not None else block_table.shape[1] * page
        else:
            if k.shape[0] != batch:
                raise LaunchError(f"batch sizes differ: q {batch}, k {k.shape[0]}")
            max_seqlen_k = k.shape[1]
        if cache_seqlens is not None:
            _int_vector("cache_seqlens", cache_seqlens, batch, device)
        total_q = batch * max_seqlen_q
    assert max_seqlen_q is not None and max_seqlen_k is not None
    pack = bool(inf["pack_gqa"])
    group = heads // heads_kv
    m_blocks = math.ceil(max_seqlen_q * (group if pack else 1) / spec.block_m)
    heads_z = heads_kv if pack else heads
    splits = num_splits if num_splits is not None else int(inf["splits"])
    if splits == 0:
        n_blocks = math.ceil(max_seqlen_k / max(1, spec.block_n))
        splits = num_splits_heuristic(
            m_blocks * batch * heads_z, n_blocks, sm_count(device.index), blocks_per_sm(spec)
        )
    if splits < 1 or splits > MAX_SPLITS or (splits > 1 and not spec.combine_name):
        raise LaunchError(
            f"num_splits = {splits}: this kernel takes "
            f"{'1 to ' + str(MAX_SPLITS) if spec.combine_name else '1 (it has no combine kernel)'}"
        )

    if out is not None:
        o, lse = out
    else:
        o = torch.empty(*q.shape[:-1], spec.head_dim_v, dtype=dtype, device=device)
        lse_shape = (heads, total_q) if varlen else (batch, heads, max_seqlen_q)
        lse = torch.empty(lse_shape, dtype=torch.float32, device=device)
    _check("o", o, dtype, device, dims, spec.head_dim_v)
    if tuple(o.shape[:-1]) != tuple(q.shape[:-1]):
        raise LaunchError(f"o: shape {tuple(o.shape)} does not match q's {tuple(q.shape)}")
    if batch == 0 or total_q == 0 or heads == 0:
        return o, lse
    accum = None
    if splits > 1:
        accum = (
            torch.empty(
                splits, batch, heads, max_seqlen_q, spec.head_dim_v, dtype=torch.float32, device=device
            ),
            torch.empty(splits, batch, heads, max_seqlen_q, dtype=torch.float32, device=device),
        )

    def ptr(t: Any) -> int:
        return 0 if t is None else int(t.data_ptr())

    def strides(t: Any) -> tuple[int, int, int]:
        if t.dim() == 3:  # packed batch: (total, heads, d)
            return (0, t.stride(0), t.stride(1))
        return (t.stride(0), t.stride(1), t.stride(2))

    values: dict[str, Any] = {
        "q": ptr(q), "k": ptr(k), "v": ptr(v), "o": ptr(o), "lse": ptr(lse),
        "o_accum": ptr(accum[0]) if accum else 0, "lse_accum": ptr(accum[1]) if accum else 0,
        "block_table": ptr(block_table) if page else 0,
        "cache_seqlens": ptr(cache_seqlens) if not varlen else 0,
        "cu_seqlens_q": ptr(cu_seqlens_q) if varlen else 0,
        "cu_seqlens_k": ptr(cu_seqlens_k) if varlen else 0,
        "batch": batch, "max_seqlen_q": max_seqlen_q, "max_seqlen_k": max_seqlen_k,
        "heads": heads, "heads_kv": heads_kv, "num_splits": splits,
        "max_pages": block_table.shape[1] if page else 0,
        "softmax_scale": softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(spec.head_dim_qk),
        "window_left": -1, "window_right": -1,
    }  # fmt: skip
    if spec.mask == "window":
        win = window if window is not None else tuple(spec.window)
        values["window_left"], values["window_right"] = int(win[0]), int(win[1])
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        for which, s in zip(("batch", "row", "head"), strides(t), strict=True):
            values[f"{name}_{which}_stride"] = s
    if values["softmax_scale"] <= 0:
        raise LaunchError(f"softmax_scale must be positive, got {values['softmax_scale']}")
    main, combine = _launchers(loaded)
    tail: list[Any] = []
    program = spec.program or {}
    if program.get("scalars") or program.get("tensors"):
        sizes_like = torch.empty((batch, max_seqlen_q, heads, 0), device=device)  # program_args reads sizes
        extra = {**(extras or {}), "_seqlen_k": max_seqlen_k, "_heads_kv": heads_kv}
        tail = [value.item() for _, value in program_args(spec, sizes_like, extra)]
    elif extras:
        raise LaunchError(f"unknown launch argument(s) {', '.join(map(repr, extras))} for {spec.kernel_name}")
    stream = _stream_handle(device)
    grid = (m_blocks * splits, batch, heads_z)
    main.launch(
        grid, spec.threads, spec.shared_bytes, stream, [*(values[n] for n in _INFERENCE_NAMES), *tail]
    )
    if accum is not None:
        if combine is None:
            raise LaunchError(f"{spec.kernel_name}: its combine kernel is missing; rebuild with `tl build`")
        o_strides = strides(o)
        rows = batch * heads * max_seqlen_q
        combine_values = (
            accum[0].data_ptr(), accum[1].data_ptr(), o.data_ptr(), lse.data_ptr(),
            batch, max_seqlen_q, heads, splits, *o_strides,
        )  # fmt: skip
        combine.launch(
            (math.ceil(rows / (COMBINE_THREADS // 32)), 1, 1), COMBINE_THREADS, 0, stream, combine_values
        )
    return o, lse


def _stream_handle(device: Any) -> int:
    """PyTorch's current stream on `device` (the launches order with the surrounding torch work)."""
    import torch

    return int(torch.cuda.current_stream(device).cuda_stream)


_INFERENCE_NAMES = tuple(p[0] for p in INFERENCE_PARAMS)
_LAUNCHERS: dict[int, tuple[LoadedKernel, StructLauncher, StructLauncher | None]] = {}


def _launchers(loaded: LoadedKernel) -> tuple[StructLauncher, StructLauncher | None]:
    """The kernel's and its combine kernel's launchers, built on first use (keyed by the loaded kernel,
    which the entry keeps alive)."""
    entry = _LAUNCHERS.get(id(loaded))
    if entry is None or entry[0] is not loaded:
        params = INFERENCE_PARAMS + program_params(loaded.spec.program)
        combine = StructLauncher(loaded.combine_kernel, COMBINE_PARAMS) if loaded.combine_kernel else None
        entry = (loaded, StructLauncher(loaded.kernel, params), combine)
        _LAUNCHERS[id(loaded)] = entry
    return entry[1], entry[2]
