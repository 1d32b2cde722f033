"""TL054: the `Kernel` name is usable as the generated `extern "C" __global__` function's name.

The translator writes `extern "C" __global__ void NAME(…)` and `struct NAME_traits` at file scope of a
source that says `using namespace cute;`, so NVRTC refuses (TL502 after a long compile) a name that is a
C++ keyword (`for`), a reserved identifier (`__x`, `_X`), a namespace the source uses (`cute`), a C function
of the CUDA headers (`max`: two `extern "C"` overloads) or a CuTe name the generated code uses unqualified
(`Tensor`, `Shape`, `make_tensor`: ambiguous). The last list is `GENERATED_NAMES`;
tests/tl_language/test_tl_kernel_name.py regenerates every example's source on each backend and checks that
it names no other such identifier.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from tl_language import syntax as ast
from tl_language.diagnostics import Diagnostic, make
from tl_language.model import Model


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


CPP_KEYWORDS = _words(
    """
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t class
compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield decltype
default delete do double dynamic_cast else enum explicit export extern false float for friend goto if inline
int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public
register reinterpret_cast requires return short signed sizeof static static_assert static_cast struct switch
template this thread_local throw true try typedef typeid typename union unsigned using virtual void volatile
wchar_t while xor xor_eq main
"""
)
# CUDA's built-in variables and types, and the namespaces the generated source opens or qualifies.
CUDA_NAMES = _words(
    """
threadIdx blockIdx blockDim gridDim warpSize dim3 uint3 int2 int4 float2 float4 half nv_bfloat16
std cute cutlass cuda cub thrust tl
"""
)
# C-linkage functions of the CUDA device headers that NVRTC includes (a kernel of the same name is a second
# `extern "C"` overload): the common math and runtime ones.
CUDA_FUNCTIONS = _words(
    """
min max abs fabs fabsf fmin fminf fmax fmaxf exp expf exp2 exp2f exp10 expm1 log logf log2 log2f log10
log1p pow powf sqrt sqrtf rsqrt rsqrtf cbrt sin sinf cos cosf tan tanf tanh tanhf floor floorf ceil ceilf
round roundf trunc truncf fma fmaf erf erff printf malloc free memcpy memset assert clock clock64
atomicAdd atomicMax atomicMin atomicExch atomicCAS
"""
)
# CuTe and CUTLASS names the generated sources use unqualified (templates and types).
GENERATED_NAMES = _words(
    """
AutoVectorizingCopyWithAssumedAlignment CUTE_NO_UNROLL CUTE_UNROLL ComposedLayout Copy_Atom GmmaDescriptor
Int Layout MMA_Atom SM80_CP_ASYNC_CACHEGLOBAL ScaledBasis Shape Step Stride Swizzle Tensor Tile TiledMMA
UniversalCopy get is_base_of_v make_tensor rank rank_v remove_cvref_t repeat size tma_store_wait
warpgroup_wait
"""
)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def kernel_name_problem(name: str) -> str | None:
    """Why `name` cannot name the generated kernel, or None."""
    if not _IDENT.fullmatch(name):
        return "is not a C identifier"
    if name in CPP_KEYWORDS:
        return "is a C++ keyword"
    if name.startswith("__") or (name.startswith("_") and name[1:2].isupper()):
        return "is reserved in C++ (a leading `__` or `_` and a capital)"
    if name in CUDA_NAMES:
        return "is a CUDA built-in or a namespace the generated source uses"
    if name in CUDA_FUNCTIONS:
        return "is a C function of the CUDA headers"
    if name in GENERATED_NAMES:
        return "is a CuTe name the generated source uses unqualified"
    return None


def check(document: ast.Document, model: Model) -> Iterator[Diagnostic]:
    for stmt in document.statements:
        if isinstance(stmt, ast.KernelStmt) and stmt.name is not None:
            why = kernel_name_problem(stmt.name.name)
            if why is not None:
                yield make(
                    "TL054",
                    stmt.name.range,
                    f"kernel name `{stmt.name.name}` {why}: the generated CUDA declares "
                    f'`extern "C" __global__ void {stmt.name.name}(…)`; choose another, e.g. '
                    f"`{stmt.name.name}_fwd`",
                )
