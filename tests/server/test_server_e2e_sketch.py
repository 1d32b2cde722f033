"""End to end over stdio: the "Complete sketch" code action on the paper's sketch, and the command the
completion item runs, applied by the client."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsp_harness import command, doc_id, open_doc, start
from lsprotocol import types as lsp
from pytest_lsp import LanguageClient

from translator.planner.sketch import complete_sketch

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
PAPER = (ROOT / "examples" / "sketches" / "sketch_paper.tl").read_text(encoding="utf-8")


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


async def test_complete_sketch_action_and_command(client: LanguageClient, workspace: Path) -> None:
    rec = await start(client, workspace)
    path = workspace / "paper.tl"
    path.write_text(PAPER)
    uri = open_doc(client, path, PAPER)
    got = await rec.wait_for(uri, version=1)
    assert {d.severity for d in got.diagnostics} == {lsp.DiagnosticSeverity.Information}
    whole = lsp.Range(start=lsp.Position(line=0, character=0), end=lsp.Position(line=0, character=0))
    actions = await client.text_document_code_action_async(
        lsp.CodeActionParams(
            text_document=doc_id(uri), range=whole, context=lsp.CodeActionContext(diagnostics=[])
        )
    )
    sketch = [
        a
        for a in actions or []
        if isinstance(a, lsp.CodeAction) and a.title.startswith("TL: Complete sketch")
    ]
    assert sketch and sketch[0].edit is not None and sketch[0].edit.changes is not None
    assert apply(PAPER, list(sketch[0].edit.changes[uri])) == complete_sketch(PAPER).text

    applied: list[lsp.ApplyWorkspaceEditParams] = []

    @client.feature(lsp.WORKSPACE_APPLY_EDIT)
    def on_apply(params: lsp.ApplyWorkspaceEditParams) -> lsp.ApplyWorkspaceEditResult:
        applied.append(params)
        return lsp.ApplyWorkspaceEditResult(applied=True)

    result = await command(client, "tl.completeSketch", uri)
    assert result["status"] == "ok" and applied
    assert apply(PAPER, list(applied[0].edit.changes[uri])) == complete_sketch(PAPER).text
