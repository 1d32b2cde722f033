"""Backends: one per architecture family, each `generate(plan, *, tl_file, line_directives)`.

Every sm_7x/sm_8x target and, for now, sm_90 use the mma.sync backend (`sm80`); a Hopper backend (TMA,
wgmma, warp specialisation) plugs in here for sm_90 and reads the same `KernelPlan`.
"""

from __future__ import annotations

from collections.abc import Callable

from runner.abi import LaunchSpec
from translator.plan import KernelPlan

Generate = Callable[..., tuple[str, dict[int, int], LaunchSpec]]


def backend_for(plan: KernelPlan) -> Generate:
    from translator.backends import sm80

    return sm80.generate
