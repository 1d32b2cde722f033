""" "Complete sketch" in the editor: the deterministic stage 2 (`translator.planner.sketch.complete_sketch`,
as `tl complete`) as line edits of the open document, for the code action, the command and the completion
item that runs it. The planner is optional: without the translator package nothing is offered."""

from __future__ import annotations

import bisect
import difflib
import logging

from lsprotocol import types as lsp

from tl_language import Analysis
from tl_language.codes import SKETCH_CODES
from tl_language.source import LineText, split_lines

log = logging.getLogger(__name__)

TITLE = "TL: Complete sketch (stage 2: Allocates, tiles, coordinates, loop bound, Params)"
COMMAND = "tl.completeSketch"


def is_sketch(analysis: Analysis) -> bool:
    """A document stage 2 has something to add to: holes, missing tiles or statement-level parts."""
    return analysis.model.is_sketch or any(d.code in SKETCH_CODES for d in analysis.diagnostics)


def completion_edits(analysis: Analysis, default_target: str | None = None) -> list[lsp.TextEdit] | None:
    """The edits that turn the document into TL code, or None when nothing is offered (not a sketch, the
    planner is absent, or stage 2 does not recognise the attention forward)."""
    if not is_sketch(analysis):
        return None
    try:
        from translator.planner.sketch import complete_sketch
    except ImportError as exc:
        log.info("planner unavailable (%s): no sketch completion", exc)
        return None
    target = None if analysis.model.target_explicit else default_target
    result = complete_sketch(analysis.text, target=target)
    if not result.recognised or result.text == analysis.text:
        return None
    return line_edits(analysis.text, result.text)


def line_edits(old: str, new: str) -> list[lsp.TextEdit]:
    """Edits replacing only the lines that differ (so the cursor and the untouched lines stay put).

    Each differing run of lines is a span of the old text and the new text it becomes; runs that touch
    (an insertion at the very end next to another change, an empty document) are merged into one edit, so
    no two edits share a position and the order of applying them does not matter."""
    a, b = split_lines(old), split_lines(new)
    old_text, new_text = "\n".join(a), "\n".join(b)

    def starts(lines: list[str]) -> list[int]:
        out = [0]
        for line in lines:
            out.append(out[-1] + len(line) + 1)
        return out

    sa, sb = starts(a), starts(b)
    spans: list[list[int]] = []  # [old start, old end, new start, new end] in characters
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        oa, ob = sa[i1], (sa[i2] if i2 < len(a) else len(old_text))
        na, nb = sb[j1], (sb[j2] if j2 < len(b) else len(new_text))
        if i1 == len(a):  # lines added after the last one: after its end, with the newline before them
            oa, na = len(old_text), sb[j1] - 1
        elif j1 == len(b):  # the last lines removed: with the newline before them
            oa, na = sa[i1] - 1, len(new_text)
        if spans and spans[-1][1] >= oa:
            spans[-1][1], spans[-1][3] = max(spans[-1][1], ob), nb
        else:
            spans.append([oa, ob, na, nb])
    line_of = LineOffsets(a)
    return [
        lsp.TextEdit(range=lsp.Range(start=line_of(oa), end=line_of(ob)), new_text=new_text[na:nb])
        for oa, ob, na, nb in spans
    ]


class LineOffsets:
    """Character offset in the lines joined by newlines → (line, UTF-16 column)."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.starts = [0]
        for line in lines:
            self.starts.append(self.starts[-1] + len(line) + 1)

    def __call__(self, offset: int) -> lsp.Position:
        n = max(0, bisect.bisect_right(self.starts, offset) - 1)
        n = min(n, len(self.lines) - 1)
        line = LineText(n, self.lines[n])
        return lsp.Position(line=n, character=line.col(offset - self.starts[n]))
