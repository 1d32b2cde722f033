"""Assemble PTX for an older architecture into a cubin for the device, in the compile worker.

Code for sm_75/sm_80 runs on a newer GPU as PTX for `compute_75`/`compute_80` (so `__CUDA_ARCH__` and with
it every CuTe code path stay those of the kernel's own arch). Left as PTX, the driver JIT-compiles it
when the module loads, one kernel after another in the launching process (seconds each for an attention
kernel). Running `ptxas` on the PTX in the parallel compile workers instead moves that work off the
critical path and into the compile cache. Without a usable `ptxas` (none installed, or one older than the
PTX) the PTX is kept and the driver JIT remains the fallback.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

PTXAS_TIMEOUT_S = 600


@functools.cache
def ptxas_path() -> str | None:
    if os.environ.get("TL_NO_PTXAS"):
        return None
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            cand = Path(os.environ[var]) / "bin" / "ptxas"
            if cand.is_file():
                return str(cand)
    found = shutil.which("ptxas")
    if found:
        return found
    default = Path("/usr/local/cuda/bin/ptxas")
    return str(default) if default.is_file() else None


@functools.cache
def ptxas_version() -> str | None:
    path = ptxas_path()
    if path is None:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    return lines[-1].strip() if out.returncode == 0 and lines else None


def assemble(ptx: bytes, sass_arch: str) -> tuple[bytes | None, str]:
    """(cubin, log) from `ptxas -arch=sass_arch`; (None, why) when ptxas is missing or refuses the PTX."""
    path = ptxas_path()
    if path is None or ptxas_version() is None:
        return None, "no ptxas found"
    with tempfile.TemporaryDirectory(prefix="tl-ptxas-") as tmp:
        src, dst = Path(tmp) / "kernel.ptx", Path(tmp) / "kernel.cubin"
        src.write_bytes(ptx)
        try:
            proc = subprocess.run(
                [path, f"-arch={sass_arch}", "-O3", "--generate-line-info", str(src), "-o", str(dst)],
                capture_output=True,
                text=True,
                timeout=PTXAS_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"ptxas did not run: {exc}"
        if proc.returncode != 0 or not dst.is_file():
            return None, (proc.stderr or proc.stdout).strip()
        return dst.read_bytes(), proc.stderr.strip()
