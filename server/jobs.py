"""Run a worker job for a document with `$/progress` (cancellable) and turn its outcome into diagnostics,
a code-lens result and, for failures of the worker itself, a message."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from lsprotocol import types as lsp

from server import convert
from server.documents import Doc, JobDiagnostics
from server.worker.manager import JobOutcome
from server.worker.protocol import BACKWARD_KINDS

if TYPE_CHECKING:
    from server.app import TLServer

log = logging.getLogger(__name__)

TITLES = {
    "check": "TL: translating",
    "compile": "TL: compiling (NVRTC)",
    "verify": "TL: verifying on the GPU",
    "benchmark": "TL: benchmarking",
    "verify-backward": "TL: verifying the backward on the GPU",
    "benchmark-backward": "TL: benchmarking the backward",
}


def family(kind: str) -> str:
    """The job's family, `backward` (the derived backward's jobs) or `forward`: each family keeps its own
    result and diagnostics, and a job supersedes only a running job of its own family."""
    return "backward" if kind in BACKWARD_KINDS else "forward"


def uri_path(uri: str) -> str | None:
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme == "file" else None


def start_job(ls: TLServer, doc: Doc, kind: str) -> asyncio.Task[JobOutcome]:
    """Start `kind` for `doc`, superseding (cancelling) a job of the same family still running for the
    same document; one of the other family waits for the worker instead (a save's compile is not killed
    by a click on the backward's lens). A superseded job's progress ends "cancelled" at once; the worker
    finishes the step under way (a compile, whose headers the new job then reads) and runs the new job
    next, in the same process (`WorkerManager.run`)."""
    key = (doc.uri, family(kind))
    previous = ls.jobs.get(key)
    if previous is not None and not previous.done():
        previous.cancel()
    task = asyncio.ensure_future(_run(ls, doc, kind))
    ls.jobs[key] = task
    return task


def cancel_jobs(ls: TLServer, uri: str) -> None:
    """Cancel the document's jobs of both families (it was closed)."""
    for fam in ("forward", "backward"):
        task = ls.jobs.pop((uri, fam), None)
        if task is not None and not task.done():
            task.cancel()


async def _begin_progress(ls: TLServer, kind: str, task: asyncio.Task[Any] | None) -> str | None:
    if not ls.client_supports("window", "work_done_progress"):
        return None
    token = ls.next_token(kind)
    try:
        await ls.work_done_progress.create_async(token)
    except Exception:
        log.warning("client refused progress token %s", token, exc_info=True)
        return None
    ls.work_done_progress.begin(
        token, lsp.WorkDoneProgressBegin(title=TITLES.get(kind, "TL"), cancellable=True, percentage=0)
    )
    cancel_future = ls.work_done_progress.tokens.get(token)
    if cancel_future is not None and task is not None:
        loop = asyncio.get_running_loop()

        def on_cancel(f: Any) -> None:
            if f.cancelled():
                loop.call_soon_threadsafe(task.cancel)

        cancel_future.add_done_callback(on_cancel)
    return token


def _end_progress(ls: TLServer, token: str | None, message: str) -> None:
    if token is None:
        return
    ls.work_done_progress.end(token, lsp.WorkDoneProgressEnd(message=message))
    fut = ls.work_done_progress.tokens.pop(token, None)
    if fut is not None and not fut.done():
        fut.set_result(None)


async def _run(ls: TLServer, doc: Doc, kind: str) -> JobOutcome:
    version, text = doc.version, doc.text
    token = await _begin_progress(ls, kind, asyncio.current_task())
    request = {
        "kind": kind,
        "uri": doc.uri,
        "path": uri_path(doc.uri),
        "text": text,
        "target": ls.settings.target,
        "shapes": [s.to_json() for s in ls.settings.benchmark_shapes],
    }

    def report(message: str, percentage: int | None) -> None:
        if token is not None:
            pct = int(percentage) if isinstance(percentage, int | float) else None
            ls.work_done_progress.report(token, lsp.WorkDoneProgressReport(message=message, percentage=pct))

    try:
        outcome = await ls.worker.run(
            request, report, ls.settings.worker_timeout, ls.settings.worker_cancel_grace
        )
    except asyncio.CancelledError:
        _end_progress(ls, token, "cancelled")
        log.info("%s of %s cancelled", kind, doc.uri)
        return JobOutcome("cancelled", f"{kind} cancelled")
    _end_progress(ls, token, outcome.message[:200])
    apply_outcome(ls, doc, kind, version, outcome)
    return outcome


def apply_outcome(ls: TLServer, doc: Doc, kind: str, version: int, outcome: JobOutcome) -> None:
    items = [d for d in map(_lsp_diag, outcome.diagnostics) if d is not None]
    if outcome.worker_failed:
        rng = _kernel_range(ls, doc)
        items.append(
            lsp.Diagnostic(
                range=rng,
                message=f"{kind} failed: {outcome.message}",
                severity=lsp.DiagnosticSeverity.Warning,
                source="tl worker",
            )
        )
        ls.notify_user(f"TL {kind} of {doc.uri.rsplit('/', 1)[-1]}: {outcome.message}", lsp.MessageType.Error)
    elif outcome.status == "unavailable":
        ls.notify_user(f"TL {kind}: {outcome.message}", lsp.MessageType.Warning)
    backward = family(kind) == "backward"
    job = JobDiagnostics(version, items)
    if backward:
        doc.backward_job = job
    else:
        doc.job = job
    if outcome.status not in ("skipped",):
        # `version`: the text the job ran on; the lens marks the result stale once the document moves on.
        result = {
            "kind": kind,
            "status": outcome.status,
            "message": outcome.message,
            **(outcome.result or {}),
            "version": version,
        }
        if backward:
            doc.backward_result = result
        else:
            doc.result = result
        ls.refresh_code_lens()
        # The extension's status bar shows the last result of any job, on-save ones included.
        from server.features.code_lens import result_text

        ls.protocol.notify(
            "tl/result",
            {
                "uri": doc.uri,
                "kind": kind,
                "ok": outcome.status == "ok",
                "summary": result_text(result),
            },
        )
    if ls.docs.get(doc.uri) is doc and doc.version == version:
        ls.publish(doc)


def _lsp_diag(d: dict[str, Any]) -> lsp.Diagnostic | None:
    try:
        r = d["range"]
        sev = {"error": 1, "warning": 2, "info": 3, "hint": 4}.get(str(d.get("severity")), 1)
        return lsp.Diagnostic(
            range=lsp.Range(
                start=lsp.Position(line=r["start"]["line"], character=r["start"]["character"]),
                end=lsp.Position(line=r["end"]["line"], character=r["end"]["character"]),
            ),
            message=str(d["message"]),
            severity=lsp.DiagnosticSeverity(sev),
            code=d.get("code"),
            source=convert.SOURCE,
            data={"fixes": d["fixes"]} if d.get("fixes") else None,
        )
    except (KeyError, TypeError, ValueError):
        log.warning("dropping malformed worker diagnostic %r", d)
        return None


def _kernel_range(ls: TLServer, doc: Doc) -> lsp.Range:
    from tl_language import syntax as ast

    for stmt in doc.analysis(ls.settings.target).document.statements:
        if isinstance(stmt, ast.KernelStmt):
            return convert.range_(stmt.range)
    return lsp.Range(start=lsp.Position(line=0, character=0), end=lsp.Position(line=0, character=0))
