"""The attention kernel ABI shared by the translator (which emits it) and the runner (which launches it).

Pure data: importing this module touches no GPU and knows no TL syntax. The translator writes a
`LaunchSpec` beside every generated `.cu` (as JSON); the runner reads it back, so a hand-edited kernel
launches exactly like a generated one.

Tensors use the (batch, seqlen, heads, dim) layout with arbitrary strides on batch/seqlen/heads and a
contiguous last dimension. LSE is float32, contiguous (batch, heads, seqlen_q). Grid:
(ceil(seqlen_q / block_m), batch, heads).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

# The problem sizes and the scale and window every attention kernel of this ABI takes (the forward's
# order; the other kernels below reuse both runs).
SIZE_PARAMS: tuple[tuple[str, str, str], ...] = (
    ("batch", "int", "int32"),
    ("seqlen_q", "int", "int32"),
    ("seqlen_k", "int", "int32"),
    ("heads", "int", "int32"),
    ("heads_kv", "int", "int32"),
)
SCALE_WINDOW_PARAMS: tuple[tuple[str, str, str], ...] = (
    ("softmax_scale", "float", "float32"),  # applied to Q·Kᵀ; the kernel folds in log2(e) itself
    ("window_left", "int", "int32"),  # -1: unbounded; only read when mask == "window"
    ("window_right", "int", "int32"),
)


def stride_params(*tensors: str) -> tuple[tuple[str, str, str], ...]:
    """`<t>_batch_stride`, `<t>_row_stride`, `<t>_head_stride` (elements, int64) of each tensor in turn."""
    return tuple((f"{t}_{s}_stride", "long long", "int64") for t in tensors for s in ("batch", "row", "head"))


# (name, C type, numpy scalar type name) in the exact order of the `extern "C" __global__` parameters.
ATTENTION_PARAMS: tuple[tuple[str, str, str], ...] = (
    ("q", "const void*", "uintp"),
    ("k", "const void*", "uintp"),
    ("v", "const void*", "uintp"),
    ("o", "void*", "uintp"),
    ("lse", "float*", "uintp"),
    *SIZE_PARAMS,
    *stride_params("q", "k", "v", "o"),
    *SCALE_WINDOW_PARAMS,
)

# After ATTENTION_PARAMS, a TMA kernel (sm_90) takes one `CUtensorMap` per tensor, 128 bytes by value
# (`const __grid_constant__ cute::TmaDescriptor`), describing Q, K, V and O to the Tensor Memory Accelerator.
TMA_PARAMS: tuple[str, ...] = ("tma_q", "tma_k", "tma_v", "tma_o")
TMA_ABI: tuple[tuple[str, str, str], ...] = tuple(
    (n, "const __grid_constant__ cute::TmaDescriptor", "tensormap") for n in TMA_PARAMS
)


def program_params(program: dict | None) -> tuple[tuple[str, str, str], ...]:
    """The parameters a variant adds at the very end (after the TMA descriptors): its runtime scalars
    (`scalar_<name>`) and the pointers of its side tensors (`<name>_ptr`), in the program's order.
    `program` is the kernel IR's forward as `kernel_ir.program.Forward.to_dict` writes it."""
    if not program:
        return ()
    out = [
        (f"scalar_{name}", "float" if ty == "f32" else "int", "float32" if ty == "f32" else "int32")
        for name, ty, _default in program.get("scalars", ())
    ]
    out += [
        (f"{name}_ptr", "const float*" if dtype == "float32" else "const int*", "uintp")
        for name, _dims, dtype in program.get("tensors", ())
    ]
    if block_mask_kind(program):
        out.append(("block_mask_ptr", "const unsigned char*", "uintp"))
    return tuple(out)


def block_mask_kind(program: dict | None) -> str:
    """`Forward.block_mask` of a launch spec's program: "" (none), "shared" or "per_head"."""
    return str((program or {}).get("block_mask", ""))


