"""One compile in a fresh interpreter: a pickled `CompileJob` on stdin, the pickled result into argv[1].

Started by `runner.compile.compile_many`; not a user command. A `CompileError` is a result, not a crash.
"""

from __future__ import annotations

import pickle
import sys

from runner.compile import CompileJob, _run_job


def main() -> int:
    job = pickle.loads(sys.stdin.buffer.read())
    if not isinstance(job, CompileJob):
        sys.stderr.write(f"expected a CompileJob, got {type(job).__name__}\n")
        return 2
    result = _run_job(job)
    with open(sys.argv[1], "wb") as f:
        f.write(pickle.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
