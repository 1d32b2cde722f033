"""The derived backward in the worker (the code lens's ∇ line), through the functions the CLI uses:
`pipeline.backward.translate_backward` and `BackwardBuild.compile` as `tl build --backward` (no GPU
needed), `runner.backward_verify.verify_backward` as `tl run --backward` (dQ, dK, dV and the learnable
side tensors' gradients against autograd of the float32 reference, every element), and
`pipeline.backward_bench.backward_tflops` as `tl bench --backward`. Without a CUDA device the job ends
after the compile and says so, like the forward's verify.

A CUDA error during a GPU step poisons the context, so that reply is `fatal` and the server restarts the
worker (as in `gpu_steps`).
"""

from __future__ import annotations

from typing import Any

from server.worker import gpu_steps
from server.worker.jobs import Emit, _compile_note, _kernel_line, _reply, diagnostics_from_records
from server.worker.protocol import grad_label
from tl_language.diagnostics import make
from tl_language.source import split_lines


def run(req: dict[str, Any], emit: Emit) -> dict[str, Any]:
    """`verify-backward` or `benchmark-backward` for the request's text (checked already by `run_job`)."""
    text = req.get("text", "")
    try:
        from pipeline.backward import BackwardBuildError, translate_backward
        from runner.compile import CompileError
        from runner.toolchain import ToolchainError
    except ImportError as exc:
        return _reply("unavailable", f"unavailable: pipeline.backward ({exc})")
    emit("deriving the backward", 5)
    try:
        build = translate_backward(text)  # the editor's text, saved or not; arch and dtype as the CLI's
    except BackwardBuildError as exc:
        return _reply("failed", f"no backward: {_located(str(exc))}")
    device_arch = gpu_steps.device_arch()
    emit("compiling the backward with NVRTC", 15)
    try:
        compiled = build.compile(device_arch)
    except CompileError as err:
        tl_file = req.get("path") or "kernel.tl"
        diags = diagnostics_from_records(err.records, text, tl_file)
        return _reply("failed", f"the backward does not compile: {err.message}", diags)
    except ToolchainError as err:
        return _reply("unavailable", f"unavailable: {err}")
    result: dict[str, Any] = {
        "compiled": True,
        "compile_seconds": round(compiled.seconds, 2),
        "cached": compiled.cached,
        "device": None,
    }
    took = f"backward compiled in {compiled.seconds:.1f} s" + _compile_note(compiled)
    if device_arch is None:
        result["gpu"] = "no CUDA device"
        return _reply("ok", f"{took}; not verified: no CUDA device", result=result)
    return _verify_and_time(req, build, result, emit)


def _located(message: str) -> str:
    """BackwardBuildError names its source `<text>` for text; in the editor that is the document."""
    return "line " + message.removeprefix("<text>:") if message.startswith("<text>:") else message


def failures(checks: list[Any]) -> str:
    """The gradients outside their tolerance, each named: `dK rel-L2 4.2e-01 (max_abs 1.3e+00, 12
    non-finite)`."""
    bad = [c for c in checks if not c.ok]
    return "; ".join(
        f"{grad_label(c.name)} rel-L2 {c.rel_l2:.1e} (max_abs {c.max_abs:.1e}, {c.nonfinite} non-finite)"
        for c in bad
    )


def _verify_and_time(req: dict[str, Any], build: Any, result: dict[str, Any], emit: Emit) -> dict[str, Any]:
    where = _kernel_line(split_lines(req.get("text", "")))
    try:
        import torch

        from pipeline.backward_bench import backward_tflops
        from runner.backward_verify import verify_backward
        from runner.verify import Shape
    except ImportError as exc:
        return _reply("unavailable", f"unavailable: runner ({exc})", result=result)
    try:
        emit("loading the backward kernels", 40)
        loaded = build.load()
        b, h, sq, sk = gpu_steps.requested_shape(req)  # heads_kv = heads, as `tl bench --backward`
        shape = Shape(batch=b, heads=h, heads_kv=h, seqlen_q=sq, seqlen_k=sk)
        emit(f"verifying the gradients on {shape} against autograd of the float32 reference", 50)
        checked = verify_backward(loaded, shape)
        gpu = torch.cuda.get_device_name(loaded.device_id)
        result.update(
            device=gpu,
            verified=checked.passed,
            grads=[c.name for c in checked.checks],
            rel_l2=max(c.rel_l2 for c in checked.checks),
            shape=str(shape),
        )
        if not checked.passed:
            return failed_reply(req, gpu, str(shape), checked.checks, result, checked.line())
        if req.get("kind") == "benchmark-backward":
            emit("timing the backward beside SDPA flash and cuDNN", 70)
            record_rates(backward_tflops(loaded, b, h, sq, sk), result)
    except Exception as exc:
        return gpu_steps.gpu_fault(where, "the backward", exc, result)
    return verified_reply(result)


def failed_reply(
    req: dict[str, Any], gpu: str, shape: str, checks: list[Any], result: dict[str, Any], fallback: str
) -> dict[str, Any]:
    """A failed verification: the message names each gradient outside its tolerance (`fallback` when none
    is, e.g. a deterministic rerun that differed), and a TL503 on the Kernel line."""
    failed = failures(checks) or fallback
    where = _kernel_line(split_lines(req.get("text", "")))
    diag = make("TL503", where, f"backward verification failed on {gpu} ({shape}): {failed}")
    return _reply("failed", failed, [diag.to_json()], result)


def verified_reply(result: dict[str, Any]) -> dict[str, Any]:
    label = "/".join(grad_label(n) for n in result["grads"])
    tflops = result.get("tflops")
    msg = f"backward verified ({label} rel-L2 {result['rel_l2']:.1e})" + (
        f", {tflops:.0f} TFLOPS" if tflops else ""
    )
    return _reply("ok", msg, result=result)


def record_rates(rates: dict[str, float | None], result: dict[str, Any]) -> None:
    ours = rates.get("tl")
    if ours is None:
        result["bench_error"] = "not timed"
        return
    result["tflops"] = round(ours, 1)
    for name, key in gpu_steps.LENS_BASELINES.items():  # SDPA's backward here
        other = rates.get(name)
        if other:
            result[key] = round(ours / other, 3)