# The launch-time block mask (`Forward.block_mask`): kernel `<name>_block_mask` in the same module, one
# block of BLOCK_MASK_THREADS per (key block, query block, batch × (heads or 1)), writing one byte
# (0 empty, 1 partial, 2 full) to a (batch, heads or 1, m_blocks, n_blocks) uint8 buffer; its parameters
# are BLOCK_MASK_PARAMS, then the program's scalars and side tensors, then the buffer.
BLOCK_MASK_THREADS = 256
# The forward's buffer holds, after the classes, the order its tiles run in: the classes' bytes rounded up
# to TILE_ORDER_ALIGN, then batch · heads · m_blocks int32 tile ids ((batch · heads + head) · m_blocks +
# m_block), the tiles with the most non-empty key blocks first (`runner.launch.longest_first`); the sm_90
# forward reads it (`translator.backends.sm90.emit._launch_order`), the other kernels the classes alone.
TILE_ORDER_ALIGN = 16
BLOCK_MASK_PARAMS: tuple[tuple[str, str, str], ...] = (
    *SIZE_PARAMS,
    *SCALE_WINDOW_PARAMS,
)


# An inference kernel (split-KV decode, paged KV, packed batches; `LaunchSpec.inference`) takes these
# instead of ATTENTION_PARAMS, then the program's. Grid: (m_blocks · num_splits, batch, heads_kv when the
# query heads of a K/V head are packed into one tile, else heads); m_blocks covers max_seqlen_q rows (times
# the GQA group when packed). Per sequence b: seqlen_q = cu_seqlens_q[b + 1] − cu_seqlens_q[b] (varlen) or
# max_seqlen_q; seqlen_k = cu_seqlens_k[b + 1] − cu_seqlens_k[b] (varlen), cache_seqlens[b] (when given)
# or max_seqlen_k. Paged K/V are (pages, page_size, heads_kv, d) and k_batch_stride is the page stride;
# block_table is (batch, max_pages) int32. With num_splits > 1 each block writes fp32 partials to
# o_accum (splits, batch, heads, max_seqlen_q, d_v) and lse_accum (splits, batch, heads, max_seqlen_q)
# (−inf: the split kept no key) and `<name>_combine` (COMBINE_PARAMS) merges them into o and lse.
# LSE is (batch, heads, max_seqlen_q), or (heads, total_q) for a packed batch.
INFERENCE_PARAMS: tuple[tuple[str, str, str], ...] = (
    ("q", "const void*", "uintp"),
    ("k", "const void*", "uintp"),
    ("v", "const void*", "uintp"),
    ("o", "void*", "uintp"),
    ("lse", "float*", "uintp"),
    ("o_accum", "float*", "uintp"),
    ("lse_accum", "float*", "uintp"),
    ("block_table", "const int*", "uintp"),
    ("cache_seqlens", "const int*", "uintp"),  # null: every sequence has max_seqlen_k keys
    ("cu_seqlens_q", "const int*", "uintp"),
    ("cu_seqlens_k", "const int*", "uintp"),
    ("batch", "int", "int32"),
    ("max_seqlen_q", "int", "int32"),
    ("max_seqlen_k", "int", "int32"),
    ("heads", "int", "int32"),
    ("heads_kv", "int", "int32"),
    ("num_splits", "int", "int32"),
    ("max_pages", "int", "int32"),  # block_table's row length
    *stride_params("q", "k", "v", "o"),
    *SCALE_WINDOW_PARAMS,
)
COMBINE_THREADS = 256  # eight warps; `warps_per_row` of them share one output row's splits
COMBINE_CHUNK = 4  # partial rows one warp of the combine kernel loads together
LEGACY_COMBINE_THREADS = 128  # combine kernels built before `warps_per_row`: one warp per row
COMBINE_PARAMS: tuple[tuple[str, str, str], ...] = (
    ("o_accum", "const float*", "uintp"),
    ("lse_accum", "const float*", "uintp"),
    ("o", "void*", "uintp"),
    ("lse", "float*", "uintp"),
    ("batch", "int", "int32"),
    ("max_seqlen_q", "int", "int32"),
    ("heads", "int", "int32"),
    ("num_splits", "int", "int32"),
    *stride_params("o"),
    ("warps_per_row", "int", "int32"),  # 1, 2, 4 or 8 (runner.decode.combine_warps_per_row)
)


