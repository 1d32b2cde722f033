"""One call from text to everything the tools need: tree, model, diagnostics (syntax first, then checks)."""

from __future__ import annotations

from dataclasses import dataclass

from tl_language import syntax as ast
from tl_language.binder import build_model
from tl_language.diagnostics import Diagnostic, Severity
from tl_language.model import Model
from tl_language.parser import parse


@dataclass(slots=True)
class Analysis:
    text: str
    document: ast.Document
    model: Model
    diagnostics: list[Diagnostic]

    @property
    def has_errors(self) -> bool:
        from tl_language.diagnostics import Severity

        return any(d.severity == Severity.ERROR for d in self.diagnostics)


def analyze(text: str) -> Analysis:
    """Parse, bind and check `text`. Never raises."""
    from tl_language.checks import run_checks

    document, diagnostics = parse(text)
    model = build_model(document)
    syntax_errors = any(d.severity == Severity.ERROR for d in diagnostics)
    diagnostics = diagnostics + run_checks(document, model, syntax_errors=syntax_errors)
    diagnostics.sort(key=lambda d: (d.range.start, d.code))
    return Analysis(text=text, document=document, model=model, diagnostics=diagnostics)
