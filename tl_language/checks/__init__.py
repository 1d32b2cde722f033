"""The checker: one rule per module, each a function `(document, model) -> Iterable[Diagnostic]`.

Add a rule by writing `tl_language/checks/<rule>.py` with a `check` function and listing it in RULES.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tl_language import syntax as ast
from tl_language.diagnostics import Diagnostic
from tl_language.model import Model

Rule = Callable[[ast.Document, Model], Iterable[Diagnostic]]

RULES: list[Rule] = []


def run_checks(document: ast.Document, model: Model) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for rule in RULES:
        out.extend(rule(document, model))
    return out
