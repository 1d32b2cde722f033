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
import threading
from dataclasses import dataclass, field
from typing import Any

from runner.abi import (
    COMBINE_CHUNK,
    COMBINE_PARAMS,
    COMBINE_THREADS,
    INFERENCE_PARAMS,
    LEGACY_COMBINE_THREADS,
    TMA_ABI,
    TMA_PARAMS,
    LaunchSpec,
    program_params,
)
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


def combine_warps_per_row(splits: int, warps: int = COMBINE_THREADS // 32) -> int:
    """How many of the combine kernel's `warps` (a block's) share one output row: the fewest (a power of
    two) for which each warp loads about one chunk of partial rows (`COMBINE_CHUNK`, all in flight
    together), at most all of them and at most 32 / COMBINE_CHUNK (the kernel's split lanes)."""
    want = math.ceil(splits / COMBINE_CHUNK)
    most = min(warps, 32 // COMBINE_CHUNK)
    return next(w for w in (1, 2, 4, 8) if w >= want or w >= most)


def tile_grid(spec: LaunchSpec, max_seqlen_q: int, heads: int, heads_kv: int) -> tuple[int, int]:
    """(query tiles per (batch, head slot), head slots): packed GQA puts a K/V head's query heads in one
    tile space of max_seqlen_q · group rows."""
    pack = bool((spec.inference or {}).get("pack_gqa"))
    group = heads // heads_kv
    return math.ceil(max_seqlen_q * (group if pack else 1) / spec.block_m), heads_kv if pack else heads


def auto_splits(
    spec: LaunchSpec, batch: int, max_seqlen_q: int, heads: int, heads_kv: int, max_seqlen_k: int, sms: int
) -> int:
    """The split count `Param splits = 0` launches with on a GPU of `sms` SMs."""
    m_blocks, heads_z = tile_grid(spec, max_seqlen_q, heads, heads_kv)
    n_blocks = math.ceil(max_seqlen_k / max(1, spec.block_n))
    return num_splits_heuristic(m_blocks * batch * heads_z, n_blocks, sms, blocks_per_sm(spec))


# Paged decode's key block by shape, from two H200 runs (docs/results/2026-12-01-h200-decode-graph.json):
# a grid whose (batch, K/V head) tiles fill a wave of the BN-64 kernel's resident blocks ran 2 % faster
# with BN 32 (paged B 64 × 4k: 4295 against 4204 GB/s; 4261 against 4163 the run before), where BN 32's
# six blocks per SM hide the page walk better; with fewer tiles the splits fill the GPU, and BN 32 lost
# 0.5–9 % (B 8 × 32k, B 1 × 128k). Contiguous KV ran best with BN 64 at every shape.
SMALL_BLOCK_N = 32


def preferred_block_n(
    spec: LaunchSpec, batch: int, max_seqlen_q: int, heads: int, heads_kv: int, sms: int
) -> int:
    """The key block (BN) a decode launch of `spec`'s kernel should use at this shape: SMALL_BLOCK_N for a
    BN-64 paged kernel whose tiles alone fill a wave of its resident blocks, else the kernel's own."""
    inf = spec.inference or {}
    if spec.block_n != 64 or not inf.get("page_size") or inf.get("varlen"):
        return spec.block_n
    m_blocks, heads_z = tile_grid(spec, max_seqlen_q, heads, heads_kv)
    return SMALL_BLOCK_N if m_blocks * batch * heads_z >= sms * blocks_per_sm(spec) else spec.block_n


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
    dims `seqlen_q` / `seqlen_k` are the maxima).

    Everything but the data pointers is checked and packed once per call signature (shapes, strides,
    dtypes, lengths, options) and kept in a `_Plan`; a repeated call only checks alignment, allocates the
    outputs and launches (decode steps are ~100 µs of GPU time, so host time per call matters)."""
    if loaded.spec.inference and loaded.spec.inference["varlen"] and cu_seqlens_q is not None:
        if max_seqlen_q is None:
            max_seqlen_q = _max_length(cu_seqlens_q)
        if max_seqlen_k is None and cu_seqlens_k is not None:
            max_seqlen_k = _max_length(cu_seqlens_k)
    key = (
        id(loaded), _meta(q), _meta(k), _meta(v), _meta(block_table), _meta(cache_seqlens),
        _meta(cu_seqlens_q), _meta(cu_seqlens_k), max_seqlen_q, max_seqlen_k, num_splits, softmax_scale,
        None if window is None else tuple(window), None if out is None else (_meta(out[0]), _meta(out[1])),
        None if extras is None else tuple(extras),
    )  # fmt: skip
    plan = _PLANS.get(key)
    if plan is None:
        plan = _plan(
            loaded, q, k, v, block_table=block_table, cache_seqlens=cache_seqlens, cu_seqlens_q=cu_seqlens_q,
            cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
            num_splits=num_splits, softmax_scale=softmax_scale, window=window, extras=extras, out=out,
        )  # fmt: skip
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.pop(next(iter(_PLANS)))
        _PLANS[key] = plan
    return plan.run(q, k, v, (block_table, cache_seqlens, cu_seqlens_q, cu_seqlens_k), extras, out)


def _max_length(cu_seqlens: Any) -> int:
    n = cu_seqlens.shape[0] - 1
    return int((cu_seqlens[1:] - cu_seqlens[:-1]).max().item()) if n > 0 else 0


def _meta(t: Any) -> Any:
    """What a call signature keeps of a tensor argument (a non-tensor keeps its type: the plan refuses it)."""
    import torch

    if t is None:
        return None
    if not isinstance(t, torch.Tensor):
        return type(t)
    return (tuple(t.shape), t.stride(), t.dtype, t.device)


_PLANS: dict[tuple, _Plan] = {}
_MAX_PLANS = 256  # call signatures kept (oldest dropped first); each holds two argument structs
_POINTERS = ("q", "k", "v", "o", "lse")
_INDEX_NAMES = ("block_table", "cache_seqlens", "cu_seqlens_q", "cu_seqlens_k")


@dataclass(eq=False)
class _Plan:
    """One call signature's launches: the argument structs with every non-pointer field set."""

    loaded: LoadedKernel  # kept alive: the plan's key holds its id
    main: StructLauncher
    combine: StructLauncher | None
    grid: tuple[int, int, int]
    combine_grid: tuple[int, int, int]
    combine_block: int  # threads of a combine block
    o_shape: tuple[int, ...]
    lse_shape: tuple[int, ...]
    accum_numel: tuple[int, int]  # (o_accum, lse_accum) floats; (0, 0) without splits
    dtype: Any
    device: Any
    empty: bool  # nothing to compute (no sequence, row or head): the outputs come back unwritten
    used: tuple[bool, bool, bool, bool]  # the kernel reads block_table, cache_seqlens, cu_seqlens_q/_k
    tail: Any = None  # (extras) -> program values, when the program has runtime scalars or side tensors
    tma: bool = False  # TMA descriptors of q, k, v, o follow the ABI (the sm_90 packed prefill)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def run(
        self, q: Any, k: Any, v: Any, index: tuple[Any, ...], extras: dict[str, Any] | None, out: Any
    ) -> tuple[Any, Any]:
        import torch

        if out is not None:
            o, lse = out
        else:
            o = torch.empty(self.o_shape, dtype=self.dtype, device=self.device)
            lse = torch.empty(self.lse_shape, dtype=torch.float32, device=self.device)
        if self.empty:
            return o, lse
        ptrs = (q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr())
        if any(p % 16 for p in ptrs):
            bad = [n for n, p in zip(_POINTERS, ptrs, strict=False) if p % 16]
            raise LaunchError(f"{', '.join(bad)}: the last dim must be contiguous with 16-byte aligned rows")
        values = dict(zip(_POINTERS, (*ptrs, lse.data_ptr()), strict=True))
        for name, t, used in zip(_INDEX_NAMES, index, self.used, strict=True):
            values[name] = t.data_ptr() if used else 0
        n_o, n_lse = self.accum_numel
        accum = None
        if n_o:
            accum = torch.empty(n_o + n_lse, dtype=torch.float32, device=self.device)  # one allocation
            values["o_accum"] = accum.data_ptr()
            values["lse_accum"] = values["o_accum"] + 4 * n_o
        if self.tail is not None:
            values.update(self.tail(extras))
        stream = _stream_handle(self.device)
        spec = self.loaded.spec
        maps = _tensor_maps(spec, q, k, v, o) if self.tma else ()
        with self.lock:  # the argument structs are shared by every thread calling this signature
            self.main.set(values)
            for name, tensor_map in zip(TMA_PARAMS, maps, strict=False):
                self.main.set_tensor_map(name, tensor_map)
            self.main.fire(self.grid, spec.threads, spec.shared_bytes, stream)
            if self.combine is not None:
                self.combine.set({"o_accum": values["o_accum"], "lse_accum": values["lse_accum"],
                                  "o": ptrs[3], "lse": values["lse"]})  # fmt: skip
                self.combine.fire(self.combine_grid, self.combine_block, 0, stream)
        del accum  # freed in stream order: the caching allocator reuses it only after these launches
        return o, lse


