"""A fake translate/compile/verify for tests of the server's job machinery (progress, cancellation,
timeouts, crashes), selected by the environment variable TL_WORKER_FAKE. Never active otherwise.

TL_WORKER_FAKE is a comma list:
  delay=S            work for S seconds, reporting progress every 50 ms (each report a step boundary, where
                     a cancelled job stops)
  compile=S          then a compile step of S seconds that a cancel does not interrupt (as an NVRTC call),
                     and for verify/benchmark a step boundary after it ("loading the kernel")
  deaf=S             a step of S seconds in one C call that keeps the GIL, so the worker cannot even read
                     a cancel meanwhile (a worker that does not answer it)
  crash              the worker exits with os._exit(86) mid-job
  crash-once=PATH    crash unless PATH exists (and create it): the restarted worker then succeeds
  segfault           the worker dereferences NULL (SIGSEGV)
  hang               sleep forever (the server's timeout must fire)
  nvrtc-error=L:MSG  answer an NVRTC log `FILE.tl(L): error: MSG`, parsed by the real log parser
  rel-l2=X,tflops=Y  a verification result with these numbers, labelled as coming from a fake device
  bwd-rel-l2=X       a backward job's verification (dQ, dK, dV; worst rel-L2 X) on a fake device
  bwd-tflops=Y       ... and, for benchmark-backward, its timing
  bwd-fail=NAME      the backward's gradient NAME (dk, dslopes, ...) fails verification
A backward job without bwd-rel-l2 or bwd-fail answers as the real one does without a CUDA device.
Every result carries "worker": {"pid", "jobs"}, the process and how many jobs it has run, so a test can
tell a warm worker from a fresh one, and "randomisation_off": whether the process runs without
address-space randomisation (its headers then serve later workers, runner.pch_heap).
"""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from runner.pch_heap import randomization_off
from server.worker.control import Emit
from server.worker.protocol import BACKWARD_KINDS, GPU_KINDS

ENV = "TL_WORKER_FAKE"

_jobs_run = 0  # in this process


def parse(spec: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        key, _, value = part.partition("=")
        out[key.strip()] = value.strip()
    return out


def run(spec: str, req: dict[str, Any], emit: Emit) -> dict[str, Any]:
    global _jobs_run
    _jobs_run += 1
    opts = parse(spec)
    if "deaf" in opts:
        emit("fake deaf step", 5)
        # ctypes.PyDLL calls keep the GIL: the stdin thread cannot run until this returns.
        ctypes.PyDLL(None).usleep(ctypes.c_uint(int(float(opts["deaf"]) * 1e6)))
    delay = float(opts.get("delay", "0") or 0)
    steps = max(1, int(delay / 0.05))
    for i in range(steps):
        if delay:
            emit(f"fake compile {i + 1}/{steps}", int(100 * (i + 1) / steps))
            time.sleep(delay / steps)
        if i == steps // 2:
            _faults(opts)
    compile_s = float(opts.get("compile", "0") or 0)
    if compile_s:
        emit("compiling with NVRTC (fake)", 15)
        time.sleep(compile_s)  # one call, as NVRTC's: a cancel waits for it
    if "nvrtc-error" in opts:
        from server.worker.jobs import diagnostics_from_log

        line, _, message = opts["nvrtc-error"].partition(":")
        tl_file = req.get("path") or "kernel.tl"
        log = f"{tl_file}({int(line)}): error: {message or 'fake error'}\n"
        diags = diagnostics_from_log(log, req.get("text", ""), tl_file)
        return {"status": "failed", "message": "NVRTC failed (fake)", "diagnostics": diags, "result": None}
    result: dict[str, Any] = {
        "compiled": True,
        "compile_seconds": delay + compile_s,
        "device": None,
        "worker": {"pid": os.getpid(), "jobs": _jobs_run},
        "randomisation_off": randomization_off(),
    }
    if compile_s and req.get("kind") in GPU_KINDS:
        emit("loading the kernel (fake)", 40)
    if req.get("kind") in BACKWARD_KINDS:
        return _backward(opts, req, result)
    if "rel-l2" in opts and req.get("kind") in ("verify", "benchmark"):
        result.update({"device": "fake device", "verified": True, "rel_l2": float(opts["rel-l2"])})
        if "tflops" in opts:
            result["tflops"] = float(opts["tflops"])
    return {"status": "ok", "message": "fake job done", "diagnostics": [], "result": result}


def _backward(opts: dict[str, str], req: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """The replies `backward_steps` builds, from made-up checks (so the lens text is the real path's)."""
    from server.worker import backward_steps
    from server.worker.jobs import _reply

    if "bwd-rel-l2" not in opts and "bwd-fail" not in opts:
        result["gpu"] = "no CUDA device"
        return _reply("ok", "fake backward compiled; not verified: no CUDA device", result=result)
    rel = float(opts.get("bwd-rel-l2") or 3.1e-3)
    bad = opts.get("bwd-fail")
    names = ["dq", "dk", "dv"] + ([bad] if bad and bad not in ("dq", "dk", "dv") else [])
    checks = [
        SimpleNamespace(name=n, ok=n != bad, rel_l2=0.42 if n == bad else rel, max_abs=0.0, nonfinite=0)
        for n in names
    ]
    result.update(
        device="fake device",
        verified=bad is None,
        grads=names,
        rel_l2=max(c.rel_l2 for c in checks),
        shape="fake shape",
    )
    if bad:
        return backward_steps.failed_reply(req, "fake device", "fake shape", checks, result, "fake failure")
    if req.get("kind") == "benchmark-backward" and "bwd-tflops" in opts:
        backward_steps.record_rates({"tl": float(opts["bwd-tflops"])}, result)
    return backward_steps.verified_reply(result)


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
