"""The row correction of learnable gradients that sum whole rows of scores (ALiBi's slopes, a per-head
bias): their per-row sums in the dQ/dK/dV kernel and the `<name>_bwd_row_grads` kernel that applies them.

A read uniform over a (batch, head) gets the gradient Σ_q Σ_k dX·g with dX = P ∘ (dP − D), g = ∂X/∂read.
Exactly, Σ_k P·dP = D, so each row's share is a covariance of dP and g under P, small where g varies
little over the keys P weighs. The kernels' D = rowsum(dO ∘ O) comes from O rounded to the input dtype;
its error δD enters each row's share as −δD · Σ_k P·g, and for ALiBi (g the distance, hundreds of keys)
that swamps the gradient: in a float64 emulation a bf16 O alone moves ALiBi's slopes gradient by 17–240 %
(`tests/translator/test_backward_row_sums.py`). So the main kernel also sums, per row, C = Σ_k P·dP (the
exact D's value, accumulated in fp32) and B = Σ_k P·g into `row_sums`, and `row_grads` adds
Σ_q (D − C) · B, which turns every row's share into Σ_k P (dP − C) g.
"""

from __future__ import annotations

from collections.abc import Callable

from kernel_ir import passes
from kernel_ir.expr import Expr, Load
from kernel_ir.program import Forward
from translator.backends.regions import Regions
from translator.writer import CodeWriter


def row_corrected(ir: Forward, partials: list[tuple[Load, Expr]]) -> list[int]:
    """Which of `partials` (learnable reads, ∂X/∂read) get the correction: those uniform over a (batch,
    head), under a softmax (without one there is no D)."""
    if ir.normalizer != "softmax":
        return []
    return [i for i, (ld, _) in enumerate(partials) if passes.level(ld) == "uniform"]


def row_sums_per_row(corrected: list[int]) -> int:
    """fp32 values per query row in `row_sums`: C, then one B per corrected read (0: no buffer)."""
    return 1 + len(corrected) if corrected else 0


def emit_row_sums(w: CodeWriter, corrected: list[int]) -> None:
    """Inside the dQ/dK/dV kernel's row loop, after the columns: the row's sums over this thread's keys,
    reduced over its quad (the four threads that hold one row of an m16n8 tile) and added into row_sums
    by the quad's first thread (rows past seqlen_q add nothing)."""
    names = ["tl_pdp", *(f"tl_pg{i}" for i in corrected)]
    for n in names:
        w.line(f"{n} += __shfl_xor_sync(0xffffffff, {n}, 1);")
        w.line(f"{n} += __shfl_xor_sync(0xffffffff, {n}, 2);")
    with w.block("if (row_in && tidx % 4 == 0)"):
        w.line(f"float* sums = row_sums + (row_base + row) * {len(names)};")
        for j, n in enumerate(names):
            w.line(f"atomicAdd(sums + {j}, {n});")


def emit_row_grads(
    w: CodeWriter,
    ir: Forward,
    partials: list[tuple[Load, Expr]],
    corrected: list[int],
    *,
    kernel: str,
    threads: int,
    open_kernel: Callable[[str], None],
) -> None:
    """`kernel`: one thread per query row of one (batch, head), grid (ceil(seqlen_q / threads), batch,
    heads), after the dQ/dK/dV kernel; adds Σ_rows (D − C) · B to each corrected read's gradient."""
    reg = Regions(ir)
    n = row_sums_per_row(corrected)
    warps = threads // 32
    open_kernel(kernel)
    with w.indent():
        w.line("const int bidb = blockIdx.y, bidh = blockIdx.z;")
        w.line("const int bidh_kv = bidh / (heads / heads_kv);")
        w.line(f"const int row = blockIdx.x * {threads} + threadIdx.x;")
        w.line("const long long row_base = (static_cast<long long>(bidb) * heads + bidh) * seqlen_q;")
        w.line(f"__shared__ float warp_part[{warps}][{len(corrected)}];")
        w.line("const bool row_in = row < seqlen_q;")
        w.line(f"const float* sums = row_sums + (row_base + (row_in ? row : 0)) * {n};")
        w.line("const float d_err = row_in ? dpsum[row_base + row] - sums[0] : 0.f;  // D − Σ_k P·dP")
        for j in range(len(corrected)):
            w.line(f"const float part{j} = tl::warp_sum(d_err * sums[{1 + j}]);")
            w.line(f"if (threadIdx.x % 32 == 0) warp_part[threadIdx.x / 32][{j}] = part{j};")
        w.line("__syncthreads();")
        with w.block("if (threadIdx.x == 0)"):
            for j, i in enumerate(corrected):
                ld = partials[i][0]
                w.line(f"float total{j} = 0.f;")
                w.line(f"for (int k = 0; k < {warps}; ++k) total{j} += warp_part[k][{j}];")
                w.line(f"atomicAdd(&{ld.tensor}_grad[{reg._offset(ld)}], total{j});")
    w.line("}")
    w.line()
