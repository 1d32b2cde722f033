"""Find the TL in a model's answer: fenced code, or the statement lines inside prose.

Never raises. What comes back may still be wrong or cut short; the repair loop's checker says how.
"""

from __future__ import annotations

import re

from tl_language.parser import STATEMENT_KEYWORDS

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
# Words a TL line may start with (statements, loops, comments); prose lines start with anything else.
_STARTS = set(STATEMENT_KEYWORDS)


def _is_tl_line(line: str) -> bool:
    stripped = line.strip()
    if not stripped:
        return True
    if stripped.startswith("#"):
        return True
    word = stripped.split()[0].lower()
    return word in _STARTS


def extract_tl(answer: str) -> str:
    """The TL text of an answer (fenced block preferred; `tl`/untagged fences over other languages)."""
    text = answer.replace("\r\n", "\n")
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    if blocks:
        preferred = [b for lang, b in blocks if lang in ("tl", "")] or [b for _, b in blocks]
        # Several TL fences: the longest is the kernel, the rest are usually fragments quoted in prose.
        return _trim(max(preferred, key=lambda b: _weight(b.split("\n"))))
    # No fence: keep the longest run of TL-looking lines (prose before and after is dropped).
    best: list[str] = []
    run: list[str] = []
    for line in text.split("\n"):
        if _is_tl_line(line):
            run.append(line)
        else:
            if _weight(run) > _weight(best):
                best = run
            run = []
    if _weight(run) > _weight(best):
        best = run
    return _trim("\n".join(best))


def _weight(lines: list[str]) -> int:
    """Statement lines in a run (blank lines and comments do not count)."""
    return sum(1 for x in lines if x.strip() and not x.strip().startswith("#") and _is_tl_line(x))


def _trim(body: str) -> str:
    lines = body.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(line.rstrip() for line in lines) + ("\n" if lines else "")
