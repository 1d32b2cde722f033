"""The TL language server: one pygls `LanguageServer` subclass holding the open documents, the settings and
the worker; every LSP feature lives in its own module under `server/features/` and registers itself here."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from server import convert
from server.documents import Doc, Documents
from server.settings import Settings
from server.worker.manager import WorkerManager

log = logging.getLogger(__name__)

VERSION = "0.1.0"


class TLProtocol(LanguageServerProtocol):
    """Pins UTF-16 positions (the core counts columns in UTF-16) and keeps `initializationOptions`."""

    initialization_options: Any = None

    @lsp_method(lsp.INITIALIZE)
    def lsp_initialize(self, params: lsp.InitializeParams):  # type: ignore[no-untyped-def]
        general = params.capabilities.general
        if general is not None and general.position_encodings:
            general.position_encodings = [lsp.PositionEncodingKind.Utf16]
        self.initialization_options = params.initialization_options
        return (yield from super().lsp_initialize(params))


class TLServer(LanguageServer):
    def __init__(self) -> None:
        # Full sync: a 500-line file is ~20 KB, and whole-text changes let an out-of-order version be
        # dropped instead of corrupting the text.
        super().__init__(
            name="tl-language-server",
            version=VERSION,
            text_document_sync_kind=lsp.TextDocumentSyncKind.Full,
            protocol_cls=TLProtocol,
        )
        self.docs = Documents()
        self.settings = Settings()
        self.worker = WorkerManager()
        self.pending: dict[str, asyncio.Task[None]] = {}  # uri → debounced analysis
        self.jobs: dict[tuple[str, str], asyncio.Task[Any]] = {}  # (uri, job family) → running job
        self._progress_ids = 0

    # ---- helpers shared by the features ----

    def doc(self, uri: str) -> Doc | None:
        return self.docs.get(uri)

    def analysis_of(self, uri: str):  # type: ignore[no-untyped-def]
        doc = self.docs.get(uri)
        return None if doc is None else doc.analysis(self.settings.target)

    def publish(self, doc: Doc) -> None:
        """Checker diagnostics of the document's current version, plus the worker's if for this version."""
        analysis = doc.analysis(self.settings.target)
        items = [convert.diagnostic(d) for d in analysis.diagnostics]
        for job in (doc.job, doc.backward_job):
            if job is not None and job.version == doc.version:
                items += job.items
        self.text_document_publish_diagnostics(
            lsp.PublishDiagnosticsParams(uri=doc.uri, diagnostics=items, version=doc.version)
        )

    def next_token(self, kind: str) -> str:
        self._progress_ids += 1
        return f"tl/{kind}/{self._progress_ids}"

    def client_supports(self, *path: str) -> bool:
        """Walk the client's capabilities, e.g. ("window", "work_done_progress")."""
        node: Any = self.client_capabilities
        for name in path:
            node = getattr(node, name, None)
            if node is None:
                return False
        return bool(node)

    def notify_user(self, message: str, kind: lsp.MessageType = lsp.MessageType.Info) -> None:
        log.info("%s", message)
        self.window_show_message(lsp.ShowMessageParams(type=kind, message=message))

    def refresh_code_lens(self) -> None:
        if self.client_supports("workspace", "code_lens", "refresh_support"):
            self.workspace_code_lens_refresh(None)


def create_server() -> TLServer:
    from server import features

    server = TLServer()
    features.register_all(server)
    return server
