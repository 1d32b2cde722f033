"""The translator's one error type: diagnostics (TL501 and friends) on the TL statements at fault."""

from __future__ import annotations

from tl_language.diagnostics import Diagnostic, make
from tl_language.source import Range


class TranslateError(Exception):
    """The document has errors, or uses a pattern no backend can translate. Never a traceback for users:
    every diagnostic carries a code, the range of the offending TL statement and what would work."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        self.diagnostics = list(diagnostics)
        first = self.diagnostics[0] if self.diagnostics else None
        where = f"{first.range.start.line + 1}:{first.range.start.character + 1}: " if first else ""
        super().__init__(f"{where}{first.code} {first.message}" if first else "translation failed")


def unsupported(range: Range, message: str) -> Diagnostic:
    return make("TL501", range, message)
