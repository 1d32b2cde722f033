"""Diagnostics: analyse on open and save at once; on change after a short per-document debounce, and
publish only if the analysed version is still the latest (jedi-language-server's pattern). On save,
start the worker job chosen by `tl.onSave`."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from server.jobs import cancel_jobs, start_job
from server.safe import safe

if TYPE_CHECKING:
    from server.app import TLServer

log = logging.getLogger(__name__)


def schedule(ls: TLServer, uri: str, version: int) -> None:
    pending = ls.pending.pop(uri, None)
    if pending is not None and not pending.done():
        pending.cancel()
    ls.pending[uri] = asyncio.ensure_future(_debounced(ls, uri, version))


async def _debounced(ls: TLServer, uri: str, version: int) -> None:
    try:
        await asyncio.sleep(ls.settings.debounce_ms / 1000)
    except asyncio.CancelledError:
        return
    doc = ls.docs.get(uri)
    if doc is None or doc.version != version:
        return  # a newer change is pending or the document closed: this result would be stale
    try:
        ls.publish(doc)
    except Exception:
        log.exception("feature diagnostics failed for %s", uri)


def register(server: TLServer) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    @safe("didOpen")
    def did_open(ls: TLServer, params: lsp.DidOpenTextDocumentParams) -> None:
        td = params.text_document
        ls.publish(ls.docs.open(td.uri, td.text, td.version))

    @server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    @safe("didChange")
    def did_change(ls: TLServer, params: lsp.DidChangeTextDocumentParams) -> None:
        td = params.text_document
        doc = ls.docs.change(td.uri, td.version, list(params.content_changes))
        if doc is not None:
            schedule(ls, doc.uri, doc.version)

    @server.feature(lsp.TEXT_DOCUMENT_DID_SAVE, lsp.SaveOptions(include_text=True))
    @safe("didSave")
    def did_save(ls: TLServer, params: lsp.DidSaveTextDocumentParams) -> None:
        doc = ls.docs.get(params.text_document.uri)
        if doc is None:
            return
        if params.text is not None and params.text != doc.text:
            doc.text = params.text  # the saved text is the truth even if a change was lost
        pending = ls.pending.pop(doc.uri, None)
        if pending is not None:
            pending.cancel()
        ls.publish(doc)
        if ls.settings.on_save != "off":
            start_job(ls, doc, ls.settings.on_save)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    @safe("didClose")
    def did_close(ls: TLServer, params: lsp.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        ls.docs.close(uri)
        pending = ls.pending.pop(uri, None)
        if pending is not None and not pending.done():
            pending.cancel()
        cancel_jobs(ls, uri)
        ls.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=uri, diagnostics=[]))
