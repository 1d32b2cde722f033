"""Gradients of learnable reads that are uniform over a (batch, head) (ALiBi's slopes, a per-head bias),
summed per query row in the dQ/dK/dV kernel and finished by the `<name>_bwd_row_grads` kernel.

Such a read's gradient is Σ_q Σ_k dX·g, g = ∂X/∂read, dX = P ∘ (dP − D). Σ_k P·dP = D exactly, so each
row's share is a covariance of dP and g under P: small where g varies little over the keys P weighs,
while g itself can be large (ALiBi's g is the distance, thousands of keys). Summing dX·g therefore
amplifies every inconsistency between P, D and the row's normalisation: D = rowsum(dO ∘ O) from O rounded
to the input dtype (17–240 % on ALiBi's slopes in a float64 emulation), and P = exp(X − LSE) with an
fp32 LSE and fp32 scores in the thousands, whose rows do not sum to 1 to 1e-4 (still 14–25 %).

So the kernel sums, per row and over the row's keys, S = Σ P, C = Σ P·dP and, per read, B = Σ P·g and
A = Σ P·dP·g into `row_sums` (fp32, atomics across key blocks), and `row_grads` forms each row's share
from the kernel's own P alone, normalised: (A − C·B / S) / S, S counting a sink's exp(sink − LSE) too.
That is exact for any constant factor in P (the LSE's error) and needs no D; a float32 emulation
matches the float64 gradient to 1e-4 (`tests/translator/test_backward_row_sums.py`).
"""

from __future__ import annotations

from collections.abc import Callable

from kernel_ir import passes
from kernel_ir.expr import Expr, Load
from kernel_ir.program import Forward
from translator.backends.regions import Regions
from translator.writer import CodeWriter

LOG2E = "1.44269504088896340736f"  # shared with translator.backends.sm80_bwd
POS_INF = "__int_as_float(0x7f800000)"


def row_corrected(ir: Forward, partials: list[tuple[Load, Expr]]) -> list[int]:
    """Which of `partials` (learnable reads, ∂X/∂read) get the correction: those uniform over a (batch,
    head), under a softmax (without one there is no D)."""
    if ir.normalizer != "softmax":
        return []
    return [i for i, (ld, _) in enumerate(partials) if passes.level(ld) == "uniform"]


def row_sums_per_row(corrected: list[int]) -> int:
    """fp32 values per query row in `row_sums`: S, C, then (B, A) per corrected read (0: no buffer)."""
    return 2 + 2 * len(corrected) if corrected else 0


def emit_row_sums(w: CodeWriter, corrected: list[int], *, transposed: bool = False) -> None:
    """Inside the dQ/dK/dV kernel's row loop, after the columns: the row's sums over this thread's keys,
    reduced over its quad (the four threads that hold one row of an m16n8 tile) and added into row_sums
    by the quad's first thread (rows past seqlen_q add nothing). `transposed`: the accumulator holds Sᵀ
    (a wgmma tile of key rows), where a query is one column, held by the eight lanes of equal lane % 4:
    reduced over those, added by lanes 0–3."""
    names = ["tl_ps", "tl_pdp", *(n for i in corrected for n in (f"tl_pg{i}", f"tl_pdpg{i}"))]
    for n in names:
        for lane in (4, 8, 16) if transposed else (1, 2):
            w.line(f"{n} += __shfl_xor_sync(0xffffffff, {n}, {lane});")
    with w.block(f"if (row_in && {'tidx % 32 < 4' if transposed else 'tidx % 4 == 0'})"):
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
    heads), after the dQ/dK/dV kernel; adds Σ_rows (A − C·B / S) / S to each corrected read's gradient."""
    reg = Regions(ir)
    n = row_sums_per_row(corrected)
    warps = threads // 32
    offsets = [reg._offset(partials[i][0]) for i in corrected]
    sink = reg.c(ir.sink) if ir.sink is not None else None
    open_kernel(kernel)
    with w.indent():
        w.line("const int bidb = blockIdx.y, bidh = blockIdx.z;")
        if "bidh_kv" in " ".join([*offsets, sink or ""]):
            w.line("const int bidh_kv = bidh / (heads / heads_kv);")
        w.line(f"const int row = blockIdx.x * {threads} + threadIdx.x;")
        w.line("const long long row_base = (static_cast<long long>(bidb) * heads + bidh) * seqlen_q;")
        w.line(f"__shared__ float warp_part[{warps}][{len(corrected)}];")
        w.line("const bool row_in = row < seqlen_q;")
        w.line(f"const float* sums = row_sums + (row_base + (row_in ? row : 0)) * {n};")
        total = "sums[0]"
        if sink is not None:
            w.line("const float l = row_in ? lse[row_base + row] : 0.f;")
            w.line(
                f"const float p_sink = row_in && l != {POS_INF} ? "
                f"tl::exp2_approx(({sink} - l) * {LOG2E}) : 0.f;"
            )
            total = "sums[0] + p_sink"
        w.comment("the row's probabilities sum to s_all (1 up to the LSE's rounding): divide it out")
        w.line(f"const float s_all = {total};")
        w.line("const float inv_s = row_in && s_all > 0.f ? 1.f / s_all : 0.f;")
        for j in range(len(corrected)):
            b, a = 2 + 2 * j, 3 + 2 * j
            w.line(f"const float part{j} = tl::warp_sum((sums[{a}] - sums[1] * sums[{b}] * inv_s) * inv_s);")
            w.line(f"if (threadIdx.x % 32 == 0) warp_part[threadIdx.x / 32][{j}] = part{j};")
        w.line("__syncthreads();")
        with w.block("if (threadIdx.x == 0)"):
            for j, (i, offset) in enumerate(zip(corrected, offsets, strict=True)):
                w.line(f"float total{j} = 0.f;")
                w.line(f"for (int k = 0; k < {warps}; ++k) total{j} += warp_part[k][{j}];")
                w.line(f"atomicAdd(&{partials[i][0].tensor}_grad[{offset}], total{j});")
    w.line("}")
    w.line()
