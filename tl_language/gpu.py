"""The GPU model: one table of per-target facts used by the checker, hover, the translator and the planner.

Numbers are the CUDA programming guide's per-compute-capability limits (shared memory per block after
opting in, registers) and the parts' datasheets (SM counts). MMA shapes are the warp-level `mma.sync`
shapes for 16-bit inputs (m16n8k16 from sm_80, m16n8k8 on sm_75), and the fp8 one on sm_89+.
"""

from __future__ import annotations

from dataclasses import dataclass

DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp8_e4m3": 1, "fp32": 4}
DTYPES = ("fp16", "bf16", "fp8_e4m3")


@dataclass(frozen=True, slots=True)
class MmaShape:
    m: int
    n: int
    k: int

    def __str__(self) -> str:
        return f"m{self.m}n{self.n}k{self.k}"


@dataclass(frozen=True, slots=True)
class Part:
    name: str
    sms: int


@dataclass(frozen=True, slots=True)
class Target:
    arch: str  # "sm_80"
    compute_capability: tuple[int, int]
    smem_per_block: int  # bytes, maximum dynamic shared memory per block (opt-in)
    smem_per_sm: int
    regs_per_thread: int
    regs_per_sm: int
    max_threads_per_block: int
    warp_size: int
    dtypes: tuple[str, ...]  # input dtypes the tensor cores take
    mma: dict[str, MmaShape]  # per input dtype, the warp-level MMA shape
    cp_async: bool  # sm_80+: asynchronous global → shared copies
    ldmatrix: bool
    tma: bool  # sm_90: Tensor Memory Accelerator
    wgmma: bool  # sm_90a: warp-group MMA with shared-memory operands
    parts: tuple[Part, ...]

    @property
    def copy_bytes(self) -> int:
        """The widest global → shared copy per thread (16 bytes: cp.async.cg or a 128-bit load)."""
        return 16


_M16N8K16 = MmaShape(16, 8, 16)
_M16N8K8 = MmaShape(16, 8, 8)
_M16N8K32 = MmaShape(16, 8, 32)  # fp8 e4m3 on sm_89+

TARGETS: dict[str, Target] = {
    "sm_75": Target(
        "sm_75", (7, 5), 64 * 1024, 64 * 1024, 255, 65536, 1024, 32, ("fp16",),
        {"fp16": _M16N8K8}, cp_async=False, ldmatrix=True, tma=False, wgmma=False,
        parts=(Part("Tesla T4", 40), Part("Quadro RTX 8000", 72)),
    ),
    "sm_80": Target(
        "sm_80", (8, 0), 163 * 1024, 164 * 1024, 255, 65536, 1024, 32, ("fp16", "bf16"),
        {"fp16": _M16N8K16, "bf16": _M16N8K16}, cp_async=True, ldmatrix=True, tma=False, wgmma=False,
        parts=(Part("A100", 108), Part("A30", 56)),
    ),
    "sm_86": Target(
        "sm_86", (8, 6), 99 * 1024, 100 * 1024, 255, 65536, 1024, 32, ("fp16", "bf16"),
        {"fp16": _M16N8K16, "bf16": _M16N8K16}, cp_async=True, ldmatrix=True, tma=False, wgmma=False,
        parts=(Part("A10", 72), Part("RTX 3090", 82)),
    ),
    "sm_89": Target(
        "sm_89", (8, 9), 99 * 1024, 100 * 1024, 255, 65536, 1024, 32, ("fp16", "bf16", "fp8_e4m3"),
        {"fp16": _M16N8K16, "bf16": _M16N8K16, "fp8_e4m3": _M16N8K32},
        cp_async=True, ldmatrix=True, tma=False, wgmma=False,
        parts=(Part("L40S", 142), Part("RTX 4090", 128)),
    ),
    "sm_90": Target(
        "sm_90", (9, 0), 227 * 1024, 228 * 1024, 255, 65536, 1024, 32, ("fp16", "bf16", "fp8_e4m3"),
        {"fp16": _M16N8K16, "bf16": _M16N8K16, "fp8_e4m3": _M16N8K32},
        cp_async=True, ldmatrix=True, tma=True, wgmma=True,
        parts=(Part("H100 SXM", 132), Part("H200", 132), Part("H100 PCIe", 114)),
    ),
}

DEFAULT_TARGET = "sm_80"
DEFAULT_DTYPE = "fp16"
# Head dimensions the generated kernels support (QK and V each).
HEAD_DIMS = (32, 64, 96, 128, 160, 192, 256)


def target(arch: str) -> Target | None:
    return TARGETS.get(arch.lower())


def sm_count(part_name: str) -> int | None:
    for t in TARGETS.values():
        for p in t.parts:
            if p.name.lower() == part_name.lower():
                return p.sms
    return None
