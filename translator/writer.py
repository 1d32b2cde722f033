"""A small code writer: lines, an indentation context manager, and the TL line each line came from.

Emitters write C++ through `CodeWriter.line` inside `with w.tl(step):` (tags the block with its TL line)
and `with w.block("for (…)"):` (braces and indentation), never through big format strings. `render`
produces the source, the source map (CUDA line → TL line, 1-based) and, optionally, `#line` directives.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

INDENT = "  "


@dataclass(frozen=True, slots=True)
class Line:
    text: str  # without indentation
    depth: int
    tl_line: int | None  # None: scaffolding (includes, traits, helpers)


class CodeWriter:
    def __init__(self) -> None:
        self._lines: list[Line] = []
        self._depth = 0
        self._tl: int | None = None

    def line(self, text: str = "") -> None:
        self._lines.append(Line(text, self._depth if text else 0, self._tl if text else None))

    def lines(self, *texts: str) -> None:
        for t in texts:
            self.line(t)

    def comment(self, text: str) -> None:
        self.line(f"// {text}")

    @contextmanager
    def indent(self) -> Iterator[None]:
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1

    @contextmanager
    def block(self, header: str, closer: str = "}") -> Iterator[None]:
        """`header {` … `closer`, the body indented one level."""
        self.line(f"{header} {{")
        with self.indent():
            yield
        self.line(closer)

    @contextmanager
    def tl(self, tl_line: int | None, what: str = "") -> Iterator[None]:
        """Lines written inside come from TL line `tl_line`; the block opens with a `// TL:n  …` tag."""
        outer = self._tl
        if tl_line is not None and what:
            self._tl = None
            self.comment(f"TL:{tl_line}  {what}")
        self._tl = tl_line if tl_line is not None else outer
        try:
            yield
        finally:
            self._tl = outer

    def render(
        self, *, tl_file: str | None = None, cu_file: str = "kernel.cu", line_directives: bool = True
    ) -> tuple[str, dict[int, int]]:
        """Source text and its map from CUDA line to TL line (1-based).

        With `line_directives`, every code line that comes from a TL statement is preceded by
        `#line N "file.tl"` (one per line: `#line` numbers the following lines consecutively, and a block
        of C++ comes from one TL line), and the numbering returns to the `.cu` file after the block, so
        NVRTC errors and profiles point at the TL statement and everything else at the `.cu` line.
        """
        out: list[str] = []
        smap: dict[int, int] = {}
        in_tl = False
        directives = line_directives and tl_file is not None
        for ln in self._lines:
            code = ln.tl_line is not None and not ln.text.startswith("//")
            if directives and code:
                out.append(f'#line {ln.tl_line} "{tl_file}"')
                in_tl = True
            elif directives and in_tl:
                out.append(f'#line {len(out) + 2} "{cu_file}"')
                in_tl = False
            out.append(f"{INDENT * ln.depth}{ln.text}" if ln.text else "")
            if ln.tl_line is not None:
                smap[len(out)] = ln.tl_line
        return "\n".join(out) + "\n", smap
