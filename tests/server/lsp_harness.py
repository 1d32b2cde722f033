"""Helpers for the server's end-to-end tests: the server command, a recorder of every published
diagnostic, and small senders for document events. Waits on notifications, never sleeps."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def server_config(**env: str) -> ClientServerConfig:
    full = {k: v for k, v in os.environ.items() if k != "TL_WORKER_FAKE"}
    full.update({"PYTHONUNBUFFERED": "1", **env})
    return ClientServerConfig(server_command=[sys.executable, "-m", "server"], server_env=full)


class Recorder:
    """Every publishDiagnostics (not only the latest per URI), with a condition to wait on."""

    def __init__(self, client: LanguageClient) -> None:
        self.client = client
        self.published: list[lsp.PublishDiagnosticsParams] = []
        self.changed = asyncio.Condition()

        async def on_publish(params: lsp.PublishDiagnosticsParams) -> None:
            client.diagnostics[params.uri] = params.diagnostics
            self.published.append(params)
            async with self.changed:
                self.changed.notify_all()

        # pytest-lsp registers a handler that keeps only the latest list; replace it with the recorder.
        client.protocol.fm.features[lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = on_publish

    async def wait_for(
        self, uri: str, *, version: int | None = None, predicate: Any = None, timeout: float = 20.0
    ) -> lsp.PublishDiagnosticsParams:
        """The first publication for `uri` (of `version`, satisfying `predicate`) — past or future."""

        def find() -> lsp.PublishDiagnosticsParams | None:
            for p in reversed(self.published):
                if (
                    p.uri == uri
                    and (version is None or p.version == version)
                    and (predicate is None or predicate(p))
                ):
                    return p
            return None

        async def wait() -> lsp.PublishDiagnosticsParams:
            async with self.changed:
                while (got := find()) is None:
                    await self.changed.wait()
                return got

        return await asyncio.wait_for(wait(), timeout)


async def start(client: LanguageClient, tmp: Path, settings: dict[str, Any] | None = None) -> Recorder:
    rec = Recorder(client)
    refreshes: list[None] = []

    def on_refresh(params: None) -> None:  # VS Code re-asks for lenses; pytest-lsp has no default
        refreshes.append(params)

    client.protocol.fm.features.setdefault(lsp.WORKSPACE_CODE_LENS_REFRESH, on_refresh)
    client.set_configuration({"onSave": "off", **(settings or {})}, section="tl")
    await client.initialize_session(
        lsp.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            root_uri=tmp.as_uri(),
            workspace_folders=[lsp.WorkspaceFolder(uri=tmp.as_uri(), name="ws")],
        )
    )
    return rec


def open_doc(client: LanguageClient, path: Path, text: str | None = None, version: int = 1) -> str:
    uri = path.as_uri()
    client.text_document_did_open(
        lsp.DidOpenTextDocumentParams(
            text_document=lsp.TextDocumentItem(
                uri=uri,
                language_id="tl",
                version=version,
                text=text if text is not None else path.read_text(),
            )
        )
    )
    return uri


def change(client: LanguageClient, uri: str, version: int, text: str) -> None:
    client.text_document_did_change(
        lsp.DidChangeTextDocumentParams(
            text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )


def save(client: LanguageClient, uri: str, text: str | None = None) -> None:
    client.text_document_did_save(
        lsp.DidSaveTextDocumentParams(text_document=lsp.TextDocumentIdentifier(uri=uri), text=text)
    )


async def until(client: LanguageClient, method: str, predicate: Any, timeout: float = 20.0) -> None:
    """Wait for notifications of `method` until `predicate()` holds (checked before each wait)."""

    async def loop() -> None:
        while not predicate():
            await client.wait_for_notification(method)

    await asyncio.wait_for(loop(), timeout)


def progress_kinds(client: LanguageClient) -> dict[Any, list[str]]:
    return {tok: [type(v).__name__ for v in values] for tok, values in client.progress_reports.items()}


async def until_reported(client: LanguageClient, timeout: float = 20.0) -> None:
    """Wait until a job has sent a `$/progress` report (it is running in the worker)."""

    def reported() -> bool:
        return any(
            isinstance(v, lsp.WorkDoneProgressReport) for vs in client.progress_reports.values() for v in vs
        )

    await until(client, "$/progress", reported, timeout)


def ended(client: LanguageClient) -> list[Any]:
    return [
        v
        for values in client.progress_reports.values()
        for v in values
        if isinstance(v, lsp.WorkDoneProgressEnd)
    ]


async def command(client: LanguageClient, name: str, *args: Any) -> Any:
    return await client.workspace_execute_command_async(
        lsp.ExecuteCommandParams(command=name, arguments=list(args))
    )


def doc_id(uri: str) -> lsp.TextDocumentIdentifier:
    return lsp.TextDocumentIdentifier(uri=uri)
