"""Worker process entry (`python -m server.worker`): read jobs from stdin, answer on the original stdout.

The protocol gets its own duplicate of fd 1 and fd 1 is pointed at stderr, so a library that prints
(NVRTC, CUDA, a stray print) cannot corrupt the channel.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from typing import Any, BinaryIO

from server.worker.protocol import decode, encode


def _channel() -> BinaryIO:
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="tl-worker %(levelname)s %(message)s")
    out = _channel()
    from server.worker.jobs import run_job

    for line in sys.stdin.buffer:
        req = decode(line)
        if req is None or "id" not in req:
            continue
        job_id = req["id"]

        def emit(message: str, percentage: int | None = None, _id: Any = job_id) -> None:
            out.write(encode({"id": _id, "event": "progress", "message": message, "percentage": percentage}))

        try:
            reply = run_job(req, emit)
        except Exception:
            reply = {"status": "error", "message": traceback.format_exc(limit=8), "diagnostics": []}
        reply.update({"id": job_id, "event": "result"})
        out.write(encode(reply))
    return 0


if __name__ == "__main__":
    sys.exit(main())
