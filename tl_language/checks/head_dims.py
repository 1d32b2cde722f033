"""TL302: head dimensions are ones the generated kernels support (`gpu.HEAD_DIMS`)."""

from __future__ import annotations

from collections.abc import Iterator

from tl_language import gpu
from tl_language import syntax as ast
from tl_language.diagnostics import Diagnostic, make
from tl_language.model import Model

_ROLE = {"d": "head dimension", "d_qk": "QK head dimension", "d_v": "V head dimension"}


def check(document: ast.Document, model: Model) -> Iterator[Diagnostic]:
    supported = ", ".join(str(d) for d in gpu.HEAD_DIMS)
    for name, role in _ROLE.items():
        p = model.params.get(name)
        if p is None or p.value is None or p.value in gpu.HEAD_DIMS:
            continue
        rng = p.stmt.value.range if p.stmt.value is not None else p.ident.range
        yield make("TL302", rng, f"{role} {name} = {p.value} is not supported; supported: {supported}")