@dataclass(frozen=True)
class LaunchSpec:
    """What the runner needs to launch a kernel; everything else comes from the tensors."""

    kernel_name: str
    block_m: int  # query rows per block: grid.x = ceil(seqlen_q / block_m)
    threads: int
    shared_bytes: int  # dynamic shared memory per block
    dtype: str  # "fp16" | "bf16"
    head_dim_qk: int
    head_dim_v: int
    mask: str  # "none" | "causal" | "window"
    arch: str  # e.g. "sm_80"; the runner compiles for this (PTX for an older arch than the device)
    window: tuple[int, int] = (-1, -1)  # default (left, right) from the TL `Mask window(...)`
    group: int = 0  # GQA group fixed by the TL (0: taken from the launch shape)
    # The kernel's parameters in order: ATTENTION_PARAMS, then TMA_PARAMS for a kernel that reads its
    # tensors through TMA descriptors (the sm_90 path; runner/tma.py encodes and passes them).
    params: tuple[str, ...] = field(default=tuple(p[0] for p in ATTENTION_PARAMS))
    tl_file: str | None = None
    # sha256 of the .cu as `tl build` wrote it: a .cu that no longer matches was edited by hand, and a
    # rebuild will not overwrite it (pipeline/build.py). None for specs that never went through a build.
    source_sha256: str | None = None
    block_n: int = 0  # key rows per block (the K/V TMA box height on sm_90); 0 in specs written before
    heads_kv: int = 0  # K/V heads fixed by the TL (`Param heads_kv`, 1 for MQA); 0: from the launch shape
    # One block per SM walking the (m_block, head, batch) tiles: grid = (min(tiles, SMs), 1, 1).
    persistent: bool = False
    # The forward program (kernel IR, `Forward.to_dict`): the regions the reference evaluates and the
    # runtime scalars and side tensors the launch passes. None: the plain forward.
    program: dict | None = None
    # An inference kernel (INFERENCE_PARAMS): {"splits": 0 (automatic) | n, "page_size": 0 | tokens,
    # "pack_gqa": bool, "varlen": bool, "combine": the combine kernel's name}. None: ATTENTION_PARAMS.
    inference: dict | None = None

    @property
    def uses_tma(self) -> bool:
        """The kernel takes TMA descriptors after its ABI's parameters (the attention ABI's, or the inference
        ABI's for a packed prefill on sm_90)."""
        n = len(INFERENCE_PARAMS if self.inference else ATTENTION_PARAMS)
        return self.params[n : n + len(TMA_PARAMS)] == TMA_PARAMS

    @property
    def writes_lse(self) -> bool:
        """Kernels without a softmax (sigmoid, ReLU attention) have no log-sum-exp to write."""
        return not self.program or self.program.get("normalizer", "softmax") == "softmax"

    @property
    def combine_name(self) -> str | None:
        """The split-KV combine kernel of an inference kernel that may split (None: it never splits)."""
        inf = self.inference
        if not inf or inf.get("splits") == 1 or not self.writes_lse:
            return None
        return str(inf["combine"])

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @staticmethod
    def from_json(text: str) -> LaunchSpec:
        data = json.loads(text)
        data["window"] = tuple(data.get("window", (-1, -1)))
        data["params"] = tuple(data.get("params", ()))
        return LaunchSpec(**data)


