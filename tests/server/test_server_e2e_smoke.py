"""A first end-to-end check: open an example, get its diagnostics, hover."""

from __future__ import annotations

import pytest
from lsp_harness import open_doc, start
from lsprotocol import types as lsp
from pytest_lsp import LanguageClient

pytestmark = pytest.mark.e2e


async def test_open_example_publishes_diagnostics(client: LanguageClient, workspace) -> None:
    rec = await start(client, workspace)
    uri = open_doc(client, workspace / "mha_fwd.tl")
    got = await rec.wait_for(uri, version=1)
    assert got.diagnostics == [] or all(d.source == "tl" for d in got.diagnostics)
    hover = await client.text_document_hover_async(
        lsp.HoverParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri), position=lsp.Position(line=13, character=1)
        )
    )
    assert hover is not None
