"""The language server (`python -m server`, what `tl lsp` runs) under a pygls client over stdio: start and
initialize it, stop it; shared by the benchmarks that drive it."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient


async def start_server(
    client: LanguageClient, window: lsp.WindowClientCapabilities | None = None
) -> tuple[Any, asyncio.Task[None]]:
    """Start the server, initialize it (the client answers workspace/configuration; `window` e.g. asks for
    `$/progress`): (its process, the task that drains its stderr so the pipe never fills; `stop_server`
    ends both)."""
    await client.start_io(sys.executable, "-m", "server", "--log-level", "WARNING")
    server = client._server  # the asyncio subprocess pygls started
    assert server is not None and server.stderr is not None

    async def drain() -> None:
        while await server.stderr.readline():  # type: ignore[union-attr]
            pass

    drainer = asyncio.create_task(drain())
    await client.initialize_async(
        lsp.InitializeParams(
            capabilities=lsp.ClientCapabilities(
                workspace=lsp.WorkspaceClientCapabilities(configuration=True), window=window
            )
        )
    )
    client.initialized(lsp.InitializedParams())
    return server, drainer


async def stop_server(client: LanguageClient, drainer: asyncio.Task[None]) -> None:
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    drainer.cancel()
