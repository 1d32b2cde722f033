"""The Hopper backend (sm_90a): TMA + mbarrier pipeline, wgmma, warp specialisation, from the same plan.

`emit_sm90(plan)` → (source, launch, source map); `generate` has the signature of the other backends.
`tma_host` encodes the kernel's TMA descriptors on the host and launches it (see docs/hopper.md).
"""

from translator.backends.sm90.emit import NVRTC_ARCH, TMA_PARAMS, emit_sm90, generate

__all__ = ["NVRTC_ARCH", "TMA_PARAMS", "emit_sm90", "generate"]
