"""Load a compiled attention kernel through cuda.core and launch it on PyTorch tensors.

The kernel runs on the tensors' device and on PyTorch's current stream (wrapped, not synchronised), so it
orders with the surrounding torch work exactly like a torch op. Arguments follow `ATTENTION_PARAMS`.
Bad tensors raise `LaunchError` naming the tensor and what is wrong, before anything is launched.
Kernels whose spec lists TMA descriptors (the sm_90 path) launch through `runner.tma` instead.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runner.abi import ATTENTION_PARAMS, LaunchSpec, block_mask_kind
from runner.compile import CompiledKernel

if TYPE_CHECKING:
    import torch

_SMEM_DEFAULT_LIMIT = 48 * 1024  # above this a kernel must opt in to more dynamic shared memory


class NoDeviceError(RuntimeError):
    """No CUDA device is visible (or torch was built without CUDA)."""


class LaunchError(ValueError):
    """Tensors or arguments that do not fit the kernel; raised before any launch."""


class LoadError(RuntimeError):
    """The driver refused the compiled module (e.g. PTX from a newer NVRTC than the driver)."""


def torch_dtype(name: str) -> torch.dtype:
    import torch

    table = {"fp16": torch.float16, "bf16": torch.bfloat16}
    if name not in table:
        raise LaunchError(f"unsupported kernel dtype {name!r} (expected one of {', '.join(table)})")
    return table[name]


def cuda_device_arch() -> str | None:
    """`sm_XY` of the current CUDA device, or None when there is none. Imports torch, not the driver."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def require_device() -> str:
    arch = cuda_device_arch()
    if arch is None:
        raise NoDeviceError("no CUDA device found")
    return arch


@dataclass
class LoadedKernel:
    spec: LaunchSpec
    compiled: CompiledKernel
    kernel: Any  # cuda.core Kernel
    device_id: int
    load_seconds: float
    block_mask_kernel: Any = None  # `<name>_block_mask` of a program with a launch-time block mask
    block_mask_buffer: Any = None  # the last launch's block classes (kept alive with the kernel)
    combine_kernel: Any = None  # `<name>_combine` of a split-KV inference kernel (runner/decode.py)

    @property
    def name(self) -> str:
        return self.spec.kernel_name


def load(compiled: CompiledKernel, spec: LaunchSpec) -> LoadedKernel:
    """Load the module on torch's current device and fetch the entry point; opt in to large shared memory."""
    import torch
    from cuda.core import Device, ObjectCode

    require_device()
    device_id = torch.cuda.current_device()
    torch.cuda.init()
    dev = Device(device_id)
    dev.set_current()  # the primary context, the one torch uses
    start = time.perf_counter()
    try:
        if compiled.kind == "ptx":
            obj = ObjectCode.from_ptx(compiled.code, name=compiled.name)
        else:
            obj = ObjectCode.from_cubin(compiled.code, name=compiled.name)
        kernel = obj.get_kernel(spec.kernel_name)
        masked = block_mask_kind(spec.program)
        mask_kernel = obj.get_kernel(f"{spec.kernel_name}_block_mask") if masked else None
        combine = obj.get_kernel(spec.combine_name) if spec.combine_name else None
    except Exception as exc:  # cuda.core raises CUDAError with the driver's code in the text
        hint = ""
        if compiled.kind == "ptx" and "PTX" in str(exc).upper():
            hint = (
                " (PTX from an NVRTC newer than the driver cannot be JIT-compiled: "
                "use the NVRTC of the driver's CUDA version)"
            )
        raise LoadError(
            f"cannot load {compiled.name} ({compiled.kind} for {compiled.target}): {exc}{hint}"
        ) from exc
    if spec.shared_bytes > _SMEM_DEFAULT_LIMIT:
        _opt_in_shared_memory(kernel, spec.shared_bytes, device_id)
    return LoadedKernel(
        spec=spec,
        compiled=compiled,
        kernel=kernel,
        device_id=device_id,
        load_seconds=time.perf_counter() - start,
        block_mask_kernel=mask_kernel,
        combine_kernel=combine,
    )


