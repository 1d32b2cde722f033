"""Backends: one per architecture family, each `generate(plan, *, tl_file, line_directives)`.

sm_7x/sm_8x targets use the mma.sync + cp.async backend (`sm80`); `Target sm_90` uses the Hopper backend
(`sm90`: TMA, wgmma, warp specialisation, compiled for `sm_90a`). Both read the same `KernelPlan`.
Inference kernels (split-KV decode, paged KV, packed GQA) use `inference` on every target: a cp.async +
mma.sync kernel, since decode is bound by memory bandwidth rather than by the tensor cores. A packed
prefill (`Param varlen`, one block per tile) is compute-bound: on sm_90 it is the Hopper kernel's.
"""

from __future__ import annotations

from collections.abc import Callable

from runner.abi import LaunchSpec
from translator.plan import KernelPlan

Generate = Callable[..., tuple[str, dict[int, int], LaunchSpec]]


def backend_for(plan: KernelPlan) -> Generate:
    if plan.inference_kernel:
        from translator.backends import inference

        return inference.generate
    if plan.compute_capability >= (9, 0):
        from translator.backends import sm90

        return sm90.generate
    from translator.backends import sm80

    return sm80.generate
