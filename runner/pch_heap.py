"""Precompiled headers that outlive their process: NVRTC's PCH heap at one address in every process.

NVRTC writes a precompiled header as an image of its PCH heap and can read it back only at the heap's
address (warning 20282 otherwise). Two conditions make that address the same in another process of the
same program, measured on the 2-core VM with NVRTC 13.5 (docs/performance.md, "Compile latency"):

- address-space randomisation off for the process (`personality(ADDR_NO_RANDOMIZE)`, what `setarch -R`
  does): `spawn_options` gives a child process that, through `preexec_fn`;
- the heap mapped before the process does anything else: `pin` sets its size and has NVRTC write a
  one-line header at once, so allocations that differ from run to run (another TL file translated
  first, another hash seed) all come after it. A second process with other work before its compile then
  read the first one's header of the Hopper include block (23.9 s of CPU instead of 34.5 s).

A process that meets both may keep its headers on disk for the next process (`keep_on_disk`); anything
else keeps them private to the process, as before. A header NVRTC cannot map is discarded and written
again, so a wrong guess costs one rewrite, never a wrong compile.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ADDR_NO_RANDOMIZE = 0x0040000  # linux/personality.h
ON_DISK_ENV = "TL_PCH_ON_DISK"  # "0": never share headers between processes (nor spawn without randomisation)
_QUERY = 0xFFFFFFFF  # personality(0xffffffff) returns the current persona without changing it
_pinned_bytes = 0


def _libc() -> Any:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def randomization_off() -> bool:
    """Whether this process runs without address-space randomisation (Linux only)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        persona = _libc().personality(ctypes.c_ulong(_QUERY))
    except (OSError, AttributeError):
        return False
    return persona != -1 and bool(persona & ADDR_NO_RANDOMIZE)


def _no_randomization() -> None:  # runs in the child between fork and exec
    libc = _libc()
    persona = libc.personality(ctypes.c_ulong(_QUERY))
    if persona != -1:
        libc.personality(ctypes.c_ulong(persona | ADDR_NO_RANDOMIZE))


def wanted(env: Mapping[str, str] | None = None) -> bool:
    """Unless `TL_PCH_ON_DISK` is "0" in `env` (default: this process's environment)."""
    value = (os.environ if env is None else env).get(ON_DISK_ENV, "")
    return value.strip().lower() not in ("0", "off", "false", "no")


def spawn_options(env: Mapping[str, str] | None = None) -> dict[str, Callable[[], None]]:
    """Keyword arguments for `subprocess.Popen` / `asyncio.create_subprocess_exec` that start the child
    without address-space randomisation (empty off Linux, or with `TL_PCH_ON_DISK=0` in `env`, the child's
    environment). The child alone: this process is unchanged."""
    return {"preexec_fn": _no_randomization} if sys.platform.startswith("linux") and wanted(env) else {}


def pin(heap_bytes: int) -> bool:
    """Map NVRTC's PCH heap now, `heap_bytes` large (call first thing in the process, before other
    work); True when it is mapped at that size. A later resize would move it: `pinned_bytes` tells the
    compile path not to."""
    global _pinned_bytes
    if _pinned_bytes >= heap_bytes:
        return True
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        return False
    (err,) = nvrtc.nvrtcSetPCHHeapSize(heap_bytes)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        return False
    with tempfile.TemporaryDirectory(prefix="tl-pch-pin-") as tmp:
        path = Path(tmp) / "pin.pch"
        # a header needs an include block: one in-memory header of one line
        pin_source = b'#include "tl_pch_pin.h"\n__global__ void tl_pch_pin() {}\n'
        pin_header = b"#pragma once\nstruct tl_pch_pin_t {};\n"
        err, prog = nvrtc.nvrtcCreateProgram(pin_source, b"pin.cu", 1, [pin_header], [b"tl_pch_pin.h"])
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return False
        try:
            (err,) = nvrtc.nvrtcCompileProgram(prog, 1, [f"--create-pch={path}".encode()])
            (status,) = nvrtc.nvrtcGetPCHCreateStatus(prog)
        finally:
            nvrtc.nvrtcDestroyProgram(prog)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS or status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        return False
    _pinned_bytes = heap_bytes
    return True


def pinned_bytes() -> int:
    """The size `pin` mapped the heap at (0: not pinned)."""
    return _pinned_bytes
