"""Open documents: text, version and the analysis of the latest version (analysed lazily, cached)."""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass, field
from typing import Any

from lsprotocol import types as lsp

from tl_language import Analysis, analyze, gpu
from tl_language.source import LineText, split_lines

log = logging.getLogger(__name__)


@dataclass
class JobDiagnostics:
    """Diagnostics from a worker job (TL501/502/503, worker failures), valid for one document version."""

    version: int
    items: list[lsp.Diagnostic]


@dataclass
class Doc:
    uri: str
    text: str
    version: int
    _analysis: Analysis | None = None
    _analysed_text: str | None = None
    _analysed_target: str | None = None
    job: JobDiagnostics | None = None
    result: dict[str, Any] | None = None  # the last verification / benchmark result (code lens)
    # The same two for the derived backward's jobs (the lens's ∇ line), kept apart so neither hides the other.
    backward_job: JobDiagnostics | None = None
    backward_result: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def analysis(self, default_target: str = gpu.DEFAULT_TARGET) -> Analysis:
        if (
            self._analysis is None
            or self._analysed_text is not self.text
            or self._analysed_target != default_target
        ):
            self._analysis = analyze_with_target(self.text, default_target)
            self._analysed_text = self.text
            self._analysed_target = default_target
        return self._analysis

    def lines(self) -> list[str]:
        return split_lines(self.text)


def _accepts_default_target() -> bool:
    try:
        return "default_target" in inspect.signature(analyze).parameters
    except (TypeError, ValueError):
        return False


_ANALYZE_TAKES_TARGET = _accepts_default_target()


def analyze_with_target(text: str, default_target: str) -> Analysis:
    """Analyse; a document without `Target` gets the `tl.target` setting when the core supports it.

    Without core support the model's target is still set (hover, inlay hints, translation see it), but
    checks have run against the core's default.
    """
    if _ANALYZE_TAKES_TARGET:
        return analyze(text, default_target=default_target)  # type: ignore[call-arg]
    a = analyze(text)
    t = gpu.target(default_target)
    if not a.model.target_explicit and t is not None:
        a.model.target = t
    return a


def apply_change(text: str, change: lsp.TextDocumentContentChangeEvent) -> str:
    """Apply one content change (whole document or a UTF-16 ranged edit) to `text`."""
    rng = getattr(change, "range", None)
    if rng is None:
        return change.text
    lines = split_lines(text)
    # Offsets of each line start in `text` as split (line endings normalised to \n by split_lines).
    norm = "\n".join(lines)

    def offset(p: lsp.Position) -> int:
        line = min(max(p.line, 0), len(lines))
        if line >= len(lines):
            return len(norm)
        start = sum(len(s) + 1 for s in lines[:line])
        return start + LineText(line, lines[line]).index(p.character)

    a, b = offset(rng.start), offset(rng.end)
    if b < a:
        a, b = b, a
    return norm[:a] + change.text + norm[b:]


class Documents:
    def __init__(self) -> None:
        self._docs: dict[str, Doc] = {}

    def open(self, uri: str, text: str, version: int) -> Doc:
        doc = Doc(uri, text, version)
        self._docs[uri] = doc
        return doc

    def get(self, uri: str) -> Doc | None:
        return self._docs.get(uri)

    def close(self, uri: str) -> Doc | None:
        return self._docs.pop(uri, None)

    def change(self, uri: str, version: int, changes: list[lsp.TextDocumentContentChangeEvent]) -> Doc | None:
        """Apply changes; a version older than (or equal to) the one held is dropped (out-of-order client)."""
        doc = self._docs.get(uri)
        if doc is None:
            return None
        if version is not None and version <= doc.version:
            log.warning("dropping change to %s: version %s is not newer than %s", uri, version, doc.version)
            return None
        text = doc.text
        for ch in changes:
            text = apply_change(text, ch)
        doc.text, doc.version = text, version
        return doc

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(list(self._docs.values()))
