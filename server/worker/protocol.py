"""JSON-lines messages between the server and the worker (one object per line).

Server → worker: {"id", "kind": "check"|"compile"|"verify"|"benchmark", "uri", "path", "text",
                  "target", "shapes": [...], "fake": str|null}
Worker → server: {"id", "event": "progress", "message", "percentage"}
                 {"id", "event": "result", "status", "message", "diagnostics": [...], "result": {...}|null,
                  "fatal": bool}

A worker diagnostic is the core's `Diagnostic.to_json()` shape (code, severity label, range, message).
Statuses: ok | failed (TL501/502/503 found) | skipped (the document has errors) | unavailable (a module or
the GPU is missing; the message says which) | error (an unexpected exception, message has the traceback).
"""

from __future__ import annotations

import json
from typing import Any

JOB_KINDS = ("check", "compile", "verify", "benchmark")


def encode(msg: dict[str, Any]) -> bytes:
    return (json.dumps(msg, separators=(",", ":")) + "\n").encode()


def decode(line: bytes) -> dict[str, Any] | None:
    try:
        msg = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    return msg if isinstance(msg, dict) else None
