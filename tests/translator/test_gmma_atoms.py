"""wgmma atoms outside CuTe's base N are generated into the Hopper forward kernel (sm90/gmma.py,
`atom_definitions`) instead of including CuTe's 76k-line extended GMMA headers; the generated op struct
emits the same PTX as CuTe's and its traits are CuTe's types."""

from __future__ import annotations

import re

import pytest
from translator_cases import translate_example

from translator.backends.sm90.gmma import BASE_N, EXT_INCLUDES, GmmaAtom, atom_definitions, pv_atom, qk_atom

EXT_HEADERS = ("cute/arch/mma_sm90_gmma_ext.hpp", "cute/atom/mma_traits_sm90_gmma_ext.hpp")


def test_bn160_kernel_defines_its_atom_and_includes_no_ext_header() -> None:
    source = translate_example("hopper_mha_fwd").source  # BN 160, d 128: Q·Kᵀ 64x160 (SS), P·V 64x128 (RS)
    includes = [line for line in source.splitlines() if line.startswith("#include")]
    assert not any(h in line for line in includes for h in EXT_HEADERS)
    assert "struct SM90_64x160x16_F32BF16BF16_SS {" in source
    assert (
        "struct cute::MMA_Traits<tl::SM90_64x160x16_F32BF16BF16_SS<tnspA, tnspB, scaleA, scaleB>> {" in source
    )
    assert '"wgmma.mma_async.sync.aligned.m64n160k16.f32.bf16.bf16 "' in source
    assert "make_tiled_mma(tl::SM90_64x160x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>{}," in source
    # P·V's N is a base shape: CuTe's own atom, nothing generated for it
    assert (
        "make_tiled_mma(SM90::GMMA::MMA_64x128x16_F32BF16BF16_RS<GMMA::Major::K, GMMA::Major::MN>{},"
        in source
    )
    assert "_RS {" not in source and source.count("MMA_Traits<tl::") == 1
    assert "CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED" not in source


def test_the_definitions_follow_the_include_block() -> None:
    """After `using namespace cute;`: the precompiled header (the include block) stays the base one."""
    from runner.compile import header_prefix

    source = translate_example("hopper_mha_fwd").source
    assert source.index("using namespace cute;") < source.index("namespace tl {\n// MMA_Atom calls")
    assert header_prefix(source) == header_prefix(translate_example("hopper_mha_fwd", BN=128).source)


def test_line_directives_still_number_the_cu_file_and_the_tl_lines() -> None:
    """The generated definitions are plain scaffolding lines: `#line n "….cu"` still names the next line's
    own number, and each TL directive still agrees with the source map."""
    t = translate_example("hopper_mha_fwd")
    lines = t.source.splitlines()
    back, tl = 0, 0
    for i, line in enumerate(lines, 1):
        if m := re.fullmatch(r'#line (\d+) "hopper_mha_fwd\.cu"', line):
            assert int(m.group(1)) == i + 1, line
            back += 1
        elif m := re.fullmatch(r'#line (\d+) "hopper_mha_fwd\.tl"', line):
            assert t.source_map.get(i + 1) == int(m.group(1)), (i, line)
            tl += 1
    assert back > 10 and tl > 10


def test_base_shapes_generate_nothing() -> None:
    assert atom_definitions(*(qk_atom("bf16", n) for n in BASE_N), pv_atom("fp16", 128)) == ()
    source = translate_example("hopper_mha_fwd", BN=128).source
    assert "MMA_Traits<tl::" not in source and "wgmma.mma_async" not in source


def test_an_atom_used_twice_is_defined_once() -> None:
    a = qk_atom("bf16", 160)
    text = "\n".join(atom_definitions(a, GmmaAtom(160, "SS", "bf16", "MN"), a))
    assert text.count("struct SM90_64x160x16_F32BF16BF16_SS {") == 1


def _asm(atom: GmmaAtom) -> str:
    text = "\n".join(atom_definitions(atom))
    return text[text.index("asm volatile(") : text.index("#else")]


