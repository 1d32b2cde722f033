"""Code lens over the Kernel (or Target) header: the last verification / benchmark result, or why there is
none, plus one-click Verify, Benchmark and Generate CUDA; then the same for the derived backward (its
last result, or Verify backward, and Benchmark backward). A result the document was edited since is
marked stale."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lsprotocol import types as lsp

from server import convert
from server.safe import safe
from server.worker.protocol import BACKWARD_KINDS, GPU_KINDS, grad_label
from tl_language import syntax as ast

if TYPE_CHECKING:
    from server.app import TLServer


BACKWARD_MARK = "∇"  # the derived backward's lenses and results


def _num(x: Any, fmt: str) -> str:
    return format(x, fmt) if isinstance(x, int | float) else "?"


def result_text(result: dict[str, Any] | None) -> str:
    """`✓ rel-L2 2.1e-3 · 583 TFLOPS · 0.97× cuDNN · 1.7× FA2 · NVRTC 8.7 s (H200)`, a failure, or "not
    verified yet"; a backward job's result reads the same behind `∇`, naming the gradients it checked
    (`∇ ✓ dQ/dK/dV rel-L2 3.1e-03 · 212 TFLOPS (H200)`)."""
    if not result:
        return "not verified yet"
    text = _outcome_text(result)
    return f"{BACKWARD_MARK} {text}" if result.get("kind") in BACKWARD_KINDS else text


def _outcome_text(result: dict[str, Any]) -> str:
    status = result.get("status")
    device = result.get("device")
    where = f" ({device})" if device else ""
    if status == "ok":
        if result.get("verified"):
            grads = result.get("grads")
            checked = "/".join(grad_label(str(g)) for g in grads) + " " if isinstance(grads, list) else ""
            parts = [f"✓ {checked}rel-L2 {_num(result.get('rel_l2'), '.1e')}"]
            if isinstance(result.get("tflops"), int | float):
                parts.append(f"{result['tflops']:.0f} TFLOPS")
            for key, label in (("vs_cudnn", "cuDNN"), ("vs_fa2", "FA2")):
                if isinstance(result.get(key), int | float):
                    parts.append(f"{result[key]:.2g}× {label}")
            secs = result.get("compile_seconds")
            if isinstance(secs, int | float):  # the save's wait, beside what it bought (issue 21)
                parts.append(f"NVRTC {secs:.1f} s")
            return " · ".join(parts) + where
        if result.get("compiled"):
            secs = result.get("compile_seconds")
            took = f" in {secs:.1f} s" if isinstance(secs, int | float) else ""
            gpu = result.get("gpu")
            return f"✓ compiles (NVRTC{took}) · not verified: {gpu}" if gpu else f"✓ compiles (NVRTC{took})"
        return f"✓ {result.get('message', 'ok')}"
    if status == "failed":
        if result.get("verified") is False or (result.get("kind") in GPU_KINDS and result.get("compiled")):
            return f"✗ verification failed: {result.get('message', '')}{where}"
        return f"✗ {result.get('message', 'failed')}"
    if status == "cancelled":
        return f"{result.get('kind', 'job')} cancelled"
    if status == "unavailable":
        return f"⚠ {result.get('message', 'unavailable')}"
    return f"✗ {result.get('kind', 'job')} {status}: {result.get('message', '')}"


def lens_title(result: dict[str, Any] | None, version: int) -> str:
    """`result_text`, marked when the document has been edited since the job read it."""
    text = result_text(result)
    ran_on = result.get("version") if result else None
    return f"{text} · stale (edited since)" if isinstance(ran_on, int) and ran_on != version else text


def lenses(ls: TLServer, uri: str) -> list[lsp.CodeLens]:
    doc = ls.docs.get(uri)
    if doc is None:
        return []
    header = None
    for stmt in doc.analysis(ls.settings.target).document.statements:
        if isinstance(stmt, ast.KernelStmt | ast.TargetStmt):
            header = stmt.range
            break
    rng = (
        convert.range_(header)
        if header is not None
        else lsp.Range(start=lsp.Position(line=0, character=0), end=lsp.Position(line=0, character=0))
    )
    backward = (
        lens_title(doc.backward_result, doc.version)
        if doc.backward_result
        else f"{BACKWARD_MARK} Verify backward"
    )
    rows = [
        (lens_title(doc.result, doc.version), "tl.verify"),
        ("Benchmark", "tl.benchmark"),
        ("Generate CUDA", "tl.generateCuda"),
        (backward, "tl.verifyBackward"),
        (f"{BACKWARD_MARK} Benchmark backward", "tl.benchmarkBackward"),
    ]
    return [
        lsp.CodeLens(range=rng, command=lsp.Command(title=title, command=command, arguments=[uri]))
        for title, command in rows
    ]


def register(server: TLServer) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_CODE_LENS, lsp.CodeLensOptions(resolve_provider=False))
    @safe("codeLens", empty=list)
    def code_lens(ls: TLServer, params: lsp.CodeLensParams) -> list[lsp.CodeLens]:
        return lenses(ls, params.text_document.uri)
