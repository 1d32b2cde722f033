"""TL129: `with learnable` marks a side tensor whose gradient the backward computes; it must be one.

Only a float32 side tensor (a global Allocate that no Copy moves) can be learnable: Q, K, V and O have
their gradients anyway, an int32 tensor (document ids, flags) has none, and a tensor in shared memory or
registers is not a parameter of the model.
"""

from __future__ import annotations

from collections.abc import Iterator

from tl_language import syntax as ast
from tl_language.diagnostics import Diagnostic, make
from tl_language.model import Model


def check(document: ast.Document, model: Model) -> Iterator[Diagnostic]:
    side = model.side_tensors()
    for stmt in model.statements:
        if not isinstance(stmt, ast.AllocateStmt) or stmt.learnable is None or stmt.name is None:
            continue
        name = stmt.name.name
        level = stmt.level.name.lower() if stmt.level else ""
        if level != "global" or name not in side:
            yield make(
                "TL129",
                stmt.learnable,
                f"`{name}` is not a side tensor (a global Allocate no Copy moves): "
                "only those can be learnable",
            )
        elif stmt.dtype is not None and stmt.dtype.name.lower() != "float32":
            yield make(
                "TL129",
                stmt.learnable,
                f"side tensor `{name}` is {stmt.dtype.name.lower()}: "
                "only float32 side tensors have gradients",
            )