def test_ss_operands_follow_cute() -> None:
    asm = _asm(GmmaAtom(160, "SS", "fp16", "K"))
    assert "wgmma.mma_async.sync.aligned.m64n160k16.f32.f16.f16 " in asm
    assert "setp.ne.b32 p, %82, 0;" in asm and '" %80,"' in asm and '" %81,"' in asm
    assert '" p, %83, %84, %85, %86;\\n"' in asm
    assert asm.count('"+f"(d') == 80 and '"+f"(d79)' in asm
    assert '"l"(desc_a), "l"(desc_b),' in asm
    assert '"r"(int32_t(scale_D)), "n"(int32_t(scaleA)), "n"(int32_t(scaleB)), "n"(int32_t(tnspA)), ' in asm


def test_rs_operands_follow_cute() -> None:
    asm = _asm(GmmaAtom(176, "RS", "bf16", "MN"))
    assert "m64n176k16.f32.bf16.bf16 " in asm
    n_acc = 88
    assert f"setp.ne.b32 p, %{n_acc + 5}, 0;" in asm
    assert f'" {{%{n_acc}, %{n_acc + 1}, %{n_acc + 2}, %{n_acc + 3}}},"' in asm
    assert f'" p, %{n_acc + 6}, %{n_acc + 7}, %{n_acc + 8};\\n"' in asm
    assert '"r"(a00), "r"(a01), "r"(a02), "r"(a03), "l"(desc_b),' in asm
    assert "tnspA" not in asm  # RS: A comes from registers, K-major (a static_assert)


# ---- NVRTC ------------------------------------------------------------------------------------------

# CuTe's ext atoms and ours in one translation unit (so also: no collision when a user includes both),
# one kernel per atom calling `fma`; their PTX must be the same, and the traits the same types.
_PROBE = """
#include <cute/tensor.hpp>
#include <cute/arch/mma_sm90_gmma_ext.hpp>
#include <cute/atom/mma_traits_sm90_gmma_ext.hpp>

using namespace cute;

{definitions}

template <class Op, size_t... I>
__device__ void call_ss(float (&d)[sizeof...(I)], uint64_t da, uint64_t db, index_sequence<I...>) {{
  Op::fma(da, db, d[I]..., GMMA::ScaleOut::Zero);
}}
template <class Op, size_t... I>
__device__ void call_rs(float (&d)[sizeof...(I)], uint32_t const* a, uint64_t db, index_sequence<I...>) {{
  Op::fma(a[0], a[1], a[2], a[3], db, d[I]..., GMMA::ScaleOut::Zero);
}}
template <class Op, int N, bool SS>
__device__ void probe(float* out, uint64_t da, uint64_t db, uint32_t const* a) {{
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i) d[i] = out[i];
  if constexpr (SS) call_ss<Op>(d, da, db, make_index_sequence<N / 2>{{}});
  else call_rs<Op>(d, a, db, make_index_sequence<N / 2>{{}});
  for (int i = 0; i < N / 2; ++i) out[i] = d[i];
}}
template <class X, class Y>
constexpr bool same_traits() {{
  using TX = MMA_Traits<X>;
  using TY = MMA_Traits<Y>;
  return is_same_v<typename TX::ValTypeA, typename TY::ValTypeA> &&
         is_same_v<typename TX::ValTypeB, typename TY::ValTypeB> &&
         is_same_v<typename TX::ValTypeC, typename TY::ValTypeC> &&
         is_same_v<typename TX::ValTypeD, typename TY::ValTypeD> &&
         is_same_v<typename TX::FrgTypeB, typename TY::FrgTypeB> &&
         is_same_v<typename TX::Shape_MNK, typename TY::Shape_MNK> &&
         is_same_v<typename TX::ThrID, typename TY::ThrID> &&
         is_same_v<typename TX::ALayout, typename TY::ALayout> &&
         is_same_v<typename TX::BLayout, typename TY::BLayout> &&
         is_same_v<typename TX::CLayout, typename TY::CLayout>;
}}
{kernels}
"""

_KERNEL = """
static_assert(same_traits<{cute}, {ours}>(), "{name}: traits differ");
extern "C" __global__ void cute_{name}(float* out, uint64_t da, uint64_t db, uint32_t const* a) {{
  probe<{cute}, {n}, {ss}>(out, da, db, a);
}}
extern "C" __global__ void ours_{name}(float* out, uint64_t da, uint64_t db, uint32_t const* a) {{
  probe<{ours}, {n}, {ss}>(out, da, db, a);
}}
"""

