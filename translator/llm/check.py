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
from tl_language.codes import SKETCH_CODES
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
        """What stage 2 still has to add: `?` values, tiles, and a sketch's other missing parts."""
        return sum(d.code in SKETCH_CODES for d in self.diagnostics)

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


_TL_NAME = "generated.tl"


def _line_range(line_1based: int, text: str) -> Range:
    lines = text.split("\n")
    n = max(0, min(line_1based - 1, len(lines) - 1))
    return Range.of(n, 0, len(lines[n]) if lines else 0)


def compile_stage(analysis: Analysis) -> list[Diagnostic]:
    """TL502 for each NVRTC error, on the TL line the `#line` directives name (line 1 when none does).

    Slow (a CuTe attention kernel takes tens of seconds), so the CLI runs it only with --compile."""
    from runner.compile import CompileError, compile_source
    from translator import TranslateError, translate

    try:
        t = translate(analysis, tl_path=_TL_NAME)
    except TranslateError as e:
        return list(e.diagnostics)
    try:
        compile_source(
            t.source, arch=t.launch.arch, name="generated.cu", source_map=t.source_map, tl_file=_TL_NAME
        )
    except CompileError as e:
        out = []
        for r in e.errors[:10]:
            line = r.line if r.file.endswith(".tl") else 1
            out.append(make("TL502", _line_range(line, analysis.text), f"CUDA compile error: {r.message}"))
        return out or [make("TL502", _whole_file(), f"CUDA compile error: {e.message}")]
    return []


def verify_stage(analysis: Analysis) -> list[Diagnostic]:
    """TL503 when the kernel's output differs from the float32 reference on the GPU (needs a device)."""
    from runner.compile import compile_source
    from runner.launch import NoDeviceError, load, require_device
    from runner.verify import Shape, verify
    from translator import TranslateError, translate

    try:
        device_arch = require_device()
    except NoDeviceError as e:
        raise ImportError(f"no CUDA device ({e})") from None
    try:
        t = translate(analysis, tl_path=_TL_NAME)
    except TranslateError as e:
        return list(e.diagnostics)
    compiled = compile_source(
        t.source,
        arch=t.launch.arch,
        device_arch=device_arch,
        name="generated.cu",
        source_map=t.source_map,
        tl_file=_TL_NAME,
    )
    spec = t.launch
    heads = max(4, spec.group or 1)
    result = verify(
        load(compiled, spec), Shape(1, heads, heads // spec.group if spec.group else heads, 513, 513)
    )
    if result.passed:
        return []
    failures = "; ".join(f for c in result.cases for f in c.failures)
    return [
        make("TL503", _whole_file(), f"verification against the float32 reference failed: {failures}"[:400])
    ]


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
        except ImportError as e:  # the translator or runner is absent, or there is no GPU
            result.skipped.append(f"{name}: {e}")
            continue
        except Exception as e:  # a tool that breaks must not break the repair loop
            result.skipped.append(f"{name}: could not run ({type(e).__name__}: {e})"[:300])
            continue
        result.diagnostics.extend(extra)
        if any(d.severity == Severity.ERROR for d in extra):
            break
    return result


def default_stages(
    *, translate: bool = True, compile: bool = False, verify: bool = False
) -> list[tuple[str, Stage]]:
    """The later levels to run, cheapest first. A level whose tools are absent is skipped and named."""
    out: list[tuple[str, Stage]] = []
    if translate:
        out.append(("translate", translate_stage))
    if compile:
        out.append(("compile", compile_stage))
    if verify:
        out.append(("verify", verify_stage))
    return out
