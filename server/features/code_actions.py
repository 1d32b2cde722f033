"""Code actions: the quick fixes the checker attached to diagnostics (from `Diagnostic.data`, or the
current analysis when a client drops `data`), plus source actions for the commands."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from server import convert, sketch
from server.safe import safe

if TYPE_CHECKING:
    from server.app import TLServer

# The paper's stage 2 as an edit of the document (`tl complete`): a rewrite, offered whenever it is a sketch.
COMPLETE_SKETCH_KIND = "refactor.rewrite.tl.completeSketch"
SOURCE_ACTIONS = (
    ("Generate CUDA", "tl.generateCuda", "source.tl.generateCuda"),
    ("Verify on GPU", "tl.verify", "source.tl.verify"),
    ("Benchmark", "tl.benchmark", "source.tl.benchmark"),
    ("Verify backward", "tl.verifyBackward", "source.tl.verifyBackward"),
    ("Benchmark backward", "tl.benchmarkBackward", "source.tl.benchmarkBackward"),
    ("Format", "tl.format", "source.tl.format"),
)


def _overlaps(a: lsp.Range, b: lsp.Range) -> bool:
    return not (
        (a.end.line, a.end.character) < (b.start.line, b.start.character)
        or (b.end.line, b.end.character) < (a.start.line, a.start.character)
    )


def actions(ls: TLServer, params: lsp.CodeActionParams) -> list[lsp.CodeAction]:
    uri = params.text_document.uri
    analysis = ls.analysis_of(uri)
    if analysis is None:
        return []
    only = params.context.only
    out: list[lsp.CodeAction] = []
    seen: set[tuple[str, str]] = set()

    def wanted(kind: str) -> bool:
        return not only or any(kind == k or kind.startswith(k + ".") for k in only)

    if wanted(lsp.CodeActionKind.QuickFix):
        pairs: list[tuple[lsp.Diagnostic, list]] = []
        for d in params.context.diagnostics:
            fixes = convert.fixes_from_data(d.data)
            if not fixes:  # a client that does not echo `data`: find the fix in the current analysis
                fixes = [
                    f
                    for cd in analysis.diagnostics
                    if cd.code == d.code and convert.range_(cd.range) == d.range
                    for f in cd.fixes
                ]
            pairs.append((d, fixes))
        for cd in analysis.diagnostics:  # fixes on the requested range, even if the client sent no context
            ld = convert.diagnostic(cd)
            if cd.fixes and _overlaps(ld.range, params.range):
                pairs.append((ld, list(cd.fixes)))
        for d, fixes in pairs:
            for fix in fixes:
                key = (str(d.code), fix.title)
                if key in seen:
                    continue
                seen.add(key)
                edits = [convert.text_edit(e.range, e.new_text) for e in fix.edits]
                out.append(
                    lsp.CodeAction(
                        title=fix.title,
                        kind=lsp.CodeActionKind.QuickFix,
                        diagnostics=[d],
                        is_preferred=len(fixes) == 1,
                        edit=lsp.WorkspaceEdit(changes={uri: edits}),
                    )
                )
    if wanted(COMPLETE_SKETCH_KIND):
        edits = sketch.completion_edits(analysis, ls.settings.target)
        if edits:
            out.append(
                lsp.CodeAction(
                    title=sketch.TITLE,
                    kind=COMPLETE_SKETCH_KIND,
                    edit=lsp.WorkspaceEdit(changes={uri: edits}),
                )
            )
    for title, command, kind in SOURCE_ACTIONS:
        if wanted(kind) and (not only or lsp.CodeActionKind.QuickFix not in only):
            out.append(
                lsp.CodeAction(
                    title=f"TL: {title}",
                    kind=kind,
                    command=lsp.Command(title=title, command=command, arguments=[uri]),
                )
            )
    return out


def register(server: TLServer) -> None:
    @server.feature(
        lsp.TEXT_DOCUMENT_CODE_ACTION,
        lsp.CodeActionOptions(
            code_action_kinds=[lsp.CodeActionKind.QuickFix, COMPLETE_SKETCH_KIND]
            + [k for _, _, k in SOURCE_ACTIONS]
        ),
    )
    @safe("codeAction", empty=list)
    def code_action(ls: TLServer, params: lsp.CodeActionParams) -> list[lsp.CodeAction]:
        return actions(ls, params)
