"""Verification and benchmark on the GPU, in the worker. Looks up the runner's functions at run time and
answers "unavailable: <why>" when they are not there."""

from __future__ import annotations

import importlib
import logging
from typing import Any

log = logging.getLogger(__name__)


def device_name() -> str | None:
    """The first CUDA device's name, or None without a driver or a device (no torch needed)."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return None
    try:
        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return None
        err, count = driver.cuDeviceGetCount()
        if err != driver.CUresult.CUDA_SUCCESS or count < 1:
            return None
        err, dev = driver.cuDeviceGet(0)
        err, name = driver.cuDeviceGetName(64, dev)
        return (
            name.split(b"\0", 1)[0].decode(errors="replace") if err == driver.CUresult.CUDA_SUCCESS else "GPU"
        )
    except Exception:  # a broken driver install is "no device" for the editor
        log.exception("probing for a CUDA device failed")
        return None


def _find(candidates: list[tuple[str, str]]) -> tuple[Any, str]:
    errors = []
    for module, name in candidates:
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            errors.append(f"{module}: {exc}")
            continue
        fn = getattr(mod, name, None)
        if fn is not None:
            return fn, f"{module}.{name}"
        errors.append(f"{module} has no {name}")
    return None, "; ".join(errors)


def verify_and_benchmark(
    kind: str, translation: Any, compiled: Any, req: dict[str, Any], result: dict[str, Any], emit: Any
) -> dict[str, Any]:
    from server.worker.jobs import _reply

    verify, why = _find([("pipeline.verify", "verify_translation"), ("runner.verify", "verify_translation")])
    if verify is None:
        return _reply("unavailable", f"unavailable: verification ({why})", result=result)
    emit("verifying against the float32 reference", 60)
    return _reply("unavailable", "unavailable: verification API not wired yet", result=result)