# ---- the backward (issue 18): three kernels per TL program, `<name>_bwd_*`, in one module -------------
# dot_do_o: D = rowsum(dO ∘ O) into dpsum (batch, heads, seqlen_q) fp32 (and a learnable sink's gradient);
# grid (ceil(seqlen_q / preprocess_rows), batch, heads). dq_dk_dv: grid (ceil(seqlen_k / block_n), batch,
# heads_kv); adds dQ into dq_accum (1, batch, heads, ceil(seqlen_q / block_m) · block_m, d) fp32, zeroed
# (each block_m × d tile in the dQ MMA's fragment order: thread t's element i at i · threads + t; the
# experimental sm_90a skeleton adds float4s: at (i / 4 · threads + t) · 4 + i % 4; only dq_dk_dv and
# convert_dq of one module read the order, the runner sizes the buffer alone), and
# writes dK, dV (summed over each GQA group); deterministic: grid (dq_splits, batch, heads_kv), column x
# walks key blocks x, x + dq_splits, … and adds into slice x of dq_accum (dq_splits, batch, heads, …).
# convert_dq: dq_accum → dq; grid (ceil(seqlen_q / block_m), batch, heads). row_grads (when row_sums > 0):
# grid (ceil(seqlen_q / threads), batch, heads). Strides are in elements, as in ATTENTION_PARAMS; `dout`
# is dO.
BACKWARD_PARAMS: tuple[tuple[str, str, str], ...] = (
    ("q", "const void*", "uintp"),
    ("k", "const void*", "uintp"),
    ("v", "const void*", "uintp"),
    ("dout", "const void*", "uintp"),
    ("lse", "const float*", "uintp"),
    ("dpsum", "const float*", "uintp"),
    ("dq_accum", "float*", "uintp"),
    ("dk", "void*", "uintp"),
    ("dv", "void*", "uintp"),
    *SIZE_PARAMS,
    *stride_params("q", "k", "v", "do", "dk", "dv"),
    *SCALE_WINDOW_PARAMS,
)
# The sm_90 producer's dQ/dK/dV kernel takes TMA descriptors of Q, dO, K and V after its other parameters
# (runner/tma.py encodes them: Q and dO in boxes of block_m rows, K and V of block_n rows; each box
# `backward_tma_box_cols` columns wide with the swizzle of that many bytes' rows).
BACKWARD_TMA_PARAMS: tuple[str, ...] = ("tma_q", "tma_do", "tma_k", "tma_v")


