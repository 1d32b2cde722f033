"""JSON-lines messages between the server and the worker (one object per line).

Server → worker: {"id", "kind": one of JOB_KINDS, "uri", "path", "text", "target", "shapes": [...],
                  "fake": str|null}
                 {"id", "cancel": true}: stop job `id` at its next step boundary (`server.worker.control`)
Worker → server: {"id", "event": "progress", "message", "percentage"}
                 {"id", "event": "cancelling", "step"}: the answer to a cancel; the job's result follows
                 once the step under way has finished
                 {"id", "event": "result", "status", "message", "diagnostics": [...], "result": {...}|null,
                  "fatal": bool}

A worker diagnostic is the core's `Diagnostic.to_json()` shape (code, severity label, range, message).
Statuses: ok | failed (TL501/502/503 found) | skipped (the document has errors) | unavailable (a module or
the GPU is missing; the message says which) | error (an unexpected exception, message has the traceback) |
cancelled (the server cancelled the job; the message names the step it stopped before).
"""

from __future__ import annotations

import json
from typing import Any

# The derived backward's jobs (pipeline.backward): its result carries "grads", the names of the gradients
# verify_backward checked ("dq", "dk", "dv", then "d<side tensor>" for each learnable one).
BACKWARD_KINDS = ("verify-backward", "benchmark-backward")
JOB_KINDS = ("check", "compile", "verify", "benchmark", *BACKWARD_KINDS)
# Jobs that run the kernel on a GPU when there is one (compile only without).
GPU_KINDS = ("verify", "benchmark", *BACKWARD_KINDS)

_GRAD_LABELS = {"dq": "dQ", "dk": "dK", "dv": "dV"}


def grad_label(name: str) -> str:
    """How a gradient is named to the user: dQ, dK, dV; a side tensor's keeps its name (`dslopes`)."""
    return _GRAD_LABELS.get(name, name)


def cancel_message(job_id: int) -> dict[str, Any]:
    return {"id": job_id, "cancel": True}


def is_cancel(msg: dict[str, Any]) -> bool:
    return msg.get("cancel") is True


def encode(msg: dict[str, Any]) -> bytes:
    return (json.dumps(msg, separators=(",", ":")) + "\n").encode()


def decode(line: bytes) -> dict[str, Any] | None:
    try:
        msg = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    return msg if isinstance(msg, dict) else None
