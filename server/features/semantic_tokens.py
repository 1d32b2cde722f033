"""Semantic tokens (full document): keywords, memory levels and other enum words, ops, tensors, params,
loop variables, runtime builtins, layout modes, numbers, operators and comments."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from server import names
from server.safe import safe
from tl_language import Analysis, gpu
from tl_language import syntax as ast
from tl_language.lexer import lex_line
from tl_language.parser import KEYWORDS as TL_KEYWORDS
from tl_language.source import LineText, split_lines

if TYPE_CHECKING:
    from server.app import TLServer

TOKEN_TYPES = [
    "keyword",
    "enumMember",
    "function",
    "variable",
    "parameter",
    "type",
    "property",
    "number",
    "operator",
    "comment",
]
TOKEN_MODIFIERS = ["declaration", "readonly", "defaultLibrary"]
LEGEND = lsp.SemanticTokensLegend(token_types=TOKEN_TYPES, token_modifiers=TOKEN_MODIFIERS)
_T = {t: i for i, t in enumerate(TOKEN_TYPES)}
_DECL, _READONLY, _LIB = 1, 2, 4

KEYWORDS = set(TL_KEYWORDS)
ENUM_WORDS = {"global", "shared", "register", "none", "causal", "window", *gpu.DTYPES, *gpu.TARGETS}
_NAME_KIND = {
    "tensor": ("variable", 0),
    "param": ("parameter", _READONLY),
    "loopvar": ("variable", 0),
    "builtin": ("variable", _READONLY | _LIB),
}


def _roles(analysis: Analysis) -> dict[tuple[int, int], tuple[int, int]]:
    """(line, UTF-16 start) → (type, modifiers) for words the tree knows the role of."""
    roles: dict[tuple[int, int], tuple[int, int]] = {}
    for occ in names.occurrences(analysis):
        if occ.kind in _NAME_KIND:
            t, m = _NAME_KIND[occ.kind]
            roles[(occ.range.start.line, occ.range.start.character)] = (
                _T[t],
                m | (_DECL if occ.definition else 0),
            )
    for s in analysis.document.walk():
        idents: list[tuple[ast.Ident | None, str, int]] = []
        if isinstance(s, ast.KernelStmt):
            idents.append((s.name, "function", _DECL))
        elif isinstance(s, ast.ComputeStmt):
            idents.append((s.op, "function", _LIB))
        elif isinstance(s, ast.ReshapeStmt):
            idents += [(i, "type", 0) for i in (s.src_layout or []) + (s.dst_layout or [])]
        elif isinstance(s, ast.CopyStmt) and s.coordinate is not None:
            idents.append((s.coordinate.axis, "property", 0))
        for ident, t, m in idents:
            if ident is not None:
                roles.setdefault((ident.range.start.line, ident.range.start.character), (_T[t], m))
    return roles


def encode(analysis: Analysis) -> list[int]:
    roles = _roles(analysis)
    data: list[int] = []
    prev_line = prev_col = 0
    for number, raw in enumerate(split_lines(analysis.text)):
        line = LineText(number, raw)
        tokens, comment_at = lex_line(line)
        spans: list[tuple[int, int, int, int]] = []  # col, length, type, modifiers
        for tok in tokens:
            col, end = line.col(tok.start), line.col(tok.end)
            role = roles.get((number, col))
            if role is not None:
                spans.append((col, end - col, *role))
            elif tok.kind == "ident" and tok.lower in KEYWORDS:
                spans.append((col, end - col, _T["keyword"], 0))
            elif tok.kind == "ident" and tok.lower in ENUM_WORDS:
                spans.append((col, end - col, _T["enumMember"], 0))
            elif tok.kind == "int":
                spans.append((col, end - col, _T["number"], 0))
            elif tok.kind == "punct" and tok.text in "+-*/=?":
                spans.append((col, end - col, _T["operator"], 0))
        if comment_at is not None:
            col = line.col(comment_at)
            spans.append((col, line.width - col, _T["comment"], 0))
        for col, length, t, m in spans:
            if length <= 0:
                continue
            delta_line = number - prev_line
            data += [delta_line, col - prev_col if delta_line == 0 else col, length, t, m]
            prev_line, prev_col = number, col
    return data


def register(server: TLServer) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_SEMANTIC_TOKENS_FULL, LEGEND)
    @safe("semanticTokens", empty=lambda: lsp.SemanticTokens(data=[]))
    def semantic_tokens(ls: TLServer, params: lsp.SemanticTokensParams) -> lsp.SemanticTokens:
        analysis = ls.analysis_of(params.text_document.uri)
        return lsp.SemanticTokens(data=[] if analysis is None else encode(analysis))
