"""`format_text`: the canonical layout of a TL document.

Canonical keyword case (`Allocate`, `Copy … from global to shared`, `Compute GEMM … and get new X`,
lowercase `for … end`), operations in their table spelling, lowercase levels/targets/dtypes/masks,
4 spaces per loop depth, single spaces, `(a, b)` tuples. Comments stay: a trailing comment keeps its
column when the code still fits before it (two spaces at least); comment-only lines follow the loop
depth. Runs of more than two blank lines collapse to two. A line that does not parse is kept verbatim,
so formatting never loses text. Idempotent: `format_text(format_text(t)) == format_text(t)`.
"""

from __future__ import annotations

from tl_language import gpu
from tl_language import syntax as ast
from tl_language.lexer import lex_line
from tl_language.limits import MAX_FOR_DEPTH
from tl_language.ops import op
from tl_language.parser import _End, _parse_line
from tl_language.source import LineText, split_lines

INDENT = "    "  # per loop depth, up to MAX_FOR_DEPTH (deeper loops are TL092 and indent no further)
_MIN_GAP = 2  # spaces between code and a trailing comment


def _e(e: ast.Expr | None) -> str:
    return ast.expr_text(e)


def _tuple(items: list[ast.Expr]) -> str:
    return "(" + ", ".join(_e(x) for x in items) + ")"


def _low(ident: ast.Ident | None) -> str:
    return ident.name.lower() if ident else "…"


def _render(stmt: ast.Stmt) -> str | None:
    """Canonical text of a fully parsed statement (None: keep the line as written)."""
    if isinstance(stmt, ast.KernelStmt) and stmt.name:
        return f"Kernel {stmt.name.name}"
    if isinstance(stmt, ast.TargetStmt) and stmt.arch:
        arch = stmt.arch.name.lower() if gpu.target(stmt.arch.name) else stmt.arch.name
        return f"Target {arch}"
    if isinstance(stmt, ast.DtypeStmt) and stmt.dtype:
        dt = stmt.dtype.name.lower() if stmt.dtype.name.lower() in gpu.DTYPES else stmt.dtype.name
        return f"Dtype {dt}"
    if isinstance(stmt, ast.ParamStmt) and stmt.name:
        return f"Param {stmt.name.name} = {_e(stmt.value)}"
    if isinstance(stmt, ast.ScalarStmt) and stmt.name:
        return f"Scalar {stmt.name.name} = {_e(stmt.value)}"
    if isinstance(stmt, ast.MaskStmt) and stmt.kind:
        return f"Mask {_low(stmt.kind)}" + (_tuple(stmt.args) if stmt.args else "")
    if isinstance(stmt, ast.AllocateStmt) and stmt.name and stmt.shape is not None:
        text = f"Allocate {stmt.name.name} in {_low(stmt.level)} {_tuple(stmt.shape)}"
        text += f" with offset {_e(stmt.offset)}" if stmt.offset is not None else ""
        text += f" with dtype {stmt.dtype.name.lower()}" if stmt.dtype is not None else ""
        return text + (" with learnable" if stmt.learnable is not None else "")
    if isinstance(stmt, ast.CopyStmt) and stmt.name:
        parts = [f"Copy {stmt.name.name}"]
        if stmt.tile is not None:
            parts.append(_tuple(stmt.tile))
        if stmt.coordinate is not None:
            parts.append(f"in coordinate [{stmt.coordinate.axis.name} = {_e(stmt.coordinate.value)}]")
        parts.append(f"from {_low(stmt.src)} to {_low(stmt.dst)}")
        if stmt.alias is not None:
            parts.append(f"as {stmt.alias.name}")
        return " ".join(parts)
    if isinstance(stmt, ast.ComputeStmt) and stmt.op:
        spec = op(stmt.op.name)
        text = f"Compute {spec.name if spec else stmt.op.name} " + ", ".join(_e(a) for a in stmt.args)
        if stmt.result is None:
            return text
        clause = {"get": "and get", "get_new": "and get new", "accumulate": "and accumulate"}[stmt.mode]
        return f"{text} {clause} {stmt.result.name}"
    if isinstance(stmt, ast.ReshapeStmt) and stmt.name and stmt.src_layout and stmt.dst_layout:
        src = ", ".join(i.name for i in stmt.src_layout)
        dst = ", ".join(i.name for i in stmt.dst_layout)
        return f"Reshape {stmt.name.name} from ({src}) to ({dst})"
    if isinstance(stmt, ast.ForStmt) and stmt.var:
        return f"for {stmt.var.name} = {_e(stmt.start)}: {_e(stmt.stop)}"
    return None


def _with_comment(code: str, comment: str, old_col: int) -> str:
    if not code:
        return comment
    col = old_col if old_col >= len(code) + _MIN_GAP else len(code) + _MIN_GAP
    return code + " " * (col - len(code)) + comment


def format_text(text: str) -> str:
    """Format a TL document. Never raises; never drops a character that is not layout."""
    bom = "\ufeff" if text.startswith("\ufeff") else ""
    body = text[len(bom) :]
    out: list[str] = []
    depth = 0
    blank_run = 0

    def blank() -> None:
        nonlocal blank_run
        blank_run += 1
        if blank_run <= 2:
            out.append("")

    for number, raw in enumerate(split_lines(body)):
        line = LineText(number, raw)
        tokens, comment_at = lex_line(line)
        if not tokens:
            if comment_at is None:
                blank()
                continue
            blank_run = 0
            out.append(INDENT * min(depth, MAX_FOR_DEPTH) + raw[comment_at:].rstrip())
            continue
        kw = tokens[0].lower if tokens[0].kind == "ident" else ""
        if kw == "end":
            depth = max(0, depth - 1)
        stmt, diag = _parse_line(line, tokens)
        rendered = "end" if isinstance(stmt, _End) and diag is None else None
        if diag is None and not isinstance(stmt, _End):
            rendered = _render(stmt)
        if rendered is None:
            kept = raw.rstrip()  # keep a broken line as written
            if not kept:  # only characters Python strips but the lexer does not (e.g. \x1f): blank
                blank()
                continue
            out.append(kept)
        elif comment_at is not None:
            code = INDENT * min(depth, MAX_FOR_DEPTH) + rendered
            out.append(_with_comment(code, raw[comment_at:].rstrip(), comment_at))
        else:
            out.append(INDENT * min(depth, MAX_FOR_DEPTH) + rendered)
        blank_run = 0
        if kw == "for":
            depth += 1
    while out and out[-1] == "":
        out.pop()
    return bom + "\n".join(out) + "\n" if out else bom
