"""Where the compiler's headers are and which versions compile a kernel: the facts the cache key needs.

NVRTC needs three header trees for a CuTe kernel: CUTLASS/CuTe (the `nvidia-cutlass` wheel), the CUDA
runtime headers (`cuda_runtime_api.h`, `cuda_fp16.h`, ...) and CCCL (`cuda/std/...`). They come either from
a CUDA toolkit (`$CUDA_HOME/include` and its `cccl/`) or from the pip packages `nvidia-cuda-runtime` and
`nvidia-cuda-cccl` (under `site-packages/nvidia/cu13/include`). We take ONE root, never a mix: two CCCL
versions on one include path break CuTe (CCCL 3.3 from CUDA 13.3 redeclares templates CUTLASS 4.2 also
declares). `$TL_CUDA_INCLUDE` overrides the search.

Nothing here imports torch or touches a GPU.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path


class ToolchainError(RuntimeError):
    """A header tree or library the compiler needs is missing; the message says how to install it."""


@dataclass(frozen=True)
class Toolchain:
    include_paths: tuple[str, ...]
    cutlass_version: str
    cccl_version: str
    nvrtc_version: str

    def fingerprint(self) -> dict[str, str]:
        return {
            "cutlass": self.cutlass_version,
            "cccl": self.cccl_version,
            "nvrtc": self.nvrtc_version,
        }


def cutlass_include() -> Path:
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or spec.origin is None:
        raise ToolchainError(
            "the CUTLASS headers are missing: install the `nvidia-cutlass` wheel "
            "(pip install 'tl-attention[cuda]')"
        )
    path = Path(spec.origin).parent / "source" / "include"
    if not (path / "cute" / "tensor.hpp").is_file():
        raise ToolchainError(f"the nvidia-cutlass wheel has no CuTe headers under {path}")
    return path


def _cccl_dir(root: Path) -> Path | None:
    """CCCL lives in `include/cccl` in CUDA 13 (toolkit and pip), directly in `include` in CUDA 12."""
    for cand in (root / "cccl", root):
        if (cand / "cuda" / "std" / "cassert").is_file():
            return cand
    return None


def _candidate_roots() -> list[Path]:
    roots: list[Path] = []
    override = os.environ.get("TL_CUDA_INCLUDE")
    if override:
        return [Path(override)]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            roots.append(Path(os.environ[var]) / "include")
    roots.append(Path("/usr/local/cuda/include"))
    # pip: nvidia-cuda-runtime and nvidia-cuda-cccl install into the `nvidia` namespace package.
    spec = importlib.util.find_spec("nvidia")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            for sub in ("cu13", "cuda_runtime", "cu12"):
                roots.append(Path(loc) / sub / "include")
    return roots


def cuda_includes() -> tuple[Path, Path]:
    """(runtime headers root, CCCL root) from the first root that has both."""
    tried = []
    for root in _candidate_roots():
        tried.append(str(root))
        if not (root / "cuda_runtime_api.h").is_file():
            continue
        cccl = _cccl_dir(root)
        if cccl is not None:
            return root, cccl
    raise ToolchainError(
        "no CUDA headers (cuda_runtime_api.h and CCCL's cuda/std) found in "
        + ", ".join(tried)
        + "; install a CUDA toolkit or pip install 'nvidia-cuda-runtime==13.0.*' 'nvidia-cuda-cccl==13.0.*'"
        " (or point $TL_CUDA_INCLUDE at an include directory)"
    )


def _cccl_version(cccl: Path) -> str:
    header = cccl / "cuda" / "std" / "__cccl" / "version.h"
    try:
        m = re.search(r"#define\s+CCCL_VERSION\s+(\d+)", header.read_text())
    except OSError:
        m = None
    return m.group(1) if m else "unknown"


def nvrtc_version() -> str:
    from cuda.bindings import nvrtc

    err, major, minor = nvrtc.nvrtcVersion()
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise ToolchainError(f"nvrtcVersion failed: {err}")
    return f"{major}.{minor}"


@functools.cache
def toolchain() -> Toolchain:
    cutlass = cutlass_include()
    runtime, cccl = cuda_includes()
    paths = [str(cutlass), str(runtime)]
    if cccl != runtime:
        paths.append(str(cccl))
    try:
        cutlass_version = importlib.metadata.version("nvidia-cutlass")
    except importlib.metadata.PackageNotFoundError:
        cutlass_version = "unknown"
    return Toolchain(
        include_paths=tuple(paths),
        cutlass_version=cutlass_version,
        cccl_version=_cccl_version(cccl),
        nvrtc_version=nvrtc_version(),
    )


_ARCH = re.compile(r"^(sm|compute)_(\d+)([af]?)$")


def arch_number(arch: str) -> int:
    """`sm_80` → 80, `compute_75` → 75, `sm_90a` → 90."""
    m = _ARCH.match(arch)
    if m is None:
        raise ValueError(f"not a CUDA architecture: {arch!r} (expected e.g. sm_80)")
    return int(m.group(2))


def compile_target(arch: str, device_arch: str | None) -> tuple[str, str]:
    """(NVRTC arch option, output kind) for running `arch`'s code on `device_arch`.

    No device (a build-only run): a cubin for the kernel's own arch, which also runs ptxas, so the
    build is complete. The device's own arch: a cubin. An older arch: PTX for `compute_XX`, which the
    driver JIT-compiles for the device; `__CUDA_ARCH__` stays the kernel's arch, so the code path
    verified is the one that arch would run. A newer arch than the device cannot run there, nor can an
    arch-specific target (`sm_90a`) on any other arch.
    """
    want = arch_number(arch)
    if device_arch is None:
        return arch, "cubin"
    have = arch_number(device_arch)
    if want == have:
        return arch, "cubin"  # `sm_90a` on an sm_90 device: the arch-specific cubin (wgmma, setmaxnreg)
    if _ARCH.match(arch).group(3):  # type: ignore[union-attr]  # arch_number matched it
        # `sm_90a` / `sm_100f` code uses arch-specific instructions: no PTX runs on another arch.
        raise ToolchainError(f"a kernel for {arch} runs only on an sm_{want} device, not on {device_arch}")
    if want < have:
        return f"compute_{want}", "ptx"
    raise ToolchainError(f"a kernel for {arch} cannot run on this {device_arch} device")
