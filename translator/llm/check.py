"""Check one candidate TL text and score it, so the repair loop can say what is wrong and keep the best.

Levels, cheapest first: the language checker (always); the translator (when `translator.translate`
exists), whose `TranslateError` becomes TL501; NVRTC (when the runner is importable and `compile=True`),
whose errors become TL502 at the TL line the `#line` map gives; the GPU verification (when a device is
present and `verify=True`), whose mismatch becomes TL503. Every level that is absent is named in
`skipped`, so callers can say plainly what was not checked.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

from tl_language import analyze
from tl_language.analysis import Analysis
from tl_language.diagnostics import Diagnostic, Severity, make
from tl_language.source import Range

# A later level that runs after the checker passes: (analysis) -> extra diagnostics. Tests and the
# pipeline inject their own; the defaults below import the translator and runner lazily.
Stage = Callable[[Analysis], list[Diagnostic]]


@dataclass(slots=True)
class Checked:
    text: str
    diagnostics: list[Diagnostic]
    problems: list[str] = field(default_factory=list)  # answer-level: "no TL in the answer", "cut off"
    skipped: list[str] = field(default_factory=list)

    @property
    def errors(self) -> int:
        return len(self.problems) + sum(d.severity == Severity.ERROR for d in self.diagnostics)

    @property
    def warnings(self) -> int:
        return sum(d.severity == Severity.WARNING for d in self.diagnostics)

    @property
    def holes(self) -> int:
        return sum(d.code in ("TL450", "TL451") for d in self.diagnostics)

    def key(self, *, want_filled: bool) -> tuple[int, int, int, int]:
        """Smaller is better: some TL at all, then errors, then (for code) holes left, then warnings."""
        return (0 if self.text.strip() else 1, self.errors, self.holes if want_filled else 0, self.warnings)

    def acceptable(self, *, want_filled: bool) -> bool:
        return self.errors == 0 and (not want_filled or self.holes == 0)


def _whole_file() -> Range:
    return Range.of(0, 0, 0)


def translate_stage(analysis: Analysis) -> list[Diagnostic]:
    """TL501 when the translator rejects a checked document (its message names the pattern)."""
    mod = importlib.import_module("translator")
    translate = getattr(mod, "translate", None)
    error = getattr(mod, "TranslateError", Exception)
    if translate is None:
        raise ImportError("translator.translate is not available")
    try:
        translate(analysis)
    except error as e:
        diags = getattr(e, "diagnostics", None)
        if diags:
            return list(diags)
        rng = getattr(e, "range", None) or _whole_file()
        return [make("TL501", rng, str(e))]
    return []


def available_stages() -> dict[str, bool]:
    out = {}
    try:
        mod = importlib.import_module("translator")
        out["translate"] = hasattr(mod, "translate")
    except ImportError:
        out["translate"] = False
    return out


def check(
    text: str,
    *,
    answer_problems: list[str] | None = None,
    stages: list[tuple[str, Stage]] | None = None,
) -> Checked:
    """Analyze `text`; when it has no errors, run the later `stages` in order until one reports errors."""
    analysis = analyze(text)
    result = Checked(text, list(analysis.diagnostics), list(answer_problems or []))
    if not text.strip():
        result.problems.append("the answer contains no TL code")
    if result.errors or result.holes:
        return result  # later levels need a complete, valid document
    for name, stage in stages or []:
        try:
            extra = stage(analysis)
        except ImportError as e:
            result.skipped.append(f"{name}: {e}")
            continue
        result.diagnostics.extend(extra)
        if any(d.severity == Severity.ERROR for d in extra):
            break
    return result


def default_stages(*, translate: bool = True) -> list[tuple[str, Stage]]:
    return [("translate", translate_stage)] if translate else []
