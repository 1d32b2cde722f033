"""Disassembly of compiled kernels: `cuobjdump --dump-sass` from the CUDA toolkit or the pip wheels.

The toolkit's `cuobjdump` needs `nvdisasm` beside it or on PATH; the wheels `nvidia-cuda-cuobjdump` and
`nvidia-cuda-nvdisasm` (the `sass` extra) put both in `site-packages/nvidia/cu13/bin`, so the SASS of a
kernel compiled through NVRTC can be read on a machine without a GPU or a toolkit.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path


class SassError(RuntimeError):
    pass


def _wheel_bins() -> list[Path]:
    return [Path(p) / "nvidia" / cu / "bin" for p in sys.path if p for cu in ("cu13", "cu12")]


def find_tool(name: str) -> Path | None:
    """`name` (cuobjdump, nvdisasm) on PATH, in /usr/local/cuda/bin or in the NVIDIA wheels."""
    found = shutil.which(name)
    if found:
        return Path(found)
    for d in (Path("/usr/local/cuda/bin"), *_wheel_bins()):
        if (d / name).is_file():
            return d / name
    return None


def disassemble(cubin: bytes, *, resource_usage: bool = False) -> str:
    """The SASS of `cubin` (`--dump-resource-usage` instead with `resource_usage`). Raises SassError when
    the tools are missing or fail."""
    tool, disasm = find_tool("cuobjdump"), find_tool("nvdisasm")
    if tool is None or disasm is None:
        raise SassError(
            "cuobjdump and nvdisasm not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)"
        )
    env = {**os.environ, "PATH": f"{disasm.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        flag = "--dump-resource-usage" if resource_usage else "--dump-sass"
        try:
            out = subprocess.run(
                [str(tool), flag, str(path)], capture_output=True, text=True, timeout=120, env=env
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SassError(f"{tool.name}: {exc}") from exc
    if out.returncode != 0:
        raise SassError(f"{tool.name} {flag}: {out.stderr.strip()[:500]}")
    return out.stdout


_PREDICATE = r"@!?U?P\w+\s+"  # `@P0 `, `@!UPT `: a guard before the instruction's name
_OPCODE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:" + _PREDICATE + r")?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)")


def opcodes(sass: str) -> list[str]:
    """The instructions in program order, with their modifiers (`MUFU.EX2`, `WARPGROUP.DEPBAR.LE`)."""
    return _OPCODE.findall(sass)


def count(sass: str, names: tuple[str, ...]) -> dict[str, int]:
    """How many instructions of each base name (`HGMMA`, `UTMALDG`, …) the SASS holds."""
    bases = Counter(op.split(".", 1)[0] for op in opcodes(sass))
    return {n: bases.get(n, 0) for n in names}


def base_opcode(instruction: str) -> str:
    """The name of one instruction as a disassembler or ncu's source page writes it, without its guard or
    modifiers: `@!P0 MUFU.EX2 R1, R2` → `MUFU`."""
    return re.sub("^" + _PREDICATE, "", instruction.strip()).split()[0].split(".", 1)[0]
