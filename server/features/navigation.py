"""Go to definition, find references and rename for tensors, parameters and loop variables."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcInvalidParams

from server import convert, names
from server.safe import safe
from tl_language import Analysis
from tl_language.model import BUILTINS
from tl_language.parser import KEYWORDS, LEVELS

if TYPE_CHECKING:
    from server.app import TLServer

RENAMABLE = ("tensor", "param", "loopvar")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
RESERVED = {*KEYWORDS, *LEVELS}


def definition(analysis: Analysis, pos: lsp.Position) -> lsp.Range | None:
    occ = names.at(analysis, convert.tl_position(pos))
    if occ is None:
        return None
    d = names.definition(analysis, occ)
    return convert.range_(d.range) if d is not None else None


def references(analysis: Analysis, pos: lsp.Position, include_declaration: bool) -> list[lsp.Range]:
    occ = names.at(analysis, convert.tl_position(pos))
    if occ is None or occ.kind == "unknown":
        return []
    return [
        convert.range_(o.range)
        for o in names.same_symbol(analysis, occ)
        if include_declaration or not o.definition
    ]


def prepare_rename(analysis: Analysis, pos: lsp.Position) -> lsp.Range | None:
    occ = names.at(analysis, convert.tl_position(pos))
    return convert.range_(occ.range) if occ is not None and occ.kind in RENAMABLE else None


def rename_edits(analysis: Analysis, pos: lsp.Position, new_name: str) -> list[lsp.TextEdit] | None:
    occ = names.at(analysis, convert.tl_position(pos))
    if occ is None or occ.kind not in RENAMABLE:
        return None
    if not _IDENT.match(new_name):
        raise JsonRpcInvalidParams(
            f"`{new_name}` is not a TL name (letters, digits, `_`; not starting with a digit)"
        )
    model = analysis.model
    if new_name.lower() in RESERVED or new_name in BUILTINS:
        raise JsonRpcInvalidParams(f"`{new_name}` is a TL keyword or builtin")
    if new_name != occ.name and (new_name in model.params or new_name in model.tensors):
        raise JsonRpcInvalidParams(f"`{new_name}` is already defined")
    return [convert.text_edit(o.range, new_name) for o in names.same_symbol(analysis, occ)]


def register(server: TLServer) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_DEFINITION)
    @safe("definition")
    def goto_definition(ls: TLServer, params: lsp.DefinitionParams) -> lsp.Location | None:
        analysis = ls.analysis_of(params.text_document.uri)
        rng = None if analysis is None else definition(analysis, params.position)
        return None if rng is None else lsp.Location(uri=params.text_document.uri, range=rng)

    @server.feature(lsp.TEXT_DOCUMENT_REFERENCES)
    @safe("references", empty=list)
    def find_references(ls: TLServer, params: lsp.ReferenceParams) -> list[lsp.Location]:
        analysis = ls.analysis_of(params.text_document.uri)
        if analysis is None:
            return []
        return [
            lsp.Location(uri=params.text_document.uri, range=r)
            for r in references(analysis, params.position, params.context.include_declaration)
        ]

    @server.feature(lsp.TEXT_DOCUMENT_PREPARE_RENAME)
    @safe("prepareRename")
    def prepare(ls: TLServer, params: lsp.PrepareRenameParams) -> lsp.Range | None:
        analysis = ls.analysis_of(params.text_document.uri)
        return None if analysis is None else prepare_rename(analysis, params.position)

    @server.feature(lsp.TEXT_DOCUMENT_RENAME)
    @safe("rename")
    def rename(ls: TLServer, params: lsp.RenameParams) -> lsp.WorkspaceEdit | None:
        analysis = ls.analysis_of(params.text_document.uri)
        edits = None if analysis is None else rename_edits(analysis, params.position, params.new_name)
        return None if edits is None else lsp.WorkspaceEdit(changes={params.text_document.uri: edits})
