"""The Hopper backend (sm_90a): TMA + mbarrier pipeline, wgmma, warp specialisation, from the same plan.

`emit_sm90(plan)` → (source, launch, source map); `generate` has the signature of the other backends.
The host side (TMA descriptors, the launch) is `runner.tma`: the runner owns host launch code.
"""

from runner.abi import TMA_PARAMS
from translator.backends.sm90.emit import NVRTC_ARCH, emit_sm90, generate

__all__ = ["NVRTC_ARCH", "TMA_PARAMS", "emit_sm90", "generate"]
