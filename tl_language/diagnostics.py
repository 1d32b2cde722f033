"""Diagnostics, fixes and text edits: the one currency of every check in the language core."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from tl_language.source import Range


class Severity(IntEnum):
    # Values match LSP's DiagnosticSeverity so the server converts with a cast.
    ERROR = 1
    WARNING = 2
    INFORMATION = 3
    HINT = 4

    @property
    def label(self) -> str:
        return {1: "error", 2: "warning", 3: "info", 4: "hint"}[self.value]


@dataclass(frozen=True, slots=True)
class TextEdit:
    range: Range
    new_text: str

    def to_json(self) -> dict[str, Any]:
        return {"range": self.range.to_json(), "newText": self.new_text}


@dataclass(frozen=True, slots=True)
class Fix:
    title: str
    edits: tuple[TextEdit, ...]

    def to_json(self) -> dict[str, Any]:
        return {"title": self.title, "edits": [e.to_json() for e in self.edits]}


@dataclass(frozen=True, slots=True)
class Diagnostic:
    code: str
    severity: Severity
    range: Range
    message: str
    fixes: tuple[Fix, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity.label,
            "range": self.range.to_json(),
            "message": self.message,
            "fixes": [f.to_json() for f in self.fixes],
        }


def make(
    code: str,
    range: Range,
    message: str,
    *,
    severity: Severity | None = None,
    fixes: tuple[Fix, ...] = (),
) -> Diagnostic:
    """Build a diagnostic whose severity defaults to the registry's for `code`."""
    from tl_language.codes import CODES

    sev = severity if severity is not None else CODES[code].severity
    return Diagnostic(code=code, severity=sev, range=range, message=message, fixes=fixes)
