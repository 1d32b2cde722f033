"""Preludes: the generated source splits into include block, definitions and kernels; the prelude header is
named after its text and keeps the first body copy across edits of the kernels; the kernels keep their
line numbers; and (marked `nvrtc`, on a small header) an edited kernel reads the written header and
compiles to the same binary as without it."""

from __future__ import annotations

import pytest

from runner import compile as rc
from runner.compile import header_prefix
from runner.compile_prelude import Preludes, split

SOURCE = """// generated
#include <cuda/std/cstdint>  // a small header: about a second per compile

template <class T> __device__ T twice(T x) { return x + x; }

extern "C" __global__ void __launch_bounds__(32, 1) k(int* x) {
#line 7 "k.tl"
  x[0] = twice(1);
}
"""


def test_split_finds_the_include_block_the_definitions_and_the_kernels() -> None:
    parts = split(SOURCE)
    assert parts is not None
    includes, definitions, kernels = parts
    assert includes.strip().startswith("// generated") and "#include <cuda/std/cstdint>" in includes
    assert definitions.strip().startswith("template <class T>") and kernels.startswith('extern "C"')
    assert split("int x;\n") is None and split("#include <a.h>\nint x;\n") is None


def test_the_header_keeps_its_first_body_copy_and_the_kernels_their_lines() -> None:
    preludes = Preludes()
    assert preludes.for_source(SOURCE, "k.cu") is None  # no source of the skeleton compiled yet
    preludes.remember(SOURCE)
    preludes.remember(SOURCE.replace("twice(1)", "twice(4)"))  # the first copy stays
    first = preludes.for_source(SOURCE, "k.cu")
    edited = preludes.for_source(SOURCE.replace("twice(1)", "twice(2)"), "k.cu")
    assert first is not None and edited is not None
    assert first.name == edited.name and first.text == edited.text and "twice(1)" in edited.text
    assert "static __device__ void k_prelude(int* x)" in first.text and "__global__" not in first.text
    assert header_prefix(edited.source).endswith(f'#include "{first.name}"')
    lines = edited.source.splitlines()
    at = lines.index('extern "C" __global__ void __launch_bounds__(32, 1) k(int* x) {')
    assert lines[at - 1] == '#line 6 "k.cu"' and "twice(2)" in edited.source
    assert preludes.for_source(SOURCE.replace("x + x", "2 * x"), "k.cu") is None  # another skeleton
    preludes.forget(SOURCE)
    assert preludes.for_source(SOURCE, "k.cu") is None
    preludes.remember(SOURCE.replace("twice(1)", "twice(3)"))
    again = preludes.for_source(SOURCE, "k.cu")
    assert again is not None and "twice(3)" in again.text and again.name != first.name


@pytest.fixture
def prelude_pch(fresh_pch):  # type: ignore[no-untyped-def]
    fresh_pch.prelude = True
    return fresh_pch


@pytest.mark.nvrtc
def test_an_edited_kernel_reads_the_prelude_header_and_compiles_the_same(prelude_pch) -> None:
    edited = SOURCE.replace("twice(1)", "twice(2)")
    outcomes = [rc.compile_source(SOURCE, arch="sm_80", name="k.cu", use_cache=False).pch for _ in range(2)]
    warm = rc.compile_source(edited, arch="sm_80", name="k.cu", use_cache=False)
    # the include block's header, then the prelude's (the first source compiled), then a read of it
    assert [*outcomes, warm.pch] == ["created", "created", "used"]
    assert len({p.name for p in prelude_pch.store._entries.values()}) == 2
    prelude_pch.prelude = False  # the same source with the include block's header only
    plain = rc.compile_source(edited, arch="sm_80", name="k.cu", use_cache=False)
    assert plain.code == warm.code
    with pytest.raises(rc.CompileError) as info:  # errors still point at the TL line, header or not
        prelude_pch.prelude = True
        rc.compile_source(SOURCE.replace("twice(1)", "acc_o"), arch="sm_80", name="k.cu", use_cache=False)
    assert [(r.file, r.line) for r in info.value.errors] == [("k.tl", 7)]


def test_generated_kernels_split_into_a_prelude_that_compiles_as_device_code() -> None:
    from benchmarks import pch_prelude

    for example in ("mha_fwd", "hopper_mha_fwd"):
        kernel = pch_prelude.translate(next(iter(pch_prelude.examples([example]))), None)
        assert pch_prelude.SCALE in kernel.source  # the probe's edit
        preludes = Preludes()
        preludes.remember(kernel.source)
        pre = preludes.for_source(kernel.source, kernel.name)
        assert pre is not None and f"struct {example}_traits" in pre.text
        assert f"static __device__ void {example}_prelude(" in pre.text
        assert "__global__" not in pre.text and "__grid_constant__" not in pre.text
        assert pre.source.count('extern "C" __global__') == kernel.source.count('extern "C" __global__')
        assert f"struct {example}_traits" not in pre.source
