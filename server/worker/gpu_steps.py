"""Verification and benchmark on the GPU, in the worker, through runner/ and pipeline/ (the same code as
`tl run` and `tl bench`). A CUDA error during a GPU step poisons the context, so the reply is `fatal` and
the server restarts the worker."""

from __future__ import annotations

import logging
import traceback
from typing import Any

from tl_language.diagnostics import make

log = logging.getLogger(__name__)

# The baselines the code lens compares against: cuDNN and FlashAttention-2 (both through PyTorch SDPA).
LENS_BASELINES = {"sdpa-cudnn": "vs_cudnn", "sdpa-flash": "vs_fa2"}


def _driver_has_device() -> bool:
    """A cheap probe through the driver API (no torch import) before paying for torch."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return True  # cannot tell cheaply; let runner decide
    try:
        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return False
        err, count = driver.cuDeviceGetCount()
        return err == driver.CUresult.CUDA_SUCCESS and count > 0
    except Exception:
        log.exception("probing for a CUDA device failed")
        return False


def device_arch() -> str | None:
    """`sm_XY` of the CUDA device, or None without one."""
    if not _driver_has_device():
        return None
    try:
        from runner.launch import cuda_device_arch
    except ImportError:
        return None
    return cuda_device_arch()


def requested_shape(req: dict[str, Any]) -> tuple[int, int, int, int]:
    """(batch, heads, seqlen_q, seqlen_k) of the request's first benchmark shape (`tl.benchmarkShapes`)."""
    s = (req.get("shapes") or [{"batch": 4, "heads": 16, "seqlen_q": 4096, "seqlen_k": 4096}])[0]
    return int(s["batch"]), int(s["heads"]), int(s["seqlen_q"]), int(s["seqlen_k"])


def _shape(req: dict[str, Any], spec: Any) -> Any:
    from runner.verify import Shape

    batch, heads, seqlen_q, seqlen_k = requested_shape(req)
    heads_kv = max(1, heads // spec.group) if getattr(spec, "group", 0) else heads
    return Shape(batch=batch, heads=heads, heads_kv=heads_kv, seqlen_q=seqlen_q, seqlen_k=seqlen_k)


def verify_and_benchmark(
    kind: str, translated: Any, compiled: Any, req: dict[str, Any], result: dict[str, Any], emit: Any
) -> dict[str, Any]:
    from server.worker.jobs import _kernel_line, _reply
    from tl_language.source import split_lines

    text = req.get("text", "")
    where = _kernel_line(split_lines(text))
    try:
        from runner.launch import load
        from runner.verify import verify
    except ImportError as exc:
        return _reply("unavailable", f"unavailable: runner ({exc})", result=result)
    try:
        emit("loading the kernel", 40)
        loaded = load(compiled, translated.spec)
        shape = _shape(req, translated.spec)
        emit(f"verifying on {shape} against the float32 reference", 50)
        verified = verify(loaded, shape)
        result.update(
            device=verified.gpu,
            verified=verified.passed,
            rel_l2=max(c.rel_l2 for c in verified.cases),
            shape=str(shape),
        )
        if not verified.passed:
            failures = "; ".join(f for c in verified.cases for f in c.failures)[:400]
            diag = make("TL503", where, f"verification failed on {verified.gpu} ({shape}): {failures}")
            return _reply("failed", f"rel-L2 {result['rel_l2']:.1e}: {failures}", [diag.to_json()], result)
        emit("benchmarking against cuDNN and FlashAttention-2", 70)
        _benchmark(translated, loaded, verified, shape, result)
    except Exception as exc:
        return gpu_fault(where, "the kernel", exc, result)
    tflops = result.get("tflops")
    msg = f"verified (rel-L2 {result['rel_l2']:.1e})" + (f", {tflops:.0f} TFLOPS" if tflops else "")
    return _reply("ok", msg, result=result)


def gpu_fault(where: Any, what: str, exc: Exception, result: dict[str, Any]) -> dict[str, Any]:
    """The reply to an exception in a GPU step: TL503 on the Kernel line, `fatal` (the context may be
    gone)."""
    from server.worker.jobs import _reply

    log.exception("GPU step failed (%s)", what)
    diag = make("TL503", where, f"GPU fault while running {what}: {exc}")
    reply = _reply("failed", f"GPU fault: {exc}", [diag.to_json()], result, fatal=True)
    reply["traceback"] = traceback.format_exc(limit=6)
    return reply


def _benchmark(translated: Any, loaded: Any, verified: Any, shape: Any, result: dict[str, Any]) -> None:
    from pipeline.benchmark import KernelEntry, run_case
    from runner.baselines import BASELINES
    from runner.bench import BenchCase

    spec = translated.spec
    case = BenchCase.for_spec(spec, shape)
    baselines = [b for b in BASELINES if b.name in LENS_BASELINES]
    run_case(
        case, [KernelEntry(name=spec.kernel_name, loaded=loaded, verified=verified)], baselines=baselines
    )
    ours = case.results.get(spec.kernel_name)
    if ours is None or ours.tflops is None:
        result["bench_error"] = ours.error if ours is not None else "not timed"
        return
    result["tflops"] = round(ours.tflops, 1)
    for name, key in LENS_BASELINES.items():
        other = case.results.get(name)
        if other is not None and other.tflops:
            result[key] = round(ours.tflops / other.tflops, 3)
