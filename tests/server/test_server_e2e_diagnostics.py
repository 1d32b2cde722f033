"""End to end over stdio: diagnostics on open, change and save; debounce and stale versions; documents
with errors everywhere and other malformed input."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsp_harness import change, doc_id, open_doc, save, start
from lsprotocol import types as lsp
from pytest_lsp import LanguageClient

pytestmark = pytest.mark.e2e

MISSING_RESHAPE = "    Reshape S from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_N_new)\n"


async def test_diagnostics_on_open_change_and_save_carry_code_and_fixes(
    client: LanguageClient, workspace: Path
) -> None:
    rec = await start(client, workspace)
    text = (workspace / "mha_fwd.tl").read_text()
    uri = open_doc(client, workspace / "mha_fwd.tl", text)
    assert (await rec.wait_for(uri, version=1)).diagnostics == ()
    broken = text.replace(MISSING_RESHAPE, "")
    change(client, uri, 2, broken)
    got = await rec.wait_for(uri, version=2)
    (d,) = [d for d in got.diagnostics if d.code == "TL202"]
    assert d.source == "tl" and d.severity == lsp.DiagnosticSeverity.Error
    assert d.data and d.data["fixes"] and "Reshape" in d.data["fixes"][0]["edits"][0]["newText"]
    change(client, uri, 3, text)
    save(client, uri, text)
    assert (await rec.wait_for(uri, version=3, predicate=lambda p: not p.diagnostics)).diagnostics == ()


async def test_fifty_quick_changes_publish_only_the_last_version(
    client: LanguageClient, workspace: Path
) -> None:
    rec = await start(client, workspace, {"debounceMs": 150})
    text = (workspace / "mha_fwd.tl").read_text()
    uri = open_doc(client, workspace / "mha_fwd.tl", text)
    await rec.wait_for(uri, version=1)
    before = len(rec.published)
    for v in range(2, 52):  # each intermediate version has a distinct unknown statement on its last line
        change(client, uri, v, text + f"Bogus{v}\n")
    last = await rec.wait_for(uri, version=51)
    assert [p.version for p in rec.published[before:]] == [51]
    assert any("Bogus51" in d.message for d in last.diagnostics)


async def test_out_of_order_versions_are_ignored(client: LanguageClient, workspace: Path) -> None:
    rec = await start(client, workspace)
    text = (workspace / "mha_fwd.tl").read_text()
    uri = open_doc(client, workspace / "mha_fwd.tl", text)
    await rec.wait_for(uri, version=1)
    change(client, uri, 5, text + "Newest\n")
    change(client, uri, 3, text + "Stale\n")  # older than what the server holds: dropped
    change(client, uri, 6, text + "Newest again\n")
    got = await rec.wait_for(uri, version=6)
    assert all(p.version != 3 for p in rec.published)
    assert any("Newest" in d.message for d in got.diagnostics)
    assert not any("Stale" in d.message for p in rec.published for d in p.diagnostics)


ERRORS_EVERYWHERE = "\n".join(
    [
        "Kernal oops",
        "Target sm_12",
        "Dtype fp64",
        "Param = 3",
        "Param BM = (1 +",
        "Mask sideways(1)",
        "Allocate Q in nowhere (a, b",
        "Copy from to",
        "Copy Q (BM, d) in coordinate [L = ] from global to",
        "Compute FROB Q, K and get",
        "Compute GEMM",
        "Reshape S from (MMA_C to",
        "for = 0:",
        "end",
        "end",
        "@@@ ¿? 𝄞 \t\x00",
        "for j = 0: 4",
        "    Copy K from shared to register",
        "    " + "x" * 5000,
    ]
)


async def test_a_document_with_errors_everywhere_answers_every_feature(
    client: LanguageClient, workspace: Path
) -> None:
    rec = await start(client, workspace)
    uri = open_doc(client, workspace / "broken.tl", ERRORS_EVERYWHERE)
    got = await rec.wait_for(uri, version=1)
    assert len(got.diagnostics) >= 12 and all(d.code for d in got.diagnostics)
    lines = {d.range.start.line for d in got.diagnostics}
    assert len(lines) >= 12  # one per broken line at least, none lost
    td = doc_id(uri)
    for line in range(len(ERRORS_EVERYWHERE.splitlines())):
        await client.text_document_hover_async(
            lsp.HoverParams(text_document=td, position=lsp.Position(line=line, character=3))
        )
        await client.text_document_completion_async(
            lsp.CompletionParams(text_document=td, position=lsp.Position(line=line, character=5))
        )
    assert (
        await client.text_document_document_symbol_async(lsp.DocumentSymbolParams(text_document=td))
        is not None
    )
    assert (
        await client.text_document_folding_range_async(lsp.FoldingRangeParams(text_document=td)) is not None
    )
    tokens = await client.text_document_semantic_tokens_full_async(lsp.SemanticTokensParams(text_document=td))
    assert tokens is not None and len(tokens.data) % 5 == 0
    whole = lsp.Range(start=lsp.Position(line=0, character=0), end=lsp.Position(line=30, character=0))
    assert (
        await client.text_document_inlay_hint_async(lsp.InlayHintParams(text_document=td, range=whole)) == ()
    )
    actions = await client.text_document_code_action_async(
        lsp.CodeActionParams(
            text_document=td, range=whole, context=lsp.CodeActionContext(diagnostics=list(got.diagnostics))
        )
    )
    assert actions is not None
    assert await client.text_document_code_lens_async(lsp.CodeLensParams(text_document=td))


async def test_malformed_requests_answer_empty_and_the_session_lives_on(
    client: LanguageClient, workspace: Path
) -> None:
    rec = await start(client, workspace)
    ghost = doc_id((workspace / "never_opened.tl").as_uri())
    far = lsp.Position(line=10_000, character=10_000)
    assert await client.text_document_hover_async(lsp.HoverParams(text_document=ghost, position=far)) is None
    change(client, ghost.uri, 2, "Kernel k\n")  # a change to a document never opened: ignored
    uri = open_doc(client, workspace / "empty.tl", "")
    assert (await rec.wait_for(uri, version=1)) is not None
    td = doc_id(uri)
    assert await client.text_document_hover_async(lsp.HoverParams(text_document=td, position=far)) is None
    comp = await client.text_document_completion_async(lsp.CompletionParams(text_document=td, position=far))
    assert comp is not None and comp.items == ()
    crlf = open_doc(client, workspace / "crlf.tl", "Kernel k\r\nTarget sm_80\r\nBogus\r\n")
    got = await rec.wait_for(crlf, version=1)
    assert [d.range.start.line for d in got.diagnostics if d.code == "TL002"] == [2]
    client.text_document_did_close(lsp.DidCloseTextDocumentParams(text_document=doc_id(crlf)))
    cleared = await rec.wait_for(crlf, predicate=lambda p: p.version is None)
    assert cleared.diagnostics == ()
