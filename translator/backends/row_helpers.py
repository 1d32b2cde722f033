"""Device helpers both backends emit inside `namespace tl`: row reductions, exp2 and the dtype conversion.

The m16n8 (mma.sync) and wgmma accumulators both spread one row over the four threads of a quad, so the
softmax's row max and sum are the same shuffles on every architecture.
"""

from __future__ import annotations

from translator.writer import CodeWriter


def emit_row_helpers(w: CodeWriter) -> None:
    w.comment("The four threads of a quad hold one accumulator row between them.")
    with w.block("CUTE_DEVICE float quad_max(float x)"):
        w.line("x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));")
        w.line("return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));")
    w.line()
    with w.block("CUTE_DEVICE float quad_sum(float x)"):
        w.line("x += __shfl_xor_sync(0xffffffff, x, 2);")
        w.line("return x + __shfl_xor_sync(0xffffffff, x, 1);")
    w.line()
    w.comment("2^x in one MUFU instruction, whatever the compile flags (exp2f is exact without fast math).")
    with w.block("CUTE_DEVICE float exp2_approx(float x)"):
        w.line("float y;")
        w.line('asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));')
        w.line("return y;")
    w.line()
    w.comment("Converts a float fragment to the input type in pairs (cvt.rn.{f16,bf16}x2.f32).")
    w.line("template <class To, class Engine, class Layout>")
    with w.block("CUTE_DEVICE auto convert_fragment(Tensor<Engine, Layout> const& src)"):
        w.line("using From = typename Engine::value_type;")
        w.line("constexpr int N = decltype(size(src))::value;")
        w.line("Tensor dst = make_tensor<To>(src.layout());")
        w.line("auto const& in = *reinterpret_cast<cutlass::Array<From, N> const*>(src.data());")
        w.line(
            "*reinterpret_cast<cutlass::Array<To, N>*>(dst.data()) = "
            "cutlass::NumericArrayConverter<To, From, N>{}(in);"
        )
        w.line("return dst;")