def backward_tma_box_cols(tensor: str, head_dim: int) -> int:
    """Columns of one TMA box of `tensor` (q, do, k, v) in the sm_90 backward: 64 (128 bytes, the 128-byte
    swizzle), except K where half the head dim is not a multiple of 64: its shared layout swizzles each
    warp group's half of the head dim (dQ's GEMM reads Kᵀ by halves), in 32-column (64-byte) atoms."""
    if tensor == "k" and (head_dim // 2) % 64:
        return 32
    return 64


BACKWARD_TMA_ABI: tuple[tuple[str, str, str], ...] = tuple(
    (n, "const __grid_constant__ cute::TmaDescriptor", "tensormap") for n in BACKWARD_TMA_PARAMS
)
BACKWARD_PREPROCESS_PARAMS: tuple[tuple[str, str, str], ...] = (
    ("o", "const void*", "uintp"),
    ("dout", "const void*", "uintp"),
    ("lse", "const float*", "uintp"),
    ("dpsum", "float*", "uintp"),
    *SIZE_PARAMS,
    *stride_params("o", "do"),
    *SCALE_WINDOW_PARAMS,
)
BACKWARD_CONVERT_PARAMS: tuple[tuple[str, str, str], ...] = (
    ("dq_accum", "const float*", "uintp"),
    ("dq", "void*", "uintp"),
    ("batch", "int", "int32"),
    ("seqlen_q", "int", "int32"),
    ("heads", "int", "int32"),
    *stride_params("dq"),
    ("dq_splits", "int", "int32"),  # dq_accum's slices, summed in order (1 unless deterministic)
)
# After the D kernel's parameters (BACKWARD_PREPROCESS_PARAMS and the program's) where
# `BackwardSpec.dq_zeroed`: the D kernel clears dq_accum (dq_slices slices of (batch, heads, dq_rows, d)
# fp32, rows [kRows · x, kRows · x + kRows) of each in thread block x), so dq_accum needs no fill of its own.
BACKWARD_PREPROCESS_ZERO_PARAMS: tuple[tuple[str, str, str], ...] = (
    ("dq_accum", "float*", "uintp"),
    ("dq_rows", "int", "int32"),
    ("dq_slices", "int", "int32"),
)
# After BACKWARD_CONVERT_PARAMS where `BackwardSpec.dq_scale`: dS was computed without the softmax scale
# (the score's derivative is the scale times the rest), so the convert kernel applies it to dQ.
BACKWARD_CONVERT_SCALE_PARAM: tuple[str, str, str] = ("softmax_scale", "float", "float32")
# Per query row, Σ_k P·dP and, per learnable read that is uniform over a (batch, head), Σ_k P·∂X/∂read
# (batch, heads, seqlen_q, spec.row_sums) fp32, zeroed: row_grads corrects those gradients by
# Σ_rows (D − Σ_k P·dP) · Σ_k P·∂X/∂read, the error D = rowsum(dO ∘ O) carries from O's rounding.
BACKWARD_ROW_SUMS_PARAM: tuple[str, str, str] = ("row_sums", "float*", "uintp")


def backward_program_params(
    program: dict | None, learnable: tuple[str, ...]
) -> tuple[tuple[str, str, str], ...]:
    """What dot_do_o and dq_dk_dv take after their ABI: the program's scalars and side tensors and, where
    the forward classifies blocks at launch, the backward's own block classes (`<name>_bwd_block_mask`
    at the backward's tiles, launched before dq_dk_dv; dot_do_o takes the pointer and ignores it), then
    one fp32 gradient buffer `<name>_grad` per learnable tensor (zeroed before the launch, the tensor's
    shape)."""
    out = list(program_params(program))
    out += [(f"{name}_grad", "float*", "uintp") for name in learnable]
    return tuple(out)


@dataclass(frozen=True)
class BackwardSpec:
    """What the runner needs to launch the backward of one TL program (written as FILE.bwd.launch.json)."""

    # the forward's kernel name: the kernels are <name>_bwd_dot_do_o, _bwd_dq_dk_dv and _bwd_convert_dq
    # (and _bwd_row_grads, with dq_dk_dv's parameters, when row_sums > 0)
    name: str
    block_m: int
    block_n: int
    threads: int  # of every kernel but dq_dk_dv
    shared_bytes: int  # dynamic shared memory of dq_dk_dv
    dtype: str
    head_dim: int
    arch: str
    mask: str = "none"
    window: tuple[int, int] = (-1, -1)
    preprocess_rows: int = 32
    program: dict | None = None  # the forward's kernel IR (None: the plain forward)
    learnable: tuple[str, ...] = ()  # side tensors whose gradients the kernels write
    params: tuple[str, ...] = ()  # dq_dk_dv's parameters in order
    row_sums: int = 0  # fp32 per query row in `row_sums` (0: no row_grads kernel)
    deterministic: bool = False  # dQ through one dq_accum slice per grid column, summed in order
    tl_file: str | None = None
    source_sha256: str | None = None
    main_threads: int = 0  # dq_dk_dv's (0: `threads`; the sm_90 producer warp group adds 128)
    dq_scale: bool = False  # convert_dq takes softmax_scale after its parameters and scales dQ by it
    dq_zeroed: bool = False  # dot_do_o clears dq_accum (BACKWARD_PREPROCESS_ZERO_PARAMS), over dq_rows

    def kernel(self, part: str) -> str:
        return f"{self.name}_bwd_{part}"

    @property
    def dq_dk_dv_threads(self) -> int:
        return self.main_threads or self.threads

    @property
    def tma_params(self) -> tuple[str, ...]:
        """The TMA descriptors dq_dk_dv takes after its other parameters, in order (row_grads takes none):
        `BACKWARD_TMA_PARAMS`, or the ones a build of an earlier translator names."""
        return tuple(p for p in self.params if p.startswith("tma_"))

    @property
    def uses_tma(self) -> bool:
        return bool(self.tma_params)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @staticmethod
    def from_json(text: str) -> BackwardSpec:
        data = json.loads(text)
        data["window"] = tuple(data.get("window", (-1, -1)))
        data["learnable"] = tuple(data.get("learnable", ()))
        data["params"] = tuple(data.get("params", ()))
        return BackwardSpec(**data)
