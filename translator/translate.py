"""`translate`: checked document → `Translation` (source, launch spec, source map, plan)."""

from __future__ import annotations

from dataclasses import dataclass

from runner.abi import LaunchSpec
from tl_language.analysis import Analysis
from tl_language.diagnostics import Severity
from translator.backends import backend_for
from translator.errors import TranslateError
from translator.plan import KernelPlan, make_plan


@dataclass(frozen=True)
class Translation:
    source: str  # the whole .cu: `extern "C" __global__` entry named launch.kernel_name
    launch: LaunchSpec
    source_map: dict[int, int]  # CUDA line → TL line, both 1-based
    plan: KernelPlan


def translate(analysis: Analysis, *, tl_path: str | None = None, line_directives: bool = True) -> Translation:
    """Translate a checked TL document. Raises TranslateError with the document's own errors, or with
    TL501 on the statement whose pattern no backend translates.

    `line_directives` puts `#line N "file.tl"` before every line that comes from a TL statement (needs
    `tl_path`); without it the source is plain and `source_map` alone maps lines back.
    """
    errors = [d for d in analysis.diagnostics if d.severity == Severity.ERROR]
    if errors:
        raise TranslateError(errors)
    plan = make_plan(analysis.model, analysis.text)
    generate = backend_for(plan)
    source, source_map, launch = generate(plan, tl_file=tl_path, line_directives=line_directives)
    return Translation(source=source, launch=launch, source_map=source_map, plan=plan)
