"""TL050–TL053: the header statements (Target, Dtype, Mask) name known things, each at most once."""

from __future__ import annotations

from collections.abc import Iterator

from tl_language import gpu
from tl_language import syntax as ast
from tl_language.checks._support import closest, replace_fix
from tl_language.diagnostics import Diagnostic, Fix, TextEdit, make
from tl_language.model import Model
from tl_language.source import Position, Range

DTYPE_ALIASES = {
    "float16": "fp16", "half": "fp16", "f16": "fp16", "bfloat16": "bf16", "bfloat": "bf16",
    "fp8": "fp8_e4m3", "e4m3": "fp8_e4m3", "float8_e4m3": "fp8_e4m3", "float8_e4m3fn": "fp8_e4m3",
}  # fmt: skip
MASKS = ("none", "causal", "window")


def _target_suggestion(word: str) -> str | None:
    w = word.lower().replace("-", "_")
    if w.isdigit():
        w = "sm_" + w
    elif w.startswith("sm") and not w.startswith("sm_"):
        w = "sm_" + w[2:]
    return w if w in gpu.TARGETS else closest(w, gpu.TARGETS)


def _delete_line(stmt: ast.Stmt) -> tuple[Fix, ...]:
    line = stmt.range.start.line
    return (Fix("Remove this line", (TextEdit(Range(Position(line, 0), Position(line + 1, 0)), ""),)),)


def check(document: ast.Document, model: Model) -> Iterator[Diagnostic]:
    seen: dict[type, ast.Stmt] = {}
    for stmt in document.statements:  # headers are top-level statements
        if isinstance(stmt, ast.KernelStmt | ast.TargetStmt | ast.DtypeStmt | ast.MaskStmt):
            first = seen.setdefault(type(stmt), stmt)
            if first is not stmt:
                word = type(stmt).__name__.removesuffix("Stmt")
                yield make("TL052", stmt.range,
                           f"`{word}` given twice; the first one (line {first.range.start.line + 1}) applies",
                           fixes=_delete_line(stmt))
        if isinstance(stmt, ast.TargetStmt) and stmt.arch is not None:
            if gpu.target(stmt.arch.name) is None:
                hint = _target_suggestion(stmt.arch.name)
                known = ", ".join(gpu.TARGETS)
                msg = f"unknown target `{stmt.arch.name}`; expected one of {known}"
                if hint:
                    msg += f"; did you mean `{hint}`?"
                yield make("TL050", stmt.arch.range, msg,
                           fixes=replace_fix(stmt.arch.range, hint) if hint else ())
        elif isinstance(stmt, ast.DtypeStmt) and stmt.dtype is not None:
            if stmt.dtype.name.lower() not in gpu.DTYPES:
                word = stmt.dtype.name.lower()
                hint = DTYPE_ALIASES.get(word) or closest(word, gpu.DTYPES)
                msg = f"unknown dtype `{stmt.dtype.name}`; expected one of {', '.join(gpu.DTYPES)}"
                if hint:
                    msg += f"; did you mean `{hint}`?"
                yield make("TL051", stmt.dtype.range, msg,
                           fixes=replace_fix(stmt.dtype.range, hint) if hint else ())
        elif isinstance(stmt, ast.MaskStmt) and stmt.kind is not None:
            yield from _mask(stmt, stmt.kind)


def _mask(stmt: ast.MaskStmt, ident: ast.Ident) -> Iterator[Diagnostic]:
    kind = ident.name.lower()
    if kind not in MASKS:
        hint = closest(kind, MASKS)
        msg = f"unknown mask `{ident.name}`; expected `none`, `causal` or `window(LEFT, RIGHT)`"
        if hint:
            msg += f"; did you mean `{hint}`?"
        yield make("TL053", ident.range, msg, fixes=replace_fix(ident.range, hint) if hint else ())
    elif kind == "window" and len(stmt.args) != 2:
        yield make("TL053", stmt.range,
                   f"`window` takes two sizes, `window(LEFT, RIGHT)`; found {len(stmt.args)}")
    elif kind != "window" and stmt.args:
        yield make("TL053", Range(stmt.args[0].range.start, stmt.args[-1].range.end),
                   f"`{kind}` takes no arguments; only `window(LEFT, RIGHT)` does")
