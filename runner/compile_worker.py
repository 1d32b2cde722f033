"""A compile worker: pickled `CompileJob`s in, pickled results out, one after another until stdin ends.

Started by `runner.compile.CompileWorker` (for `compile_many`); not a user command. Messages are
length-prefixed (`runner.compile.read_frame` / `write_frame`) on stdin and on a private copy of stdout;
fd 1 itself is pointed at stderr, so whatever NVRTC or a library prints cannot corrupt a result. A
`CompileError` is a result, not a crash. With `$TL_PCH` = 1 (the parent sets it when a worker gets more
than one job) the first compile of an include block writes a precompiled header the later ones read.
"""

from __future__ import annotations

import os
import pickle
import sys

from runner.compile import CompileJob, _run_job, read_frame, use_precompiled_headers, write_frame


def main() -> int:
    # One header at a time: the jobs come sorted by include block, and a pool of workers each holding
    # several 450 MB headers would fill a disk.
    use_precompiled_headers(False, keep=1)
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    jobs = sys.stdin.buffer
    while True:
        try:
            payload = read_frame(jobs)
        except EOFError:
            return 0
        job = pickle.loads(payload)
        if not isinstance(job, CompileJob):
            sys.stderr.write(f"expected a CompileJob, got {type(job).__name__}\n")
            return 2
        write_frame(channel, pickle.dumps(_run_job(job)))


if __name__ == "__main__":
    sys.exit(main())