def _opt_in_shared_memory(kernel: Any, nbytes: int, device_id: int) -> None:
    """Allow `nbytes` of dynamic shared memory (above 48 KB a kernel must opt in).

    cuda.core loads modules as libraries, so `kernel.handle` is a CUkernel: set the attribute per device
    with cuKernelSetAttribute; should a version hand out a CUfunction, cuFuncSetAttribute does it.
    """
    from cuda.bindings import driver

    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    handle = kernel.handle
    if isinstance(handle, driver.CUfunction):
        (err,) = driver.cuFuncSetAttribute(handle, attr, nbytes)
    else:
        (err,) = driver.cuKernelSetAttribute(attr, nbytes, handle, driver.CUdevice(device_id))
        if err != driver.CUresult.CUDA_SUCCESS:
            got, func = driver.cuKernelGetFunction(handle)
            if got == driver.CUresult.CUDA_SUCCESS:
                (err,) = driver.cuFuncSetAttribute(func, attr, nbytes)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise LaunchError(
            f"the device refused {nbytes} bytes of dynamic shared memory per block ({err.name})"
        )


# ---- arguments -----------------------------------------------------------------------------------------


def _check_tensor(name: str, t: Any, dtype: Any, head_dim: int, device: Any) -> None:
    import torch

    if not isinstance(t, torch.Tensor):
        raise LaunchError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cuda":
        raise LaunchError(f"{name}: tensor is on {t.device}, expected a CUDA device")
    if t.device != device:
        raise LaunchError(f"{name}: tensor is on {t.device}, but q is on {device}")
    if t.dtype != dtype:
        raise LaunchError(f"{name}: dtype {t.dtype}, the kernel was built for {dtype}")
    if t.dim() != 4:
        raise LaunchError(f"{name}: expected 4 dims (batch, seqlen, heads, dim), got shape {tuple(t.shape)}")
    if t.shape[3] != head_dim:
        raise LaunchError(f"{name}: head dim {t.shape[3]}, the kernel was built for {head_dim}")
    if t.stride(3) != 1:
        raise LaunchError(f"{name}: the last dim must be contiguous (stride {t.stride(3)})")
    # 128-bit copies: the base and every row/head/batch step must stay 16-byte aligned.
    vec = 16 // t.element_size()
    if t.data_ptr() % 16:
        raise LaunchError(f"{name}: data pointer is not 16-byte aligned")
    for dim, label in ((0, "batch"), (1, "seqlen"), (2, "head")):
        if t.shape[dim] > 1 and t.stride(dim) % vec:
            raise LaunchError(f"{name}: {label} stride {t.stride(dim)} is not a multiple of {vec} elements")


def check_inputs(spec: LaunchSpec, q: Any, k: Any, v: Any) -> tuple[int, int, int, int, int]:
    """Validate q, k, v against the spec; returns (batch, seqlen_q, seqlen_k, heads, heads_kv)."""
    dtype = torch_dtype(spec.dtype)
    _check_tensor("q", q, dtype, spec.head_dim_qk, getattr(q, "device", None))
    _check_tensor("k", k, dtype, spec.head_dim_qk, q.device)
    _check_tensor("v", v, dtype, spec.head_dim_v, q.device)
    batch, seqlen_q, heads, _ = q.shape
    if k.shape[0] != batch or v.shape[0] != batch:
        raise LaunchError(f"batch sizes differ: q {batch}, k {k.shape[0]}, v {v.shape[0]}")
    if k.shape[1] != v.shape[1] or k.shape[2] != v.shape[2]:
        raise LaunchError(
            f"k and v disagree on (seqlen, heads): {tuple(k.shape[1:3])} vs {tuple(v.shape[1:3])}"
        )
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    if heads_kv == 0 or heads % heads_kv:
        raise LaunchError(f"query heads ({heads}) must be a multiple of key/value heads ({heads_kv})")
    if spec.heads_kv and heads_kv != spec.heads_kv:
        raise LaunchError(
            f"the kernel was built for {spec.heads_kv} key/value head(s) (Param heads_kv), but k and v "
            f"have {heads_kv}"
        )
    if spec.group and heads // heads_kv != spec.group:
        raise LaunchError(
            f"the kernel was built for GQA group {spec.group}, but heads/heads_kv = {heads}/{heads_kv}"
        )
    if max(seqlen_q, seqlen_k) >= 2**31:
        raise LaunchError("sequence lengths must fit in int32")
    return batch, seqlen_q, seqlen_k, heads, heads_kv


