"""Jobs the worker runs: translate (check), NVRTC compile, and — when a CUDA device is present — verify
and benchmark; the derived backward's verify and benchmark (`server.worker.backward_steps`). Each step
imports its package lazily; a missing package answers "unavailable: <why>". Each `emit` starts a step and
is where a cancelled job stops (`server.worker.control`): a compile under way finishes first.

Runs only in the worker process (it may import cuda-python and torch).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from server.worker.control import Emit
from server.worker.protocol import BACKWARD_KINDS
from tl_language.diagnostics import Diagnostic, Severity, make
from tl_language.source import LineText, Position, Range, split_lines

log = logging.getLogger(__name__)

# Test hook: CUDA text appended to the generated source before NVRTC (`{tl}` becomes the TL path), so an
# end-to-end test can show a real NVRTC error travelling back to a TL line. Unset in normal use.
APPEND_ENV = "TL_WORKER_APPEND_CUDA"


def _reply(
    status: str,
    message: str,
    diagnostics: list[dict[str, Any]] | None = None,
    result: dict[str, Any] | None = None,
    fatal: bool = False,
) -> dict[str, Any]:
    return {
        "status": status,
        "message": message,
        "diagnostics": diagnostics or [],
        "result": result,
        "fatal": fatal,
    }


def run_job(req: dict[str, Any], emit: Emit) -> dict[str, Any]:
    from server.worker import fake

    kind = req.get("kind", "compile")
    text = req.get("text", "")
    from server.documents import analyze_with_target

    analysis = analyze_with_target(text, req.get("target") or "sm_80")
    if analysis.has_errors:
        n = sum(1 for d in analysis.diagnostics if d.severity == Severity.ERROR)
        return _reply("skipped", f"not run: the document has {n} error(s)")
    spec = req.get("fake") or os.environ.get(fake.ENV)
    if spec:
        return fake.run(spec, req, emit)
    if kind in BACKWARD_KINDS:
        from server.worker import backward_steps

        return backward_steps.run(req, emit)
    emit("translating", 5)
    translated = _translate(text, req.get("path"))
    if isinstance(translated, dict):
        return translated
    if kind == "check":
        return _reply("ok", "translates", result={"translated": True})
    device_arch = None
    if kind in ("verify", "benchmark"):
        from server.worker import gpu_steps

        device_arch = gpu_steps.device_arch()
    emit("compiling with NVRTC", 15)
    compiled = _compile(translated, text, device_arch)
    if isinstance(compiled, dict):
        return compiled
    result: dict[str, Any] = {
        "compiled": True,
        "compile_seconds": round(compiled.seconds, 2),
        "cached": compiled.cached,
        "pch": compiled.pch,
        "device": None,
    }
    took = f"compiled in {compiled.seconds:.1f} s" + _compile_note(compiled)
    if kind == "compile":
        return _reply("ok", took, result=result)
    if device_arch is None:
        result["gpu"] = "no CUDA device"
        return _reply("ok", f"{took}; not verified: no CUDA device", result=result)
    from server.worker import gpu_steps

    return gpu_steps.verify_and_benchmark(kind, translated, compiled, req, result, emit)


def _translate(text: str, path: str | None) -> Any:
    """pipeline.build's check + translate (the same as `tl build`), errors as diagnostics."""
    try:
        from pipeline.build import BuildError, translate_text
    except ImportError as exc:
        return _reply("unavailable", f"unavailable: pipeline.build ({exc})")
    try:
        return translate_text(text, Path(path or "kernel.tl"))
    except BuildError as err:
        diags = [d.to_json() for d in err.diagnostics]
        status = "unavailable" if "unavailable" in err.message else "failed"
        return _reply(status, err.message, diags)


def _compile_note(compiled: Any) -> str:
    if compiled.cached:
        return " (cached)"
    notes = {"used": " (precompiled headers)", "created": " (precompiled headers written)"}
    return notes.get(compiled.pch, "")


def _compile(translated: Any, text: str, device_arch: str | None) -> Any:
    try:
        from runner.compile import CompileError, compile_source, use_precompiled_headers
        from runner.toolchain import ToolchainError
    except ImportError as exc:
        return _reply("unavailable", f"unavailable: runner.compile ({exc})")
    # This process outlives the job: the first compile of a kernel's skeleton writes a precompiled header
    # with its CuTe instantiations (`runner.compile_prelude`), so a later save that edits the kernel's
    # body (a score, a mask) skips parsing CuTe and most of the instantiation.
    use_precompiled_headers(True, prelude=True)
    tl_file = str(translated.path)
    source = translated.source
    if os.environ.get(APPEND_ENV):  # tests: a real NVRTC error at a real TL line (see APPEND_ENV)
        source += "\n" + os.environ[APPEND_ENV].replace("{tl}", tl_file) + "\n"
    try:
        return compile_source(
            source,
            arch=translated.spec.arch,
            device_arch=device_arch,
            name=translated.cu_path.name,
            source_map=translated.source_map or None,
            tl_file=tl_file,
        )
    except CompileError as err:
        return _reply("failed", err.message, diagnostics_from_records(err.records, text, tl_file))
    except ToolchainError as err:
        return _reply("unavailable", f"unavailable: {err}")


# ---- NVRTC records → TL diagnostics ----------------------------------------------------------------------


def diagnostics_from_log(log_text: str, text: str, tl_file: str) -> list[dict[str, Any]]:
    from runner.nvrtc_log import parse_log

    return diagnostics_from_records(parse_log(log_text), text, tl_file)


def diagnostics_from_records(records: list[Any], text: str, tl_file: str) -> list[dict[str, Any]]:
    """Errors on TL lines become TL502 on that line; errors NVRTC placed in the generated source (no `#line`
    for them) land on the Kernel line with the CUDA location in the message, so none is lost."""
    lines = split_lines(text)
    out: list[Diagnostic] = []
    for r in records:
        if not r.is_error:
            continue
        if r.is_tl and 1 <= r.line <= len(lines):
            out.append(make("TL502", _line_range(lines, r.line - 1), f"CUDA compile error: {r.message}"))
        else:
            out.append(
                make("TL502", _kernel_line(lines), f"CUDA compile error at {r.file}:{r.line}: {r.message}")
            )
    if not out and records:
        out.append(make("TL502", _kernel_line(lines), "CUDA compile failed: " + str(records[0])))
    return [d.to_json() for d in out[:50]]


def _line_range(lines: list[str], n: int) -> Range:
    raw = lines[n]
    body = raw.split("#", 1)[0].rstrip()
    start = len(body) - len(body.lstrip())
    lt = LineText(n, raw)
    return Range(Position(n, lt.col(start)), Position(n, lt.col(max(len(body), start))))


def _kernel_line(lines: list[str]) -> Range:
    for i, raw in enumerate(lines):
        if raw.strip().lower().startswith("kernel"):
            return _line_range(lines, i)
    return Range(Position(0, 0), Position(0, 0))
