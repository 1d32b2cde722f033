"""Load the backward's three kernels (`runner.abi.BackwardSpec`) and launch them on PyTorch tensors.

`backward(loaded, q, k, v, o, lse, do)` runs, on PyTorch's current stream:
    <name>_bwd_dot_do_o    D = rowsum(dO ∘ O)                       (and a learnable sink's gradient)
    <name>_bwd_dq_dk_dv    dK, dV (summed over each GQA group), dQ added into an fp32 accumulator
    <name>_bwd_convert_dq  the accumulator → dQ in the input dtype
    <name>_bwd_row_grads   (spec.row_sums > 0) the row correction of gradients uniform over a head
and returns (dq, dk, dv, {learnable side tensor: its fp32 gradient}). `o` and `lse` are the forward's
outputs (LSE natural-log, +inf for a row that kept no key, as the forward kernels write it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from runner.abi import BackwardSpec, backward_tma_box_cols, block_mask_kind
from runner.compile import CompiledKernel
from runner.launch import (
    LaunchError,
    LoadError,
    _check_tensor,
    _opt_in_shared_memory,
    _torch_stream,
    check_block_classes,
    launch_block_classes,
    program_args,
    require_device,
    torch_dtype,
)

PARTS = ("dot_do_o", "dq_dk_dv", "convert_dq")
ROW_GRADS = "row_grads"
BLOCK_MASK = "block_mask"  # the backward's block classes at its tiles, where the forward has a block mask


def dq_splits(spec: BackwardSpec, seqlen_k: int, batch: int, heads_kv: int, sms: int) -> int:
    """Grid columns of dq_dk_dv: one per key block, or (deterministic) as many as fill the SMs once
    (one dq_accum slice each; the column's key blocks run one after another)."""
    n_blocks = math.ceil(seqlen_k / spec.block_n)
    if not spec.deterministic:
        return n_blocks
    return max(1, min(n_blocks, sms // max(1, batch * heads_kv)))


@dataclass
class LoadedBackward:
    spec: BackwardSpec
    compiled: CompiledKernel
    kernels: dict[str, Any]  # part → cuda.core Kernel
    device_id: int
    buffers: dict[str, Any] = field(default_factory=dict)  # the last launch's scratch (kept alive)


def load_backward(compiled: CompiledKernel, spec: BackwardSpec) -> LoadedBackward:
    import torch
    from cuda.core import Device, ObjectCode

    require_device()
    device_id = torch.cuda.current_device()
    torch.cuda.init()
    Device(device_id).set_current()
    try:
        if compiled.kind == "ptx":
            obj = ObjectCode.from_ptx(compiled.code, name=compiled.name)
        else:
            obj = ObjectCode.from_cubin(compiled.code, name=compiled.name)
        parts = PARTS + ((ROW_GRADS,) if spec.row_sums else ())
        parts += (BLOCK_MASK,) if block_mask_kind(spec.program) else ()
        kernels = {part: obj.get_kernel(spec.kernel(part)) for part in parts}
    except Exception as exc:  # cuda.core raises CUDAError with the driver's code in the text
        raise LoadError(
            f"cannot load {compiled.name} ({compiled.kind} for {compiled.target}): {exc}"
        ) from exc
    _opt_in_shared_memory(kernels["dq_dk_dv"], spec.shared_bytes, device_id)
    return LoadedBackward(spec=spec, compiled=compiled, kernels=kernels, device_id=device_id)


def _strides(t: Any) -> list[int]:
    return [t.stride(0), t.stride(1), t.stride(2)]


def backward(
    loaded: LoadedBackward,
    q: Any,
    k: Any,
    v: Any,
    o: Any,
    lse: Any,
    do: Any,
    *,
    softmax_scale: float | None = None,
    window: tuple[int, int] | None = None,
    extras: dict[str, Any] | None = None,
    out: tuple[Any, Any, Any] | None = None,
    block_classes: Any = None,
) -> tuple[Any, Any, Any, dict[str, Any]]:
    """(dq, dk, dv, side-tensor gradients). q (batch, seqlen_q, heads, d), k / v (batch, seqlen_k,
    heads_kv, d), o / do like q, lse (batch, heads, seqlen_q) fp32 contiguous; `extras`: the program's
    runtime scalars and side tensors by their TL names. `out`: preallocated (dq, dk, dv) (the
    verification passes NaN-filled ones). `block_classes`: where the masks read side tensors, the
    classes `backward_block_classes` built for these side tensors and lengths (else classified here at
    every call). Raises LaunchError before launching anything on bad input."""
    import numpy as np
    import torch
    from cuda.core import LaunchConfig
    from cuda.core import launch as cu_launch

    spec = loaded.spec
    dtype = torch_dtype(spec.dtype)
    d = spec.head_dim
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o), ("do", do)):
        _check_tensor(name, t, dtype, d, q.device)
    batch, seqlen_q, heads, _ = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    if tuple(k.shape) != tuple(v.shape) or k.shape[0] != batch:
        raise LaunchError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must match, with q's batch {batch}")
    if heads_kv == 0 or heads % heads_kv:
        raise LaunchError(f"query heads ({heads}) must be a multiple of key/value heads ({heads_kv})")
    for name, t in (("o", o), ("do", do)):
        if tuple(t.shape) != tuple(q.shape):
            raise LaunchError(f"{name}: shape {tuple(t.shape)}, expected q's {tuple(q.shape)}")
    softmax = not spec.program or spec.program.get("normalizer", "softmax") == "softmax"
    if softmax and (
        lse.dtype != torch.float32 or tuple(lse.shape) != (batch, heads, seqlen_q) or not lse.is_contiguous()
    ):
        raise LaunchError(f"lse: expected a contiguous float32 tensor of shape {(batch, heads, seqlen_q)}")
    if q.device.index != loaded.device_id:
        raise LaunchError(
            f"tensors are on cuda:{q.device.index}, the kernels were loaded on cuda:{loaded.device_id}"
        )
    scale, sizes, common, program = _scalar_args(spec, q, k, softmax_scale, window, extras)
    grads: dict[str, Any] = {}
    for name in spec.learnable:
        grads[name] = torch.zeros_like((extras or {})[name], dtype=torch.float32)
    if out is not None:
        dq, dk, dv = out
        for name, t, like in (("dq", dq, q), ("dk", dk, k), ("dv", dv, v)):
            _check_tensor(name, t, dtype, d, q.device)
            if tuple(t.shape) != tuple(like.shape):
                raise LaunchError(f"{name}: shape {tuple(t.shape)}, expected {tuple(like.shape)}")
    else:
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    mask_kind = block_mask_kind(spec.program)
    if block_classes is not None:
        tiles, name = (spec.block_m, spec.block_n), spec.kernel("dq_dk_dv")
        check_block_classes(block_classes, q, k, tiles=tiles, mask_kind=mask_kind, kernel=name)
    if batch == 0 or heads == 0:
        return dq, dk, dv, grads
    if seqlen_q == 0 or seqlen_k == 0:
        dq.zero_()
        dk.zero_()
        dv.zero_()
        return dq, dk, dv, grads
    dpsum = torch.empty(batch, heads, seqlen_q, dtype=torch.float32, device=q.device)
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    splits = dq_splits(spec, seqlen_k, batch, heads_kv, sms)
    slices = splits if spec.deterministic else 1
    m_rows = math.ceil(seqlen_q / spec.block_m) * spec.block_m  # whole query tiles, in fragment order
    # the D kernel clears dq_accum itself where the spec says so (a build of an earlier translator does not)
    alloc = torch.empty if spec.dq_zeroed else torch.zeros
    dq_accum = alloc(slices, batch, heads, m_rows, d, dtype=torch.float32, device=q.device)
    row_sums = (
        torch.zeros(batch, heads, seqlen_q, spec.row_sums, dtype=torch.float32, device=q.device)
        if spec.row_sums
        else None
    )
    lse_arg = lse if softmax else dpsum  # without a softmax the kernels read no LSE
    stream = _torch_stream(q.device)
    classes = block_classes
    if mask_kind:
        if classes is None:
            classes = _classify(loaded, sizes + common, program, q, k)
        program.append(np.uintp(classes.data_ptr()))
    program += [np.uintp(g.data_ptr()) for g in grads.values()]
    if row_sums is not None:
        program.append(np.uintp(row_sums.data_ptr()))
    i64 = np.int64

    pre = [
        np.uintp(o.data_ptr()),
        np.uintp(do.data_ptr()),
        np.uintp(lse_arg.data_ptr()),
        np.uintp(dpsum.data_ptr()),
    ]
    pre += sizes + [i64(s) for s in _strides(o) + _strides(do)] + common + program
    pre_rows = seqlen_q
    if spec.dq_zeroed:  # BACKWARD_PREPROCESS_ZERO_PARAMS; the grid then covers dq_accum's whole tiles
        pre += [np.uintp(dq_accum.data_ptr()), np.int32(m_rows), np.int32(slices)]
        pre_rows = m_rows
    grid = (math.ceil(pre_rows / spec.preprocess_rows), batch, heads)
    cu_launch(stream, LaunchConfig(grid=grid, block=spec.threads), loaded.kernels["dot_do_o"], *pre)

    ptrs = [q, k, v, do, lse_arg, dpsum, dq_accum, dk, dv]
    main = [np.uintp(t.data_ptr()) for t in ptrs] + sizes
    main += [i64(s) for t in (q, k, v, do, dk, dv) for s in _strides(t)] + common + program
    grid = (splits, batch, heads_kv)
    if spec.uses_tma:
        _launch_main_tma(loaded, grid, main, {"q": q, "do": do, "k": k, "v": v})
    else:
        config = LaunchConfig(grid=grid, block=spec.dq_dk_dv_threads, shmem_size=spec.shared_bytes)
        cu_launch(stream, config, loaded.kernels["dq_dk_dv"], *main)

    conv = [np.uintp(dq_accum.data_ptr()), np.uintp(dq.data_ptr()), np.int32(batch), np.int32(seqlen_q)]
    conv += [np.int32(heads)] + [i64(s) for s in _strides(dq)] + [np.int32(slices)]
    if spec.dq_scale:
        conv.append(np.float32(scale))
    grid = (math.ceil(seqlen_q / spec.block_m), batch, heads)
    cu_launch(stream, LaunchConfig(grid=grid, block=spec.threads), loaded.kernels["convert_dq"], *conv)
    if row_sums is not None:
        grid = (math.ceil(seqlen_q / spec.threads), batch, heads)
        cu_launch(stream, LaunchConfig(grid=grid, block=spec.threads), loaded.kernels[ROW_GRADS], *main)
    loaded.buffers = {"dpsum": dpsum, "dq_accum": dq_accum, "row_sums": row_sums, "block_classes": classes}
    return dq, dk, dv, grads


def _classify(loaded: LoadedBackward, head: list[Any], program: list[Any], q: Any, k: Any) -> Any:
    """The backward's block classes at its own tiles (`head`: BLOCK_MASK_PARAMS' values)."""
    spec = loaded.spec
    per_head = block_mask_kind(spec.program) == "per_head"
    kernel = loaded.kernels[BLOCK_MASK]
    tiles = (spec.block_m, spec.block_n)
    return launch_block_classes(kernel, head, program, q, k, tiles=tiles, per_head=per_head)


def backward_block_classes(
    loaded: LoadedBackward,
    q: Any,
    k: Any,
    *,
    softmax_scale: float | None = None,
    window: tuple[int, int] | None = None,
    extras: dict[str, Any] | None = None,
) -> Any:
    """The backward's (batch, heads or 1, m_blocks, n_blocks) uint8 block classes at its own tiles for
    these lengths, window and side tensors, for `backward(..., block_classes=...)`: built once for a
    batch and reused by every layer's backward while the side tensors, scalars and lengths stay (q and k
    give the shapes; their values are not read)."""
    spec = loaded.spec
    if not block_mask_kind(spec.program):
        raise LaunchError(f"{spec.kernel('dq_dk_dv')}: its masks read no side tensor: no block classes")
    _, sizes, common, program = _scalar_args(spec, q, k, softmax_scale, window, extras)
    return _classify(loaded, sizes + common, program, q, k)


def _scalar_args(
    spec: BackwardSpec,
    q: Any,
    k: Any,
    softmax_scale: float | None,
    window: tuple[int, int] | None,
    extras: dict[str, Any] | None,
) -> tuple[float, list[Any], list[Any], list[Any]]:
    """(the softmax scale, the sizes, (scale, window), the program's scalars and side-tensor pointers):
    the arguments every backward kernel takes in that order (`runner.abi.BACKWARD_PARAMS`); raises
    LaunchError on a missing or malformed side tensor."""
    import numpy as np

    batch, seqlen_q, heads = q.shape[0], q.shape[1], q.shape[2]
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(spec.head_dim)
    win = tuple(window if window is not None else spec.window) if spec.mask == "window" else (-1, -1)
    view = SimpleNamespace(program=spec.program, kernel_name=spec.kernel("dq_dk_dv"))
    tail = program_args(view, q, {**(extras or {}), "_seqlen_k": seqlen_k, "_heads_kv": heads_kv})  # type: ignore[arg-type]
    sizes = [np.int32(batch), np.int32(seqlen_q), np.int32(seqlen_k), np.int32(heads), np.int32(heads_kv)]
    common = [np.float32(scale), np.int32(win[0]), np.int32(win[1])]
    return scale, sizes, common, [value for _, value in tail]


def _launch_main_tma(
    loaded: LoadedBackward, grid: tuple[int, int, int], args: list[Any], tensors: dict[str, Any]
) -> None:
    """dq_dk_dv with the TMA descriptors its spec names after its other arguments (`BACKWARD_TMA_PARAMS`:
    Q and dO in boxes of block_m rows, K and V of block_n, `backward_tma_box_cols` wide); through
    cuLaunchKernel (`runner.tma`), which passes them by value."""
    import numpy as np

    from runner import tma
    from runner.launch import _torch_stream_handle

    kinds = {np.uintp: "uintp", np.int32: "int32", np.int64: "int64", np.float32: "float32"}
    spec = loaded.spec
    try:
        maps = []
        for param in spec.tma_params:
            name = param.removeprefix("tma_")
            rows = spec.block_m if name in ("q", "do") else spec.block_n
            cols = backward_tma_box_cols(name, spec.head_dim)
            maps.append(tma.cached_tensor_map(tensors[name], rows, cols))
        tma.launch_with_tensor_maps(
            loaded.kernels["dq_dk_dv"],
            grid=grid,
            block=spec.dq_dk_dv_threads,
            shared_bytes=spec.shared_bytes,
            stream_handle=_torch_stream_handle(tensors["q"].device),
            args=[(kinds[type(a)], a) for a in args],
            tensor_maps=maps,
        )
    except tma.TmaError as exc:
        raise LaunchError(f"{spec.kernel('dq_dk_dv')}: {exc}") from exc
