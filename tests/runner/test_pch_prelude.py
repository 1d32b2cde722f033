"""benchmarks/pch_prelude.py without NVRTC: the generated source splits into a prelude header (traits,
helpers, an uncalled device copy of each kernel) and a kernel source whose include block ends with it."""

from __future__ import annotations

from benchmarks import pch_prelude as pp
from runner.compile import header_prefix


def test_the_prelude_holds_everything_but_the_kernels_and_a_copy_of_them() -> None:
    for example, target in (("mha_fwd", None), ("hopper_mha_fwd", None)):
        kernel = pp.translate(next(iter(pp.examples([example]))), target)
        header, source = pp.split(kernel.source, "k_prelude.cuh")
        assert header_prefix(source).endswith('#include "k_prelude.cuh"')
        assert f"struct {example}_traits" in header and f"struct {example}_traits" not in source
        assert f"static __device__ void {example}_prelude(" in header and "__global__" not in header
        assert "__grid_constant__" not in header
        assert source.count('extern "C" __global__') == kernel.source.count('extern "C" __global__')
        assert pp.SCALE in source
