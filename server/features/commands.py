"""workspace/executeCommand: the commands behind the code actions, code lenses and the extension's
palette. Each takes the document URI as its first argument (a string, or {"uri": ...})."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp

from server import sketch
from server.app import TLServer  # at run time: pygls reads the command handlers' type hints
from server.documents import Doc
from server.features.formatting import format_edits
from server.jobs import start_job, uri_path
from server.safe import safe

log = logging.getLogger(__name__)

COMMANDS = (
    "tl.generateCuda",
    "tl.verify",
    "tl.benchmark",
    "tl.compile",
    "tl.verifyBackward",
    "tl.benchmarkBackward",
    "tl.format",
    "tl.completeSketch",
    "tl.restartWorker",
    "tl.workerInfo",
)

# The commands that run a worker job, and the job's kind.
JOB_COMMANDS = {
    "tl.verify": "verify",
    "tl.benchmark": "benchmark",
    "tl.compile": "compile",
    "tl.verifyBackward": "verify-backward",
    "tl.benchmarkBackward": "benchmark-backward",
}


def _uri(args: tuple[Any, ...]) -> str | None:
    if not args:
        return None
    first = args[0]
    if isinstance(first, dict):
        first = first.get("uri") or (first.get("textDocument") or {}).get("uri")
    return first if isinstance(first, str) else None


def _doc(ls: TLServer, args: tuple[Any, ...]) -> Doc | None:
    uri = _uri(args)
    if uri is None:
        ls.notify_user("TL: this command needs a .tl document URI", lsp.MessageType.Error)
        return None
    doc = ls.docs.get(uri)
    if doc is None:  # not open in the editor: read it from disk
        path = uri_path(uri)
        try:
            text = Path(path).read_text() if path else None
        except OSError:
            text = None
        if text is None:
            ls.notify_user(f"TL: cannot read {uri}", lsp.MessageType.Error)
            return None
        doc = Doc(uri, text, 0)
    return doc


async def generate_cuda(ls: TLServer, doc: Doc) -> dict[str, Any]:
    """Translate like `tl build` and write FILE.cu + FILE.launch.json beside FILE.tl; a FILE.cu edited by
    hand since it was generated is only overwritten if the user says so (pipeline.build's protection)."""
    path = uri_path(doc.uri)
    if path is None:
        ls.notify_user("TL: Generate CUDA needs a file on disk (file:// URI)", lsp.MessageType.Error)
        return {"status": "failed", "message": "not a file URI"}
    try:
        from pipeline.build import BuildError, edited_by_hand, translate_text, write_outputs
    except ImportError as exc:
        ls.notify_user(f"TL: Generate CUDA unavailable: pipeline.build ({exc})", lsp.MessageType.Warning)
        return {"status": "unavailable", "message": f"unavailable: pipeline.build ({exc})"}
    try:
        translated = await asyncio.to_thread(translate_text, doc.text, Path(path))
    except BuildError as err:
        detail = "; ".join(f"line {d.range.start.line + 1}: {d.message}" for d in err.diagnostics[:3])
        ls.notify_user(
            f"TL: Generate CUDA: {err.message}" + (f" ({detail})" if detail else ""), lsp.MessageType.Error
        )
        return {"status": "failed", "message": err.message}
    force = False
    if edited_by_hand(translated.cu_path) and translated.cu_path.read_text() != translated.source:
        target = await _ask_overwrite(ls, translated.cu_path)
        if target is None:
            return {"status": "cancelled", "message": f"kept the edited {translated.cu_path.name}"}
        force = target == translated.cu_path
        translated.cu_path = target
    try:
        await asyncio.to_thread(write_outputs, translated, force=force)
    except (BuildError, OSError) as err:
        ls.notify_user(f"TL: Generate CUDA: {err}", lsp.MessageType.Error)
        return {"status": "failed", "message": str(err)}
    cu_uri = translated.cu_path.resolve().as_uri()
    if ls.client_supports("window", "show_document", "support"):
        await ls.window_show_document_async(lsp.ShowDocumentParams(uri=cu_uri, take_focus=True))
    return {"status": "ok", "uri": cu_uri}


async def _ask_overwrite(ls: TLServer, cu: Path) -> Path | None:
    """Overwrite, write FILE.generated.cu instead, or cancel; a client that cannot ask gets the second."""
    alt = cu.with_name(cu.stem + ".generated.cu")
    choices = ["Overwrite", f"Write {alt.name}", "Cancel"]
    if not ls.client_supports("window", "show_message"):
        log.info("client cannot ask; writing %s instead of overwriting the edited %s", alt, cu)
        return alt
    answer = await ls.window_show_message_request_async(
        lsp.ShowMessageRequestParams(
            type=lsp.MessageType.Warning,
            message=f"{cu.name} was edited by hand since TL generated it. Overwrite it?",
            actions=[lsp.MessageActionItem(title=c) for c in choices],
        )
    )
    title = answer.title if answer is not None else "Cancel"
    return cu if title == "Overwrite" else alt if title == choices[1] else None


async def run_kind(ls: TLServer, doc: Doc, kind: str) -> dict[str, Any]:
    if ls.docs.get(doc.uri) is None:
        ls.docs.open(doc.uri, doc.text, doc.version)  # results need a home for the code lens
        doc = ls.docs.get(doc.uri)  # type: ignore[assignment]
    outcome = await start_job(ls, doc, kind)  # type: ignore[arg-type]
    return {
        "status": outcome.status,
        "message": outcome.message,
        "result": outcome.result,
        "diagnostics": len(outcome.diagnostics),
    }


def register(server: TLServer) -> None:
    @server.command("tl.generateCuda")
    @safe("tl.generateCuda")
    async def cmd_generate(ls: TLServer, *args: Any) -> dict[str, Any] | None:
        doc = _doc(ls, args)
        return None if doc is None else await generate_cuda(ls, doc)

    for name, kind in JOB_COMMANDS.items():

        def make(command: str, k: str):  # type: ignore[no-untyped-def]
            @safe(command)
            async def cmd(ls: TLServer, *args: Any) -> dict[str, Any] | None:
                doc = _doc(ls, args)
                return None if doc is None else await run_kind(ls, doc, k)

            return cmd

        server.command(name)(make(name, kind))

    @server.command("tl.format")
    @safe("tl.format")
    async def cmd_format(ls: TLServer, *args: Any) -> dict[str, Any] | None:
        doc = _doc(ls, args)
        if doc is None:
            return None
        edits = format_edits(ls, doc)
        if edits is None:
            return {"status": "unavailable"}
        if edits:
            await ls.workspace_apply_edit_async(
                lsp.ApplyWorkspaceEditParams(
                    edit=lsp.WorkspaceEdit(changes={doc.uri: edits}), label="Format TL"
                )
            )
        return {"status": "ok", "edits": len(edits)}

    @server.command(sketch.COMMAND)
    @safe(sketch.COMMAND)
    async def cmd_complete_sketch(ls: TLServer, *args: Any) -> dict[str, Any] | None:
        """Stage 2 on the open document (the completion item's command; the code action carries the edit)."""
        doc = _doc(ls, args)
        if doc is None:
            return None
        edits = sketch.completion_edits(doc.analysis(ls.settings.target), ls.settings.target)
        if not edits:
            ls.notify_user("TL: nothing to complete (not a sketch of the attention forward)")
            return {"status": "unchanged"}
        await ls.workspace_apply_edit_async(
            lsp.ApplyWorkspaceEditParams(
                edit=lsp.WorkspaceEdit(changes={doc.uri: edits}), label="Complete sketch"
            )
        )
        return {"status": "ok", "edits": len(edits)}

    @server.command("tl.restartWorker")
    @safe("tl.restartWorker")
    async def cmd_restart(ls: TLServer, *args: Any) -> dict[str, Any]:
        for task in list(ls.jobs.values()):
            task.cancel()
        await ls.worker.restart()
        return {"status": "ok", "pid": ls.worker.pid}

    @server.command("tl.workerInfo")
    def cmd_info(ls: TLServer, *args: Any) -> dict[str, Any]:
        return {
            "pid": ls.worker.pid,
            "restarts": ls.worker.restarts,
            "started": ls.worker.started,
            "busy": ls.worker.busy,
        }
