"""TL305: the input dtype is one the target's tensor cores take (bf16 from sm_80, fp8 from sm_89)."""

from __future__ import annotations

from collections.abc import Iterator

from tl_language import gpu
from tl_language import syntax as ast
from tl_language.diagnostics import Diagnostic, make
from tl_language.model import Model


def _first_arch(dtype: str) -> str | None:
    return next((t.arch for t in gpu.TARGETS.values() if dtype in t.dtypes), None)


def check(document: ast.Document, model: Model) -> Iterator[Diagnostic]:
    if model.dtype in model.target.dtypes:
        return
    stmt = next((s for s in document.statements if isinstance(s, ast.DtypeStmt) and s.dtype), None)
    if stmt is None or stmt.dtype is None:
        return
    need = _first_arch(model.dtype)
    takes = ", ".join(model.target.dtypes)
    yield make("TL305", stmt.dtype.range,
               f"{model.dtype} needs {need} or newer; {model.target.arch} tensor cores take {takes}")
