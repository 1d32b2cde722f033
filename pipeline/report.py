"""Human-readable reports of build failures: `file:line:col: error CODE: message`, with the TL line shown.

NVRTC errors that `#line` directives (or the source map) put on a TL line are shown as TL502 on that line;
errors inside headers or unmapped generated lines keep NVRTC's own location.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.build import BuildError
from runner.nvrtc_log import LogRecord
from tl_language.diagnostics import Diagnostic


def _snippet(text: str, line0: int, col0: int = 0, width: int = 1) -> list[str]:
    lines = text.splitlines()
    if not 0 <= line0 < len(lines):
        return []
    src = lines[line0]
    return [f"    {src}", "    " + " " * col0 + "^" * max(1, width)]


def format_diagnostic(path: Path, d: Diagnostic, text: str) -> str:
    start, end = d.range.start, d.range.end
    width = end.character - start.character if end.line == start.line else 1
    head = f"{path}:{start.line + 1}:{start.character + 1}: {d.severity.label} {d.code}: {d.message}"
    return "\n".join([head, *_snippet(text, start.line, start.character, width)])


def format_record(r: LogRecord, tl_path: Path, text: str) -> str:
    if r.is_tl and text and Path(r.file).name == tl_path.name:
        tl_lines = text.splitlines()
        shown = [f"    {tl_lines[r.line - 1]}"] if 0 < r.line <= len(tl_lines) else []
        # NVRTC's own excerpt is the generated CUDA of that TL statement: show it too, it says what failed.
        return "\n".join(
            [
                f"{tl_path}:{r.line}: {r.severity} TL502: {r.message}",
                *shown,
                *(f"      | {c}" for c in r.context[:3]),
            ]
        )
    return "\n".join([f"{r.file}:{r.line}: {r.severity}: {r.message}", *(f"    {c}" for c in r.context[:4])])


def format_build_error(err: BuildError, *, max_records: int = 20) -> str:
    if err.diagnostics:
        out = [format_diagnostic(err.path, d, err.text) for d in err.diagnostics]
        return "\n".join(out)
    if err.compile_error is not None:
        ce = err.compile_error
        recs = ce.errors or ce.records
        out = [
            f"{err.path}: error TL502: NVRTC could not compile the generated CUDA ({ce.options.get('arch')})"
        ]
        out += [format_record(r, err.path, err.text) for r in recs[:max_records]]
        if len(recs) > max_records:
            out.append(f"... {len(recs) - max_records} more; the full NVRTC log follows")
        if not recs or len(recs) > max_records:
            out.append(ce.log)
        return "\n".join(out)
    return f"{err.path}: error: {err.message}"