PROBED = (
    GmmaAtom(160, "SS", "bf16", "K"),
    GmmaAtom(160, "RS", "bf16", "MN"),
    GmmaAtom(176, "SS", "fp16", "MN"),
    GmmaAtom(80, "RS", "fp16", "MN"),
)


def _entry(ptx: str, name: str) -> str:
    """The PTX of `.entry name`, its parameter names made neutral and its whitespace collapsed: the
    inline asm's text is copied into the PTX as written, and CuTe's pads its operand lists into columns."""
    start = ptx.index(f".entry {name}(")
    body = ptx[start : ptx.index("\n}\n", start)]
    body = body.replace(f"{name}_param_", "param_").replace(f".entry {name}(", ".entry k(")
    body = re.sub(r"^\s*\.loc\s.*\n", "", body, flags=re.M)  # line info: the source lines differ
    body = re.sub(r"[ \t]+", " ", body)
    return re.sub(r"\s*([{},;])\s*", r"\1", body)


@pytest.mark.nvrtc
@pytest.mark.slow
def test_generated_atoms_emit_cutes_ptx() -> None:
    try:
        from cuda.core import ProgramOptions

        from runner.compile import _nvrtc_once, nvrtc_options
        from runner.toolchain import ToolchainError, toolchain

        toolchain()
    except (ImportError, ToolchainError) as exc:
        pytest.skip(f"no NVRTC toolchain: {exc}")
    kernels = []
    for a in PROBED:
        name = f"{a.operands}{a.n}_{a.dtype}_{a.major_b}"
        ours = a.type()
        kernels.append(
            _KERNEL.format(cute=a.cute(), ours=ours, name=name, n=a.n, ss=str(a.operands == "SS").lower())
        )
    source = _PROBE.format(definitions="\n".join(atom_definitions(*PROBED)), kernels="\n".join(kernels))
    flags = ProgramOptions(**nvrtc_options("compute_90a", "atoms.cu")).as_bytes("nvrtc")
    handle, log, ptx = _nvrtc_once(source, "atoms.cu", flags, "ptx")
    handle.destroy()
    assert ptx is not None, log[:4000]
    text = ptx.decode()
    for a in PROBED:
        name = f"{a.operands}{a.n}_{a.dtype}_{a.major_b}"
        theirs, mine = _entry(text, f"cute_{name}"), _entry(text, f"ours_{name}")
        assert f"wgmma.mma_async.sync.aligned.m64n{a.n}k16" in mine
        assert mine == theirs, name


@pytest.mark.nvrtc
@pytest.mark.slow
def test_hopper_mha_fwd_compiles_for_sm90a() -> None:
    try:
        from runner.compile import CompileError, compile_source
        from runner.toolchain import ToolchainError, toolchain

        toolchain()
    except (ImportError, ToolchainError) as exc:
        pytest.skip(f"no NVRTC toolchain: {exc}")
    t = translate_example("hopper_mha_fwd")
    assert not any(h.split("  ")[0] in t.source for h in EXT_INCLUDES)
    try:
        ck = compile_source(
            t.source,
            arch=t.launch.arch,
            name="hopper_mha_fwd.cu",
            source_map=t.source_map,
            tl_file=t.launch.tl_file,
        )
    except CompileError as err:
        pytest.fail(f"{err}\n{err.log[:4000]}")
    assert t.launch.arch == "sm_90a" and ck.kind == "cubin" and ck.code
    # an error in a TL-tagged line still reports that TL line
    lines = t.source.splitlines()
    at = next(
        i
        for i, line in enumerate(lines)
        if line.startswith("#line ") and line.endswith('"hopper_mha_fwd.tl"')
    )
    tl_line = int(lines[at].split()[1])
    lines[at + 1] = "tl_no_such_name += 1; " + lines[at + 1]
    with pytest.raises(CompileError) as info:
        compile_source(
            "\n".join(lines) + "\n",
            arch=t.launch.arch,
            name="hopper_mha_fwd.cu",
            source_map=t.source_map,
            tl_file=t.launch.tl_file,
            use_cache=False,
        )
    first = next(r for r in info.value.records if r.is_error)
    assert first.file.endswith("hopper_mha_fwd.tl") and first.line == tl_line, first
    assert "tl_no_such_name" in first.message
