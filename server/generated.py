"""Generated `.cu` files carry a last line `// tl-generated sha256=<hash of everything above>`, so the
server can tell a file it wrote (safe to overwrite) from one the user edited (ask first)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

_MARK = re.compile(r"\n// tl-generated sha256=([0-9a-f]{64})\n?$")


def stamp(source: str) -> str:
    body = source if source.endswith("\n") else source + "\n"
    return f"{body}// tl-generated sha256={hashlib.sha256(body.encode()).hexdigest()}\n"


def state(path: Path, new_text: str) -> str:
    """ "absent" | "same" (already this content) | "generated" (ours, unedited) | "edited"."""
    try:
        old = path.read_text()
    except FileNotFoundError:
        return "absent"
    except OSError:
        return "edited"
    if old == new_text:
        return "same"
    m = _MARK.search(old)
    if m is None:
        return "edited"
    body = old[: m.start() + 1]
    return "generated" if hashlib.sha256(body.encode()).hexdigest() == m.group(1) else "edited"
