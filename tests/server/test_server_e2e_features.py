"""End to end over stdio: hover, completion, code actions (a quick fix applied), code lens, inlay hints,
symbols, definition / references / rename, folding, semantic tokens, formatting and the commands."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsp_harness import change, command, doc_id, open_doc, start
from lsprotocol import types as lsp
from pytest_lsp import LanguageClient

pytestmark = pytest.mark.e2e

RESHAPE = "    Reshape S from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_N_new)\n"


def pos(text: str, needle: str, word: str) -> lsp.Position:
    line = next(i for i, s in enumerate(text.splitlines()) if needle in s)
    return lsp.Position(line=line, character=text.splitlines()[line].index(word))


def apply(text: str, edits: list[lsp.TextEdit]) -> str:
    lines = text.split("\n")
    offsets = [0]
    for s in lines:
        offsets.append(offsets[-1] + len(s) + 1)
    for e in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        a = offsets[e.range.start.line] + e.range.start.character
        b = offsets[e.range.end.line] + e.range.end.character
        text = text[:a] + e.new_text + text[b:]
    return text


async def test_hover_completion_and_navigation(client: LanguageClient, workspace: Path) -> None:
    rec = await start(client, workspace)
    text = (workspace / "mha_fwd.tl").read_text()
    uri = open_doc(client, workspace / "mha_fwd.tl", text)
    await rec.wait_for(uri, version=1)
    td = doc_id(uri)
    hover = await client.text_document_hover_async(
        lsp.HoverParams(text_document=td, position=pos(text, "Copy K (BN, d)", "K"))
    )
    assert hover is not None and isinstance(hover.contents, lsp.MarkupContent)
    assert "K" in hover.contents.value and "unavailable" not in hover.contents.value
    op = await client.text_document_hover_async(
        lsp.HoverParams(text_document=td, position=pos(text, "Compute Softmax", "Softmax"))
    )
    assert op is not None and "softmax" in op.contents.value.lower()  # type: ignore[union-attr]

    n = len(text.splitlines())
    change(client, uri, 2, text + "Compute ")
    await rec.wait_for(uri, version=2)
    comp = await client.text_document_completion_async(
        lsp.CompletionParams(text_document=td, position=lsp.Position(line=n, character=8))
    )
    assert comp is not None and "GEMM" in [i.label for i in comp.items]
    change(client, uri, 3, text)

    use = pos(text, "Compute GEMM Q, K", "Q,")
    loc = await client.text_document_definition_async(lsp.DefinitionParams(text_document=td, position=use))
    assert isinstance(loc, lsp.Location) and loc.range.start.line == pos(text, "Allocate Q in", "Q").line
    refs = await client.text_document_references_async(
        lsp.ReferenceParams(
            text_document=td, position=use, context=lsp.ReferenceContext(include_declaration=True)
        )
    )
    assert refs is not None and len(refs) == 4
    prep = await client.text_document_prepare_rename_async(
        lsp.PrepareRenameParams(text_document=td, position=use)
    )
    assert prep is not None
    edit = await client.text_document_rename_async(
        lsp.RenameParams(text_document=td, position=use, new_name="Qt")
    )
    assert edit is not None and edit.changes is not None and len(edit.changes[uri]) == 4
    with pytest.raises(Exception, match="keyword"):
        await client.text_document_rename_async(
            lsp.RenameParams(text_document=td, position=use, new_name="shared")
        )


async def test_ranked_parameter_completion_for_a_hole(client: LanguageClient, workspace: Path) -> None:
    rec = await start(client, workspace)
    text = (workspace / "sketch_fwd.tl").read_text()
    uri = open_doc(client, workspace / "sketch_fwd.tl", text)
    await rec.wait_for(uri, version=1)
    at = pos(text, "Param BN = ?", "?")
    comp = await client.text_document_completion_async(
        lsp.CompletionParams(text_document=doc_id(uri), position=at)
    )
    assert comp is not None and comp.items
    first = comp.items[0]
    assert first.preselect and first.detail and "#1" in first.detail
    assert isinstance(first.text_edit, lsp.TextEdit) and first.text_edit.range.start == at


async def test_quick_fix_inserts_the_missing_reshape(client: LanguageClient, workspace: Path) -> None:
    rec = await start(client, workspace)
    text = (workspace / "mha_fwd.tl").read_text().replace(RESHAPE, "")
    uri = open_doc(client, workspace / "mha_fwd.tl", text)
    got = await rec.wait_for(uri, version=1)
    (diag,) = [d for d in got.diagnostics if d.code == "TL202"]
    actions = await client.text_document_code_action_async(
        lsp.CodeActionParams(
            text_document=doc_id(uri), range=diag.range, context=lsp.CodeActionContext(diagnostics=[diag])
        )
    )
    assert actions is not None
    fixes = [a for a in actions if isinstance(a, lsp.CodeAction) and a.kind == lsp.CodeActionKind.QuickFix]
    assert fixes and fixes[0].edit is not None and fixes[0].edit.changes is not None
    fixed = apply(text, list(fixes[0].edit.changes[uri]))
    change(client, uri, 2, fixed)
    after = await rec.wait_for(uri, version=2)
    assert not [d for d in after.diagnostics if d.code == "TL202"]
    # (pygls' client may parse a command-carrying CodeAction as a Command: compare titles)
    titles = {a.title for a in actions}
    assert {"TL: Generate CUDA", "TL: Verify on GPU", "TL: Benchmark", "TL: Format"} <= titles


async def test_lens_hints_symbols_folding_tokens(client: LanguageClient, workspace: Path) -> None:
    rec = await start(client, workspace)
    text = (workspace / "mha_fwd.tl").read_text()
    uri = open_doc(client, workspace / "mha_fwd.tl", text)
    await rec.wait_for(uri, version=1)
    td = doc_id(uri)
    lenses = await client.text_document_code_lens_async(lsp.CodeLensParams(text_document=td))
    assert lenses and lenses[0].command is not None and lenses[0].command.title == "not verified yet"
    assert lenses[0].range.start.line == pos(text, "Kernel", "Kernel").line
    whole = lsp.Range(start=lsp.Position(line=0, character=0), end=lsp.Position(line=40, character=0))
    hints = await client.text_document_inlay_hint_async(lsp.InlayHintParams(text_document=td, range=whole))
    assert hints is not None and "smem 96 KiB / 163 KiB (sm_80)" in [h.label for h in hints]
    syms = await client.text_document_document_symbol_async(lsp.DocumentSymbolParams(text_document=td))
    assert syms and isinstance(syms[0], lsp.DocumentSymbol) and syms[0].name == "mha_fwd"
    folds = await client.text_document_folding_range_async(lsp.FoldingRangeParams(text_document=td))
    assert folds and any(f.start_line == pos(text, "for j", "for").line for f in folds)
    tokens = await client.text_document_semantic_tokens_full_async(lsp.SemanticTokensParams(text_document=td))
    assert tokens is not None and len(tokens.data) > 100 and len(tokens.data) % 5 == 0


async def test_formatting_and_the_format_command(client: LanguageClient, workspace: Path) -> None:
    rec = await start(client, workspace)
    messy = "kernel   k\ntarget SM_80\nparam BM=128\n"
    uri = open_doc(client, workspace / "messy.tl", messy)
    await rec.wait_for(uri, version=1)
    edits = await client.text_document_formatting_async(
        lsp.DocumentFormattingParams(
            text_document=doc_id(uri), options=lsp.FormattingOptions(tab_size=4, insert_spaces=True)
        )
    )
    assert edits and apply(messy, list(edits)) != messy
    applied: list[lsp.ApplyWorkspaceEditParams] = []

    @client.feature(lsp.WORKSPACE_APPLY_EDIT)
    def on_apply(params: lsp.ApplyWorkspaceEditParams) -> lsp.ApplyWorkspaceEditResult:
        applied.append(params)
        return lsp.ApplyWorkspaceEditResult(applied=True)

    result = await command(client, "tl.format", uri)
    assert result["status"] == "ok" and applied and applied[0].edit.changes


async def test_generate_cuda_writes_opens_and_asks_before_overwriting_an_edit(
    client: LanguageClient, workspace: Path
) -> None:
    rec = await start(client, workspace)
    uri = open_doc(client, workspace / "mha_fwd.tl")
    await rec.wait_for(uri, version=1)
    result = await command(client, "tl.generateCuda", uri)
    cu = workspace / "mha_fwd.cu"
    assert result["status"] == "ok" and cu.is_file() and (workspace / "mha_fwd.launch.json").is_file()
    assert client.shown_documents and client.shown_documents[-1].uri == cu.resolve().as_uri()
    generated = cu.read_text()
    assert "mha_fwd" in generated
    cu.write_text(generated + "// my hand edit\n")
    asked: list[lsp.ShowMessageRequestParams] = []
    answer = {"title": "Cancel"}

    @client.feature(lsp.WINDOW_SHOW_MESSAGE_REQUEST)
    def on_ask(params: lsp.ShowMessageRequestParams) -> lsp.MessageActionItem:
        asked.append(params)
        return lsp.MessageActionItem(title=answer["title"])

    again = await command(client, "tl.generateCuda", uri)
    assert again["status"] == "cancelled" and asked and "edited" in asked[0].message
    assert cu.read_text().endswith("// my hand edit\n")
    answer["title"] = "Write mha_fwd.generated.cu"
    alt = await command(client, "tl.generateCuda", uri)
    assert alt["status"] == "ok" and (workspace / "mha_fwd.generated.cu").read_text() == generated
    assert cu.read_text().endswith("// my hand edit\n")
    answer["title"] = "Overwrite"
    over = await command(client, "tl.generateCuda", uri)
    assert over["status"] == "ok" and cu.read_text() == generated


async def test_generate_cuda_reports_a_document_with_errors(client: LanguageClient, workspace: Path) -> None:
    rec = await start(client, workspace)
    uri = open_doc(client, workspace / "bad.tl", "Kernel k\nCopy Q fro global\n")
    await rec.wait_for(uri, version=1)
    result = await command(client, "tl.generateCuda", uri)
    assert result["status"] == "failed" and not (workspace / "bad.cu").exists()
    assert any("error" in m.message for m in client.messages)
