"""One module per LSP feature; each exposes `register(server)`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from server.app import TLServer

MODULES = (
    "configuration",
    "diagnostics",
    "hover",
    "completion",
    "code_actions",
    "commands",
    "code_lens",
    "inlay_hints",
    "symbols",
    "navigation",
    "folding",
    "semantic_tokens",
    "formatting",
)


def register_all(server: TLServer) -> None:
    import importlib

    for name in MODULES:
        importlib.import_module(f"server.features.{name}").register(server)
