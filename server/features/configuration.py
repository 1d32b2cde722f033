"""Settings: pulled with `workspace/configuration` (section `tl`) after `initialized` and on every
`workspace/didChangeConfiguration`; `initializationOptions` seed them for clients that cannot answer."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from server.safe import safe
from server.settings import Settings

if TYPE_CHECKING:
    from server.app import TLServer

log = logging.getLogger(__name__)


async def pull(ls: TLServer) -> None:
    if not ls.client_supports("workspace", "configuration"):
        return
    try:
        result = await ls.workspace_configuration_async(
            lsp.ConfigurationParams(items=[lsp.ConfigurationItem(section="tl")])
        )
    except Exception:
        log.warning("workspace/configuration failed; keeping the current settings", exc_info=True)
        return
    if result:
        apply(ls, result[0])


def apply(ls: TLServer, data: object) -> None:
    old = ls.settings
    ls.settings = Settings.from_json(data)
    log.info("settings: %s", ls.settings)
    if old.target != ls.settings.target:
        for doc in ls.docs:
            ls.publish(doc)


def register(server: TLServer) -> None:
    @server.feature(lsp.INITIALIZED)
    @safe("initialized")
    async def initialized(ls: TLServer, params: lsp.InitializedParams) -> None:
        opts = getattr(ls.protocol, "initialization_options", None)
        if isinstance(opts, dict) and isinstance(opts.get("tl", opts), dict):
            apply(ls, opts.get("tl", opts))
        await pull(ls)

    @server.feature(lsp.WORKSPACE_DID_CHANGE_CONFIGURATION)
    @safe("didChangeConfiguration")
    async def changed(ls: TLServer, params: lsp.DidChangeConfigurationParams) -> None:
        settings = params.settings
        if isinstance(settings, dict) and isinstance(settings.get("tl"), dict):
            apply(ls, settings["tl"])
        await pull(ls)

    @server.feature(lsp.SHUTDOWN)
    @safe("shutdown")
    async def shutdown(ls: TLServer, params: None) -> None:
        for task in list(ls.jobs.values()):
            task.cancel()
        await ls.worker.stop()
