"""Render the prompts in `prompts/*.md`: the TL spec, the target's facts, worked examples, diagnostics.

Templates use `{{name}}` placeholders (not str.format) because TL examples are full of braces-free text
but CUDA-minded models answer with braces, and a stray brace must never break rendering.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from pathlib import Path

from tl_language import gpu
from tl_language.diagnostics import Diagnostic, Severity

PROMPTS = Path(__file__).parent / "prompts"
REPO = Path(__file__).resolve().parents[2]
# The example files shown to the model, in order of usefulness (the sketch shows the stage-1a shape).
EXAMPLES = ("mha_fwd.tl", "causal_mha_fwd.tl", "gqa_fwd.tl", "mla_fwd.tl")


@functools.cache
def template(name: str) -> str:
    return (PROMPTS / f"{name}.md").read_text(encoding="utf-8")


def render(name: str, **values: str) -> str:
    def sub(m: re.Match[str]) -> str:
        key = m.group(1)
        if key not in values:
            raise KeyError(f"prompt {name}.md needs `{key}`")
        return values[key]

    return re.sub(r"\{\{(\w+)\}\}", sub, template(name))


def spec() -> str:
    """docs/language.md when the checkout has it (the full reference), else the compact spec."""
    doc = REPO / "docs" / "language.md"
    if doc.is_file():
        return doc.read_text(encoding="utf-8").strip()
    return template("spec").strip()


def target_facts(arch: str) -> str:
    t = gpu.TARGETS.get(arch) or gpu.TARGETS[gpu.DEFAULT_TARGET]
    mma = ", ".join(f"{dt}: {shape}" for dt, shape in t.mma.items())
    parts = ", ".join(f"{p.name} ({p.sms} SMs)" for p in t.parts)
    return "\n".join(
        [
            f"- compute capability {t.compute_capability[0]}.{t.compute_capability[1]}; parts: {parts}",
            f"- shared memory per block: {t.smem_per_block // 1024} KiB (opt-in maximum); per SM "
            f"{t.smem_per_sm // 1024} KiB",
            f"- registers: {t.regs_per_thread} per thread, {t.regs_per_sm} per SM; "
            f"at most {t.max_threads_per_block} threads per block",
            f"- tensor-core input dtypes: {', '.join(t.dtypes)}; warp MMA shapes: {mma}",
            f"- cp.async: {'yes' if t.cp_async else 'no'}; ldmatrix: {'yes' if t.ldmatrix else 'no'}; "
            f"TMA/wgmma: {'yes' if t.tma else 'no'}",
            f"- supported head dimensions: {', '.join(str(d) for d in gpu.HEAD_DIMS)}",
        ]
    )


def _example(name: str) -> str | None:
    path = REPO / "examples" / name
    return path.read_text(encoding="utf-8").strip() if path.is_file() else None


def examples(fallback: str) -> str:
    """The bundled examples as fenced blocks; `fallback` (a rendered template) when none is present."""
    found = [(n, text) for n in EXAMPLES if (text := _example(n))]
    if not found:
        found = [("example.tl", fallback.strip())]
    return "\n\n".join(f"{n}:\n```tl\n{text}\n```" for n, text in found)


def sketch_example(fallback: str) -> str:
    return _example("sketch_fwd.tl") or fallback.strip()


def diagnostic_lines(diagnostics: list[Diagnostic], problems: Sequence[str] = ()) -> str:
    """`line N: CODE message`, errors first, information (holes) last; answer-level problems on top."""
    order = sorted(diagnostics, key=lambda d: (d.severity, d.range.start))
    lines = [f"- {p}" for p in problems]
    lines += [
        f"- line {d.range.start.line + 1}: {d.code} {d.severity.label}: {d.message}"
        for d in order
        if d.severity <= Severity.INFORMATION
    ]
    return "\n".join(lines) if lines else "- (none)"
