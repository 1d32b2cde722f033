"""Worker process entry (`python -m server.worker`): read jobs and cancel messages from stdin, answer on the
original stdout. Jobs run on their own thread (`server.worker.control`), so a cancel is read while a job
runs and the process outlives a cancelled job.

The protocol gets its own duplicate of fd 1 and fd 1 is pointed at stderr, so a library that prints
(NVRTC, CUDA, a stray print) cannot corrupt the channel.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import BinaryIO

from server.worker.protocol import decode, is_cancel


def _channel() -> BinaryIO:
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def _headers_on_disk() -> None:
    """Map NVRTC's precompiled-header heap before anything else, so headers written by an earlier worker
    (kept on disk, `runner.pch_heap`) are readable here; a no-op with randomisation on or without NVRTC."""
    from server.worker.fake import ENV as FAKE_ENV

    if os.environ.get(FAKE_ENV):
        return
    try:
        from runner.compile import use_precompiled_headers
    except ImportError:
        return  # no NVRTC here: the jobs say so
    shared = use_precompiled_headers(True, prelude=True, on_disk=True)
    logging.getLogger(__name__).info("precompiled headers %s", "kept on disk" if shared else "per process")


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="tl-worker %(levelname)s %(message)s")
    out = _channel()
    _headers_on_disk()
    from server.worker.control import JobRunner
    from server.worker.jobs import run_job

    jobs = JobRunner(run_job, out.write)
    for line in sys.stdin.buffer:
        msg = decode(line)
        if msg is None or "id" not in msg:
            continue
        if is_cancel(msg):
            jobs.cancel(msg["id"])
        else:
            jobs.submit(msg)
    jobs.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