def _plan(
    loaded: LoadedKernel,
    q: Any,
    k: Any,
    v: Any,
    *,
    block_table: Any,
    cache_seqlens: Any,
    cu_seqlens_q: Any,
    cu_seqlens_k: Any,
    max_seqlen_q: int | None,
    max_seqlen_k: int | None,
    num_splits: int | None,
    softmax_scale: float | None,
    window: tuple[int, int] | None,
    extras: dict[str, Any] | None,
    out: tuple[Any, Any] | None,
) -> _Plan:
    """Check a call signature and pack its launches (raises LaunchError naming what is wrong)."""
    import torch

    spec = loaded.spec
    inf = spec.inference
    if not inf:
        raise LaunchError(
            f"{spec.kernel_name} is no inference kernel; launch it with runner.launch.attention"
        )
    dtype = torch_dtype(spec.dtype)
    if not isinstance(q, torch.Tensor):
        raise LaunchError(f"q: expected a torch.Tensor, got {type(q).__name__}")
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
        max_seqlen_q = max_seqlen_q if max_seqlen_q is not None else _max_length(cu_seqlens_q)
        max_seqlen_k = max_seqlen_k if max_seqlen_k is not None else _max_length(cu_seqlens_k)
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
    m_blocks, heads_z = tile_grid(spec, max_seqlen_q, heads, heads_kv)
    splits = num_splits if num_splits is not None else int(inf["splits"])
    if splits == 0:
        splits = auto_splits(spec, batch, max_seqlen_q, heads, heads_kv, max_seqlen_k, sm_count(device.index))
    if splits < 1 or splits > MAX_SPLITS or (splits > 1 and not spec.combine_name):
        raise LaunchError(
            f"num_splits = {splits}: this kernel takes "
            f"{'1 to ' + str(MAX_SPLITS) if spec.combine_name else '1 (it has no combine kernel)'}"
        )
    o_shape = (*q.shape[:-1], spec.head_dim_v)
    lse_shape = (heads, total_q) if varlen else (batch, heads, max_seqlen_q)
    if out is not None:
        o, lse = out
        _check("o", o, dtype, device, dims, spec.head_dim_v)
        if tuple(o.shape) != o_shape:
            raise LaunchError(f"o: shape {tuple(o.shape)} does not match q's {tuple(q.shape)}")
        _check("lse", lse, torch.float32, device, len(lse_shape))
        if tuple(lse.shape) != lse_shape or not lse.is_contiguous():
            raise LaunchError(f"lse: expected a contiguous float32 {lse_shape}, got {tuple(lse.shape)}")
        o_strides = _strides(o)
    else:
        o_strides = _strides(torch.empty(o_shape, device="meta"))
    program = spec.program or {}
    if extras and not (program.get("scalars") or program.get("tensors")):
        raise LaunchError(f"unknown launch argument(s) {', '.join(map(repr, extras))} for {spec.kernel_name}")

    values: dict[str, Any] = {
        "batch": batch, "max_seqlen_q": max_seqlen_q, "max_seqlen_k": max_seqlen_k,
        "heads": heads, "heads_kv": heads_kv, "num_splits": splits,
        "max_pages": block_table.shape[1] if page else 0,
        "softmax_scale": softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(spec.head_dim_qk),
        "window_left": -1, "window_right": -1, "o_accum": 0, "lse_accum": 0,
    }  # fmt: skip
    if spec.mask == "window":
        win = window if window is not None else tuple(spec.window)
        values["window_left"], values["window_right"] = int(win[0]), int(win[1])
    for name, strides in (("q", _strides(q)), ("k", _strides(k)), ("v", _strides(v)), ("o", o_strides)):
        for which, s in zip(("batch", "row", "head"), strides, strict=True):
            values[f"{name}_{which}_stride"] = s
    if values["softmax_scale"] <= 0:
        raise LaunchError(f"softmax_scale must be positive, got {values['softmax_scale']}")
    tail = None
    if program.get("scalars") or program.get("tensors"):
        sizes_like = torch.empty((batch, max_seqlen_q, heads, 0), device=device)  # program_args reads sizes
        names = [p[0] for p in program_params(program)]

        def tail(given: dict[str, Any] | None) -> dict[str, Any]:
            extra = {**(given or {}), "_seqlen_k": max_seqlen_k, "_heads_kv": heads_kv}
            args = program_args(spec, sizes_like, extra)
            return {n: value.item() for n, (_, value) in zip(names, args, strict=True)}

        tail(extras)  # the side tensors and scalars are checked before anything is cached
    main = StructLauncher(
        loaded.kernel, INFERENCE_PARAMS + (TMA_ABI if spec.uses_tma else ()) + program_params(spec.program)
    )
    main.set(values)
    combine = None
    if splits > 1:
        if loaded.combine_kernel is None:
            raise LaunchError(f"{spec.kernel_name}: its combine kernel is missing; rebuild with `tl build`")
        combine = StructLauncher(loaded.combine_kernel, COMBINE_PARAMS)
        o_names = ("o_batch_stride", "o_row_stride", "o_head_stride")
        combine.set({"batch": batch, "max_seqlen_q": max_seqlen_q, "heads": heads, "num_splits": splits,
                     **dict(zip(o_names, o_strides, strict=True))})  # fmt: skip
    rows = batch * heads * max_seqlen_q
    combine_grid, combine_block = (0, 1, 1), 0
    if combine is not None:
        warps = int(inf.get("combine_warps") or 0)
        if warps:
            per_row = combine_warps_per_row(splits, warps)
            combine.set({"warps_per_row": per_row})
            combine_grid, combine_block = (math.ceil(rows / (warps // per_row)), 1, 1), 32 * warps
        else:  # a kernel built before `warps_per_row` (no "combine_warps"): four rows of one warp a block
            legacy_rows = LEGACY_COMBINE_THREADS // 32
            combine_grid, combine_block = (math.ceil(rows / legacy_rows), 1, 1), LEGACY_COMBINE_THREADS
    accum = (splits * rows * spec.head_dim_v, splits * rows) if splits > 1 else (0, 0)
    return _Plan(
        loaded=loaded, main=main, combine=combine, grid=(m_blocks * splits, batch, heads_z),
        combine_grid=combine_grid, combine_block=combine_block, o_shape=o_shape, lse_shape=lse_shape,
        accum_numel=accum, dtype=dtype, device=device, empty=batch == 0 or total_q == 0 or heads == 0,
        used=(bool(page), not varlen and cache_seqlens is not None, varlen, varlen), tail=tail,
        tma=spec.uses_tma,
    )  # fmt: skip


def _tensor_maps(spec: LaunchSpec, q: Any, k: Any, v: Any, o: Any) -> list[Any]:
    """TMA descriptors of a packed prefill's (total, heads, d) tensors, each seen as one (1, total, heads,
    d) batch (the kernel offsets rows by cu_seqlens itself); cached by address and layout."""
    from runner import tma

    try:
        return tma.cached_tensor_maps(
            *(t.unsqueeze(0) for t in (q, k, v, o)), block_m=spec.block_m, block_n=spec.block_n
        )
    except tma.TmaError as exc:
        raise LaunchError(f"{spec.kernel_name}: {exc}") from None


def _strides(t: Any) -> tuple[int, int, int]:
    """(batch, row, head) strides; a packed batch's (total, heads, d) has no batch stride."""
    if t.dim() == 3:
        return (0, t.stride(0), t.stride(1))
    return (t.stride(0), t.stride(1), t.stride(2))


def _stream_handle(device: Any) -> int:
    """PyTorch's current stream on `device` (the launches order with the surrounding torch work)."""
    import torch

    return int(torch.cuda.current_stream(device).cuda_stream)
