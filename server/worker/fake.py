"""A fake translate/compile/verify for tests of the server's job machinery (progress, cancellation,
timeouts, crashes), selected by the environment variable TL_WORKER_FAKE. Never active otherwise.

TL_WORKER_FAKE is a comma list:
  delay=S            work for S seconds, reporting progress every 50 ms
  crash              the worker exits with os._exit(86) mid-job
  crash-once=PATH    crash unless PATH exists (and create it): the restarted worker then succeeds
  segfault           the worker dereferences NULL (SIGSEGV)
  hang               sleep forever (the server's timeout must fire)
  nvrtc-error=L:MSG  answer an NVRTC log `FILE.tl(L): error: MSG`, parsed by the real log parser
  rel-l2=X,tflops=Y  a verification result with these numbers, labelled as coming from a fake device
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENV = "TL_WORKER_FAKE"


def parse(spec: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        key, _, value = part.partition("=")
        out[key.strip()] = value.strip()
    return out


def run(spec: str, req: dict[str, Any], emit: Callable[[str, int | None], None]) -> dict[str, Any]:
    opts = parse(spec)
    delay = float(opts.get("delay", "0") or 0)
    steps = max(1, int(delay / 0.05))
    for i in range(steps):
        if delay:
            emit(f"fake compile {i + 1}/{steps}", int(100 * (i + 1) / steps))
            time.sleep(delay / steps)
        if i == steps // 2:
            _faults(opts)
    if "nvrtc-error" in opts:
        from server.worker.jobs import diagnostics_from_log

        line, _, message = opts["nvrtc-error"].partition(":")
        tl_file = req.get("path") or "kernel.tl"
        log = f"{tl_file}({int(line)}): error: {message or 'fake error'}\n"
        diags = diagnostics_from_log(log, req.get("text", ""), tl_file)
        return {"status": "failed", "message": "NVRTC failed (fake)", "diagnostics": diags, "result": None}
    result: dict[str, Any] = {"compiled": True, "compile_seconds": delay, "device": None}
    if "rel-l2" in opts and req.get("kind") in ("verify", "benchmark"):
        result.update({"device": "fake device", "verified": True, "rel_l2": float(opts["rel-l2"])})
        if "tflops" in opts:
            result["tflops"] = float(opts["tflops"])
    return {"status": "ok", "message": "fake job done", "diagnostics": [], "result": result}


def _faults(opts: dict[str, str]) -> None:
    if "crash" in opts:
        os._exit(86)
    if "crash-once" in opts:
        marker = Path(opts["crash-once"])
        if not marker.exists():
            marker.write_text("crashed once\n")
            os._exit(86)
    if "segfault" in opts:
        ctypes.string_at(0)
    if "hang" in opts:
        while True:
            time.sleep(3600)