def kernel_args(
    spec: LaunchSpec,
    q: Any,
    k: Any,
    v: Any,
    o: Any,
    lse: Any,
    *,
    softmax_scale: float,
    window: tuple[int, int],
) -> list[Any]:
    """The launch arguments in `ATTENTION_PARAMS` order, as the numpy scalars cuda.core accepts."""
    import numpy as np

    batch, seqlen_q, seqlen_k, heads, heads_kv = check_inputs(spec, q, k, v)
    values: dict[str, Any] = {
        "q": q.data_ptr(),
        "k": k.data_ptr(),
        "v": v.data_ptr(),
        "o": o.data_ptr(),
        "lse": lse.data_ptr(),
        "batch": batch,
        "seqlen_q": seqlen_q,
        "seqlen_k": seqlen_k,
        "heads": heads,
        "heads_kv": heads_kv,
        "softmax_scale": softmax_scale,
        "window_left": window[0],
        "window_right": window[1],
    }
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        values[f"{name}_batch_stride"] = t.stride(0)
        values[f"{name}_row_stride"] = t.stride(1)
        values[f"{name}_head_stride"] = t.stride(2)
    return [getattr(np, np_type)(values[name]) for name, _ctype, np_type in ATTENTION_PARAMS]


def program_args(spec: LaunchSpec, q: Any, extras: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """The variant's runtime scalars (its defaults unless `extras` names them) and side-tensor pointers,
    as (numpy type name, value) in `program_params` order. Side tensors must be given, contiguous, on
    q's device, with the element type and shape the TL declares."""
    import numpy as np
    import torch

    program = spec.program or {}
    extras = dict(extras or {})
    sizes = dict(zip(("batch", "seqlen_q", "heads"), (q.shape[0], q.shape[1], q.shape[2]), strict=True))
    out: list[tuple[str, Any]] = []
    for name, ty, default in program.get("scalars", ()):
        value = extras.pop(name, default)
        if isinstance(value, torch.Tensor) or not isinstance(value, int | float):
            raise LaunchError(f"scalar {name!r}: expected a number, got {type(value).__name__}")
        out.append(("float32" if ty == "f32" else "int32", value))
    for name, dims, dtype in program.get("tensors", ()):
        t = extras.pop(name, None)
        want = torch.float32 if dtype == "float32" else torch.int32
        if not isinstance(t, torch.Tensor):
            raise LaunchError(f"side tensor {name!r} ({dtype}, dims {tuple(dims)}) is missing")
        if t.dtype != want or t.device != q.device or not t.is_contiguous():
            raise LaunchError(
                f"side tensor {name!r}: expected a contiguous {want} tensor on {q.device}, got {t.dtype} on "
                f"{t.device}{'' if t.is_contiguous() else ', non-contiguous'}"
            )
        known = {**sizes, "seqlen_k": extras.get("_seqlen_k"), "heads_kv": extras.get("_heads_kv")}
        shape = tuple(d if isinstance(d, int) else known[d] for d in dims)
        if tuple(t.shape) != shape:
            raise LaunchError(f"side tensor {name!r}: shape {tuple(t.shape)}, expected {shape} ({dims})")
        out.append(("uintp", t.data_ptr()))
    unknown = [k for k in extras if not k.startswith("_")]
    if unknown:
        raise LaunchError(
            f"unknown launch argument(s) {', '.join(map(repr, unknown))} for {spec.kernel_name}"
        )
    return [(kind, getattr(np, kind)(value)) for kind, value in out]


def grid(spec: LaunchSpec, batch: int, seqlen_q: int, heads: int, sm_count: int = 0) -> tuple[int, int, int]:
    """One block per (query tile, batch, head); a persistent kernel gets one block per SM (`sm_count`)
    and walks the tiles itself."""
    m_blocks = math.ceil(seqlen_q / spec.block_m)
    if spec.persistent:
        if sm_count <= 0:
            raise LaunchError(f"{spec.kernel_name} is persistent: its grid needs the device's SM count")
        return (min(m_blocks * batch * heads, sm_count), 1, 1)
    return (m_blocks, batch, heads)


@functools.cache
def sm_count(device_index: int) -> int:
    import torch

    return int(torch.cuda.get_device_properties(device_index).multi_processor_count)


def launch(
    loaded: LoadedKernel,
    q: Any,
    k: Any,
    v: Any,
    o: Any,
    lse: Any,
    *,
    softmax_scale: float | None = None,
    window: tuple[int, int] | None = None,
    tensor_maps: Any = None,
    extras: dict[str, Any] | None = None,
    block_classes: Any = None,
) -> None:
    """Launch into preallocated `o` (batch, seqlen_q, heads, d_v) and `lse` (batch, heads, seqlen_q) fp32.

    A kernel whose spec lists `TMA_PARAMS` (sm_90) also gets TMA descriptors of q, k, v, o: `tensor_maps`
    if given (`runner.tma.attention_tensor_maps`), else built (and cached) here. A program whose masks
    read per-token side tensors classifies its blocks at every launch, unless `block_classes` (from
    `block_classes(...)` on the same side tensors and lengths) is given: build them once for a batch and
    reuse them across layers, as FlexAttention's `create_block_mask`."""
    import torch

    spec = loaded.spec
    if spec.inference:
        raise LaunchError(
            f"{spec.kernel_name} is an inference kernel: launch it with runner.decode.decode_attention"
        )
    batch, seqlen_q, _, heads, _ = check_inputs(spec, q, k, v)
    _check_tensor("o", o, q.dtype, spec.head_dim_v, q.device)
    if tuple(o.shape[:3]) != (batch, seqlen_q, heads):
        raise LaunchError(f"o: shape {tuple(o.shape)}, expected {(batch, seqlen_q, heads, spec.head_dim_v)}")
    if lse.dtype != torch.float32 or tuple(lse.shape) != (batch, heads, seqlen_q) or not lse.is_contiguous():
        raise LaunchError(f"lse: expected a contiguous float32 tensor of shape {(batch, heads, seqlen_q)}")
    if q.device.index != loaded.device_id:
        raise LaunchError(
            f"tensors are on cuda:{q.device.index}, the kernel was loaded on cuda:{loaded.device_id}"
        )
    args, tail = _arguments(spec, q, k, v, o, lse, softmax_scale, window, extras)
    if batch == 0 or seqlen_q == 0 or heads == 0:
        return
    mask_kind = block_mask_kind(spec.program)
    if block_classes is not None:
        tiles = (spec.block_m, spec.block_n)
        check_block_classes(
            block_classes, q, k, tiles=tiles, mask_kind=mask_kind, kernel=spec.kernel_name, tile_order=True
        )
    if mask_kind:
        classes = block_classes if block_classes is not None else _launch_block_mask(loaded, args, tail, q, k)
        tail.append(("uintp", _pointer(classes)))
    grid_xyz = grid(spec, batch, seqlen_q, heads, sm_count(q.device.index) if spec.persistent else 0)
    if spec.uses_tma:
        _launch_tma(loaded, args, (q, k, v, o), grid_xyz, tensor_maps, tail)
        return
    from cuda.core import LaunchConfig
    from cuda.core import launch as cu_launch

    config = LaunchConfig(grid=grid_xyz, block=spec.threads, shmem_size=spec.shared_bytes)
    cu_launch(_torch_stream(q.device), config, loaded.kernel, *args, *(value for _, value in tail))


def _launch_block_mask(
    loaded: LoadedKernel, args: list[Any], tail: list[tuple[str, Any]], q: Any, k: Any
) -> Any:
    """Classify every (query block, key block) with the masks on the current stream; returns the classes
    (`launch_block_classes`'). The buffer stays valid for kernels queued after this one on the same stream
    (PyTorch's allocator is stream-ordered)."""
    from runner.abi import BLOCK_MASK_PARAMS

    spec = loaded.spec
    if loaded.block_mask_kernel is None or spec.block_n <= 0:
        raise LaunchError(f"{spec.kernel_name}: its block-mask kernel is missing; rebuild with `tl build`")
    by_name = dict(zip((p[0] for p in ATTENTION_PARAMS), args, strict=True))
    buf = launch_block_classes(
        loaded.block_mask_kernel,
        [by_name[name] for name, _, _ in BLOCK_MASK_PARAMS],
        [v for _, v in tail],
        q,
        k,
        tiles=(spec.block_m, spec.block_n),
        per_head=block_mask_kind(spec.program) == "per_head",
        tile_order=True,
    )
    loaded.block_mask_buffer = buf
    return buf


def block_classes(
    loaded: LoadedKernel,
    q: Any,
    k: Any,
    v: Any,
    *,
    softmax_scale: float | None = None,
    window: tuple[int, int] | None = None,
    extras: dict[str, Any] | None = None,
) -> Any:
    """The block classes of `loaded`'s masks for these lengths, window and side tensors (`extras`) and
    the tile order after them (`launch_block_classes` with `tile_order`: one flat uint8 buffer), for
    `launch(..., block_classes=...)`: they stay valid while the side tensors, scalars, window, batch,
    heads and lengths do (q and k give the shapes; their values are not read)."""

    spec = loaded.spec
    if not block_mask_kind(spec.program):
        raise LaunchError(f"{spec.kernel_name}: its masks read no side tensor, so it has no block classes")
    o, lse = _outputs(spec, q, k, v)  # the block-mask kernel takes the attention kernel's arguments
    args, tail = _arguments(spec, q, k, v, o, lse, softmax_scale, window, extras)
    return _launch_block_mask(loaded, args, tail, q, k)


def _arguments(
    spec: LaunchSpec,
    q: Any,
    k: Any,
    v: Any,
    o: Any,
    lse: Any,
    softmax_scale: float | None,
    window: tuple[int, int] | None,
    extras: dict[str, Any] | None,
) -> tuple[list[Any], list[tuple[str, Any]]]:
    """The attention kernel's `ATTENTION_PARAMS` values and its program's (kind, value) tail: the scale
    (1/√d unless given), the window (the spec's unless given; none without a window mask), the extras."""
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(spec.head_dim_qk)
    win = window if window is not None else tuple(spec.window)
    if spec.mask != "window":
        win = (-1, -1)
    if scale <= 0:
        raise LaunchError(f"softmax_scale must be positive (the kernels fold it into exp2), got {scale}")
    args = kernel_args(spec, q, k, v, o, lse, softmax_scale=scale, window=(int(win[0]), int(win[1])))
    tail = program_args(spec, q, {**(extras or {}), "_seqlen_k": k.shape[1], "_heads_kv": k.shape[2]})
    return args, tail


def _outputs(spec: LaunchSpec, q: Any, k: Any, v: Any) -> tuple[Any, Any]:
    """Empty o (batch, seqlen_q, heads, d_v) in q's dtype and lse (batch, heads, seqlen_q) float32."""
    import torch

    batch, seqlen_q, _, heads, _ = check_inputs(spec, q, k, v)
    o = torch.empty(batch, seqlen_q, heads, spec.head_dim_v, dtype=q.dtype, device=q.device)
    lse = torch.empty(batch, heads, seqlen_q, dtype=torch.float32, device=q.device)
    return o, lse


def _pointer(t: Any) -> Any:
    import numpy as np

    return np.uintp(t.data_ptr())


def check_block_classes(
    classes: Any,
    q: Any,
    k: Any,
    *,
    tiles: tuple[int, int],
    mask_kind: str,
    kernel: str,
    tile_order: bool = False,
) -> None:
    """Raise LaunchError unless `kernel`'s masks read side tensors (`block_mask_kind`: `mask_kind`) and
    `classes` can be its (batch, heads or 1, m_blocks, n_blocks) uint8 block classes at `tiles` for q's
    and k's lengths (what `launch_block_classes` returns; `tile_order`: the flat buffer of the classes
    and the tile order after them)."""
    import torch

    if not mask_kind:
        raise LaunchError(f"{kernel}: its masks read no side tensor, so it takes no block_classes")
    planes = q.shape[2] if mask_kind == "per_head" else 1
    m_blocks = math.ceil(q.shape[1] / tiles[0])
    want: tuple[int, ...] = (q.shape[0], planes, m_blocks, math.ceil(k.shape[1] / tiles[1]))
    if tile_order:
        want = (_tile_order_offset(want) + 4 * q.shape[0] * q.shape[2] * m_blocks,)
    if (
        not isinstance(classes, torch.Tensor)
        or classes.dtype != torch.uint8
        or tuple(classes.shape) != want
        or not classes.is_contiguous()
        or classes.device != q.device
    ):
        got = (getattr(classes, "dtype", type(classes).__name__), tuple(getattr(classes, "shape", ())))
        raise LaunchError(
            f"block_classes: expected contiguous uint8 {want} on {q.device} (built for these lengths and "
            f"this kernel's {tiles[0]} x {tiles[1]} tiles), got {got}"
        )


def _tile_order_offset(classes_shape: tuple[int, ...]) -> int:
    """Where the tile order starts in the forward's buffer: the classes' bytes rounded up (`runner.abi`)."""
    from runner.abi import TILE_ORDER_ALIGN

    return -(-math.prod(classes_shape) // TILE_ORDER_ALIGN) * TILE_ORDER_ALIGN


def longest_first(classes: Any, heads: int, quantum: int = 1) -> Any:
    """The forward's tile order from its (batch, heads or 1, m_blocks, n_blocks) block classes: every
    (batch, head, query block) as (batch · heads + head) · m_blocks + m_block, int32, the tiles with the
    most non-empty key blocks first (longest processing time first: a long tile started last is the
    kernel's tail), counted in units of `quantum` blocks, ties in index order (the neighbours of a head
    stay together, sharing its K and V in L2)."""
    import torch

    batch, _, m_blocks, _ = classes.shape
    counts = (classes != 0).sum(-1, dtype=torch.int32).expand(batch, heads, m_blocks)
    key = counts.reshape(-1) // quantum if quantum > 1 else counts.reshape(-1)
    return torch.argsort(key, descending=True, stable=True).to(torch.int32)


def launch_block_classes(
    kernel: Any,
    head: list[Any],
    values: list[Any],
    q: Any,
    k: Any,
    *,
    tiles: tuple[int, int],
    per_head: bool,
    tile_order: bool = False,
) -> Any:
    """A `_block_mask` kernel (the forward's, or the backward's at its own tiles) over every (query block,
    key block) of q and k, on the current stream: `head` is its BLOCK_MASK_PARAMS, `values` the program's
    scalars and side tensors. Returns the (batch, heads or 1, m_blocks, n_blocks) uint8 classes (keep it
    alive until the kernels that read it have been queued); `tile_order` (the forward's): one flat uint8
    buffer of the classes, then the order of the tiles (`runner.abi.TILE_ORDER_ALIGN`, `longest_first`)."""
    import numpy as np
    import torch
    from cuda.core import LaunchConfig
    from cuda.core import launch as cu_launch

    from runner.abi import BLOCK_MASK_THREADS

    batch, seqlen_q, heads = q.shape[0], q.shape[1], q.shape[2]
    m_blocks = math.ceil(seqlen_q / tiles[0])
    n_blocks = math.ceil(k.shape[1] / tiles[1])
    planes = heads if per_head else 1
    shape = (batch, planes, m_blocks, n_blocks)
    offset = _tile_order_offset(shape)
    flat = torch.empty(
        offset + 4 * batch * heads * m_blocks if tile_order else math.prod(shape),
        dtype=torch.uint8,
        device=q.device,
    )
    buf = flat[: math.prod(shape)].view(shape)
    config = LaunchConfig(grid=(n_blocks, m_blocks, batch * planes), block=BLOCK_MASK_THREADS)
    cu_launch(_torch_stream(q.device), config, kernel, *head, *values, np.uintp(buf.data_ptr()))
    if not tile_order:
        return buf
    flat[offset:].view(torch.int32).copy_(longest_first(buf, heads))
    return flat


def _launch_tma(
    loaded: LoadedKernel,
    args: list[Any],
    tensors: tuple[Any, ...],
    grid_xyz: tuple[int, int, int],
    maps: Any,
    tail: list[tuple[str, Any]] | None = None,
) -> None:
    """The sm_90 launch: scalars as `ATTENTION_PARAMS`, then the four descriptors, through cuLaunchKernel."""
    from runner import tma

    spec = loaded.spec
    if spec.block_n <= 0:
        raise LaunchError(
            f"{spec.kernel_name}: the launch spec lists TMA descriptors but no block_n (the K/V box "
            "height); rebuild the kernel with `tl build`"
        )
    q = tensors[0]
    try:
        if maps is None:
            maps = tma.cached_tensor_maps(*tensors, block_m=spec.block_m, block_n=spec.block_n)
        tma.launch_with_tensor_maps(
            loaded.kernel,
            grid=grid_xyz,
            block=spec.threads,
            shared_bytes=spec.shared_bytes,
            stream_handle=_torch_stream_handle(q.device),
            args=[(kind, value) for (_, _, kind), value in zip(ATTENTION_PARAMS, args, strict=True)],
            tensor_maps=maps,
            tail_args=tail or (),
        )
    except tma.TmaError as exc:
        raise LaunchError(str(exc)) from exc


def _torch_stream_handle(device: Any) -> int:
    """The handle of PyTorch's current stream on `device` (0: the legacy default stream)."""
    import torch

    return int(torch.cuda.current_stream(device).cuda_stream)


def _torch_stream(device: Any) -> Any:
    """PyTorch's current stream on `device` as a cuda.core Stream (a view: torch owns its lifetime)."""
    import torch
    from cuda.core import LEGACY_DEFAULT_STREAM, Stream

    handle = torch.cuda.current_stream(device).cuda_stream
    return LEGACY_DEFAULT_STREAM if handle == 0 else Stream.from_handle(handle)


def attention(
    loaded: LoadedKernel,
    q: Any,
    k: Any,
    v: Any,
    *,
    softmax_scale: float | None = None,
    window: tuple[int, int] | None = None,
    extras: dict[str, Any] | None = None,
    block_classes: Any = None,
) -> tuple[Any, Any]:
    """Run the kernel: (o (batch, seqlen_q, heads, d_v), lse fp32 (batch, heads, seqlen_q)). `extras`:
    the variant's runtime scalars and side tensors by their TL names; `block_classes`: see `launch`."""
    o, lse = _outputs(loaded.spec, q, k, v)
    launch(
        loaded, q, k, v, o, lse,
        softmax_scale=softmax_scale, window=window, extras=extras, block_classes=block_classes,
    )  # fmt: skip
    return o, lse
