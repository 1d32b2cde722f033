"""Hand-written, error-tolerant TL parser.

`parse(text)` never raises. Each line is parsed on its own: a broken line yields its partial statement
(missing fields are `None`) and exactly one diagnostic, and the next line starts afresh. `for … end`
nesting is resolved over the statement stream; an unterminated `for` is reported at the `for`.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable

from tl_language import syntax as ast
from tl_language.diagnostics import Diagnostic, make
from tl_language.lexer import Token, lex_line
from tl_language.limits import (
    MAX_CHARS,
    MAX_FOR_DEPTH,
    MAX_LINES,
    document_message,
    for_depth_message,
    scan_line,
)
from tl_language.source import LineText, Range, split_lines

STATEMENT_KEYWORDS = (
    "kernel", "target", "dtype", "param", "scalar", "mask", "allocate", "copy", "compute", "reshape", "for",
    "end",
)  # fmt: skip
# Words inside statements (`in`, `from … to`, `and get new`): with the statement keywords, TL's keywords.
CLAUSE_KEYWORDS = (
    "in", "with", "offset", "dtype", "coordinate", "from", "to", "as", "and", "get", "new", "accumulate",
    "learnable",
)  # fmt: skip
KEYWORDS = STATEMENT_KEYWORDS + CLAUSE_KEYWORDS
LEVELS = ("global", "shared", "register")


class _Error(Exception):
    def __init__(self, diagnostic: Diagnostic) -> None:
        self.diagnostic = diagnostic


def _found(tok: Token | None) -> str:
    return "end of line" if tok is None else f"`{tok.text}`"


class _Cursor:
    """Tokens of one line with the expect/accept helpers the statement parsers share."""

    def __init__(self, line: LineText, tokens: list[Token]) -> None:
        self.line = line
        self.tokens = tokens
        self.i = 0

    def peek(self, ahead: int = 0) -> Token | None:
        j = self.i + ahead
        return self.tokens[j] if j < len(self.tokens) else None

    def at_end(self) -> bool:
        return self.i >= len(self.tokens)

    def next(self) -> Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def range(self, tok: Token) -> Range:
        return self.line.range(tok.start, tok.end)

    def span(self, first: Token, last: Token) -> Range:
        return self.line.range(first.start, last.end)

    def error_here(self, expected: str, code: str = "TL003") -> _Error:
        tok = self.peek()
        if tok is None:
            end = self.tokens[-1].end if self.tokens else 0
            rng = self.line.range(end, end)
        else:
            rng = self.range(tok)
        if tok is not None and tok.kind == "bad":
            return _Error(make("TL001", rng, f"unexpected character `{tok.text}`; expected {expected}"))
        return _Error(make(code, rng, f"expected {expected}, found {_found(tok)}"))

    def accept_kw(self, *words: str) -> Token | None:
        i = self.i
        if i < len(self.tokens):
            tok = self.tokens[i]
            if tok.kind == "ident" and tok.text.lower() in words:
                self.i = i + 1
                return tok
        return None

    def expect_kw(self, word: str) -> Token:
        tok = self.accept_kw(word)
        if tok is None:
            raise self.error_here(f"`{word}`")
        return tok

    def accept_punct(self, ch: str) -> Token | None:
        i = self.i
        if i < len(self.tokens):
            tok = self.tokens[i]
            if tok.text == ch and tok.kind == "punct":
                self.i = i + 1
                return tok
        return None

    def expect_punct(self, ch: str) -> Token:
        tok = self.accept_punct(ch)
        if tok is None:
            raise self.error_here(f"`{ch}`")
        return tok

    def expect_ident(self, what: str) -> ast.Ident:
        i = self.i
        if i >= len(self.tokens) or self.tokens[i].kind != "ident":
            raise self.error_here(what)
        tok = self.tokens[i]
        self.i = i + 1
        return ast.Ident(tok.text, self.line.range(tok.start, tok.end))

    def expect_end(self) -> None:
        if not self.at_end():
            raise self.error_here("end of line")

    # ---- expressions: precedence climbing, loosest first: | & comparisons + - * / % unary atoms ----
    # Each level loops over its operators (left-associative), so a long chain of terms never nests
    # deeper than the precedence levels; only parentheses, calls and subscripts recurse.

    def _binary(self, ops: tuple[str, ...], operand: Callable[[], ast.Expr]) -> ast.Expr:
        left = operand()
        while (tok := self.peek()) is not None and tok.kind == "punct" and tok.text in ops:
            self.next()
            right = operand()
            left = ast.BinOp(tok.text, left, right, Range(left.range.start, right.range.end))
        return left

    def expr(self) -> ast.Expr:
        return self._binary(("|",), self.conjunction)

    def conjunction(self) -> ast.Expr:
        return self._binary(("&",), self.comparison)

    def comparison(self) -> ast.Expr:
        return self._binary(("<", "<=", ">", ">=", "==", "!="), self.arith)

    def arith(self) -> ast.Expr:
        return self._binary(("+", "-"), self.term)

    def term(self) -> ast.Expr:
        return self._binary(("*", "/", "%"), self.unary)

    def unary(self) -> ast.Expr:
        tok = self.peek()
        if tok is not None and tok.kind == "punct" and tok.text in ("-", "!"):
            self.next()
            operand = self.unary()
            return ast.Unary(tok.text, operand, Range(self.range(tok).start, operand.range.end))
        return self.atom()

    def atom(self) -> ast.Expr:
        tok = self.peek()
        if tok is None:
            raise self.error_here("an expression", "TL006")
        if tok.kind == "int":
            self.next()
            return ast.Num(int(tok.text), self.range(tok))
        if tok.kind == "real":
            self.next()
            return ast.Real(float(tok.text), tok.text, self.range(tok))
        if tok.kind == "ident":
            self.next()
            after = self.peek()
            if after is not None and after.kind == "punct" and after.text == "(":
                self.next()
                args = [] if self.accept_punct(")") else self._items(")")
                end = self.tokens[self.i - 1]
                return ast.Call(ast.Ident(tok.text, self.range(tok)), args, self.span(tok, end))
            if after is not None and after.kind == "punct" and after.text == "[":
                self.next()
                indices = self._items("]")
                end = self.tokens[self.i - 1]
                return ast.Subscript(ast.Name(tok.text, self.range(tok)), indices, self.span(tok, end))
            return ast.Name(tok.text, self.range(tok))
        if tok.kind == "punct" and tok.text == "?":
            self.next()
            return ast.Hole(self.range(tok))
        if tok.kind == "punct" and tok.text == "(":
            self.next()
            inner = self.expr()
            close = self.expect_punct(")")
            return ast.Paren(inner, Range(self.range(tok).start, self.range(close).end))
        raise self.error_here("an expression", "TL006")

    def _items(self, close: str) -> list[ast.Expr]:
        """`e, e, … close` after an opening `(` or `[` that was just read."""
        items = [self.expr()]
        while self.accept_punct(","):
            items.append(self.expr())
        self.expect_punct(close)
        return items

    def expr_list(self) -> list[ast.Expr]:
        """`( e, e, … )` — the opening paren must be next."""
        self.expect_punct("(")
        items = [self.expr()]
        while self.accept_punct(","):
            items.append(self.expr())
        self.expect_punct(")")
        return items

    def ident_list(self, what: str) -> list[ast.Ident]:
        self.expect_punct("(")
        items = [self.expect_ident(what)]
        while self.accept_punct(","):
            items.append(self.expect_ident(what))
        self.expect_punct(")")
        return items


# ---- one parser per statement; each fills its node as it goes so a failure leaves a partial node ----


def _p_kernel(c: _Cursor, node: ast.KernelStmt) -> None:
    node.name = c.expect_ident("a kernel name")
    c.expect_end()


def _p_target(c: _Cursor, node: ast.TargetStmt) -> None:
    node.arch = c.expect_ident("an architecture such as `sm_80`")
    c.expect_end()


def _p_dtype(c: _Cursor, node: ast.DtypeStmt) -> None:
    node.dtype = c.expect_ident("a dtype (`fp16`, `bf16` or `fp8_e4m3`)")
    c.expect_end()


def _p_param(c: _Cursor, node: ast.ParamStmt) -> None:
    node.name = c.expect_ident("a parameter name")
    c.expect_punct("=")
    node.value = c.expr()
    c.expect_end()


def _p_scalar(c: _Cursor, node: ast.ScalarStmt) -> None:
    node.name = c.expect_ident("a scalar name")
    c.expect_punct("=")
    node.value = c.expr()
    c.expect_end()


def _p_mask(c: _Cursor, node: ast.MaskStmt) -> None:
    node.kind = c.expect_ident("`none`, `causal` or `window(LEFT, RIGHT)`")
    if c.peek() is not None and c.peek().text == "(":  # type: ignore[union-attr]
        node.args = c.expr_list()
    c.expect_end()


def _p_allocate(c: _Cursor, node: ast.AllocateStmt) -> None:
    node.name = c.expect_ident("a tensor name")
    c.expect_kw("in")
    node.level = c.expect_ident("a memory level (`global`, `shared` or `register`)")
    node.shape = c.expr_list()
    while c.accept_kw("with"):
        if c.accept_kw("dtype"):
            node.dtype = c.expect_ident("an element type (`float32` or `int32`)")
            continue
        if (tok := c.accept_kw("learnable")) is not None:
            node.learnable = c.range(tok)
            continue
        c.expect_kw("offset")
        node.offset = c.expr()
    c.expect_end()


def _p_copy(c: _Cursor, node: ast.CopyStmt) -> None:
    node.name = c.expect_ident("a tensor name")
    tok = c.peek()
    if tok is not None and tok.text == "(":
        node.tile = c.expr_list()
    if (kw_in := c.accept_kw("in")) is not None:
        c.expect_kw("coordinate")
        c.expect_punct("[")
        axis = c.expect_ident("a coordinate axis such as `L`")
        c.expect_punct("=")
        value = c.expr()
        close = c.expect_punct("]")
        node.coordinate = ast.Coordinate(axis, value, c.span(kw_in, close))
    c.expect_kw("from")
    node.src = c.expect_ident("a memory level")
    c.expect_kw("to")
    node.dst = c.expect_ident("a memory level")
    if c.accept_kw("as"):
        node.alias = c.expect_ident("a tensor name")
    c.expect_end()


def _p_compute(c: _Cursor, node: ast.ComputeStmt) -> None:
    node.op = c.expect_ident("an operation such as `GEMM` or `Softmax`")
    if c.at_end():
        raise c.error_here("operands")
    node.args.append(c.expr())
    while c.accept_punct(","):
        node.args.append(c.expr())
    if c.at_end():
        node.mode = "inplace"
        return
    c.expect_kw("and")
    if c.accept_kw("accumulate"):
        node.mode = "accumulate"
    else:
        c.expect_kw("get")
        node.mode = "get_new" if c.accept_kw("new") else "get"
    node.result = c.expect_ident("a result tensor name")
    c.expect_end()


def _p_reshape(c: _Cursor, node: ast.ReshapeStmt) -> None:
    node.name = c.expect_ident("a tensor name")
    c.expect_kw("from")
    node.src_layout = c.ident_list("a layout mode such as `MMA_C`")
    c.expect_kw("to")
    node.dst_layout = c.ident_list("a layout mode such as `MMA_A`")
    c.expect_end()


def _p_for(c: _Cursor, node: ast.ForStmt) -> None:
    node.var = c.expect_ident("a loop variable")
    c.expect_punct("=")
    node.start = c.expr()
    c.expect_punct(":")
    node.stop = c.expr()
    c.expect_end()


def _new_node(kw: str, rng: Range) -> ast.Stmt:
    if kw == "kernel":
        return ast.KernelStmt(rng, None)
    if kw == "target":
        return ast.TargetStmt(rng, None)
    if kw == "dtype":
        return ast.DtypeStmt(rng, None)
    if kw == "param":
        return ast.ParamStmt(rng, None, None)
    if kw == "scalar":
        return ast.ScalarStmt(rng, None, None)
    if kw == "mask":
        return ast.MaskStmt(rng, None)
    if kw == "allocate":
        return ast.AllocateStmt(rng, None, None, None)
    if kw == "copy":
        return ast.CopyStmt(rng, None, None, None, None, None)
    if kw == "compute":
        return ast.ComputeStmt(rng, None, [], None, "get")
    if kw == "reshape":
        return ast.ReshapeStmt(rng, None, None, None)
    return ast.ForStmt(rng, None, None, None)


_PARSERS = {
    "kernel": _p_kernel,
    "target": _p_target,
    "dtype": _p_dtype,
    "param": _p_param,
    "scalar": _p_scalar,
    "mask": _p_mask,
    "allocate": _p_allocate,
    "copy": _p_copy,
    "compute": _p_compute,
    "reshape": _p_reshape,
    "for": _p_for,
}


class _End:
    """Marker for an `end` line while building the flat statement stream."""

    def __init__(self, rng: Range) -> None:
        self.range = rng


def _parse_line(line: LineText, tokens: list[Token]) -> tuple[ast.Stmt | _End, Diagnostic | None]:
    first = tokens[0]
    rng = line.range(first.start, tokens[-1].end)
    kw = first.lower if first.kind == "ident" else ""
    if kw == "end":
        if len(tokens) > 1:
            extra = tokens[1]
            return _End(rng), make("TL003", line.range(extra.start, tokens[-1].end),
                                   f"expected end of line after `end`, found `{extra.text}`")
        return _End(rng), None
    if kw not in _PARSERS:
        close = difflib.get_close_matches(kw or first.text.lower(), STATEMENT_KEYWORDS, n=1, cutoff=0.6)
        hint = f"; did you mean `{close[0].capitalize()}`?" if close else ""
        code = "TL001" if first.kind == "bad" else "TL002"
        msg = (f"unexpected character `{first.text}`" if first.kind == "bad"
               else f"unknown statement `{first.text}`{hint}")
        text = line.text[first.start:tokens[-1].end]
        return ast.ErrorStmt(rng, text), make(code, line.range(first.start, first.end), msg)
    crossing = scan_line(tokens)
    if crossing is not None:  # too long or too deeply bracketed for the recursive expression parser
        tok = crossing.token
        text = line.text[first.start : tokens[-1].end]
        return ast.ErrorStmt(rng, text), make(crossing.code, line.range(tok.start, tok.end), crossing.message)
    node = _new_node(kw, rng)
    cursor = _Cursor(line, tokens)
    cursor.next()
    try:
        _PARSERS[kw](cursor, node)  # type: ignore[operator]
    except _Error as err:
        return node, err.diagnostic
    return node, None


def parse(text: str) -> tuple[ast.Document, list[Diagnostic]]:
    """Parse TL text into a document and its syntax diagnostics. Never raises."""
    diagnostics: list[Diagnostic] = []
    comments: list[ast.Comment] = []
    raw_lines = split_lines(text)
    root: list[ast.Stmt] = []
    stack: list[ast.ForStmt] = []
    flattened = 0  # `for` lines past MAX_FOR_DEPTH still open: kept as text, their `end`s close nothing
    chars = 0

    for number, raw in enumerate(raw_lines):
        chars += len(raw) + 1
        if number >= MAX_LINES or chars > MAX_CHARS:
            # on the line's text (its first character to its last), where the unread part begins
            line = LineText(number, raw)
            lead = len(raw) - len(raw.lstrip())
            at = line.range(lead, max(lead, len(raw.rstrip())))
            diagnostics.append(make("TL093", at, document_message(number, chars)))
            break
        line = LineText(number, raw)
        tokens, comment_at = lex_line(line)
        if comment_at is not None:
            comments.append(ast.Comment(raw[comment_at:].rstrip(), line.range(comment_at, len(raw.rstrip())),
                                        trailing=bool(tokens)))
        if not tokens:
            continue
        stmt, diag = _parse_line(line, tokens)
        if diag is not None:
            diagnostics.append(diag)
        body = stack[-1].body if stack else root
        if isinstance(stmt, _End):
            if flattened:
                flattened -= 1
            elif stack:
                stack.pop().end_range = stmt.range
            else:
                diagnostics.append(make("TL005", stmt.range, "`end` without a matching `for`"))
            continue
        if isinstance(stmt, ast.ForStmt) and (flattened or len(stack) >= MAX_FOR_DEPTH):
            if not flattened:  # reported once, where the depth is first crossed
                diagnostics.append(
                    make("TL092", line.range(tokens[0].start, tokens[0].end), for_depth_message(len(stack)))
                )
            flattened += 1
            stmt = ast.ErrorStmt(stmt.range, line.text[tokens[0].start : tokens[-1].end])
        body.append(stmt)
        if isinstance(stmt, ast.ForStmt):
            stack.append(stmt)

    for loop in stack:
        var = loop.var.name if loop.var else "…"
        msg = f"`for {var}` is never closed; add `end` after its body"
        diagnostics.append(make("TL004", loop.range, msg))
    doc = ast.Document(text=text, statements=root, comments=comments, line_count=len(raw_lines))
    return doc, diagnostics
