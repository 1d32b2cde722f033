"""Cooperative cancellation in the worker process.

Jobs run one at a time on one long-lived thread while the main thread keeps reading stdin (NVRTC releases
the GIL while it compiles), so a cancel message for a job is seen and answered at once: an event
"cancelling" naming the step under way. The job then stops at its next step boundary — every progress
report marks one (translate, compile, load, verify, benchmark) — and answers with status "cancelled". A
step in progress finishes first: NVRTC cannot be interrupted, and a compile that finishes writes the
precompiled headers the next compile reads and leaves its cubin in the kernel cache. The process, and with
it the headers, lives on for the next job.

One thread runs every job, so the CUDA context and the runner's caches stay with it across jobs.
"""

from __future__ import annotations

import logging
import queue
import threading
import traceback
from collections.abc import Callable
from typing import Any

from server.worker.protocol import encode

log = logging.getLogger(__name__)

Emit = Callable[[str, int | None], None]
RunJob = Callable[[dict[str, Any], Emit], dict[str, Any]]


class JobCancelled(BaseException):
    """Raised by `JobControl.emit` at a step boundary of a cancelled job. A BaseException, so that the steps'
    `except Exception` (a GPU step's fault handler) lets it through."""


class JobControl:
    """One job's progress reports and its cancel flag (set from the stdin thread)."""

    def __init__(self, job_id: Any, send: Callable[[dict[str, Any]], None]) -> None:
        self.job_id = job_id
        self._send = send
        self._cancelled = threading.Event()
        self.step: str | None = None  # the step under way (its progress message); None before the first

    def cancel(self) -> None:
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def emit(self, message: str, percentage: int | None = None) -> None:
        """Report the step about to start; a cancelled job stops here instead."""
        if self._cancelled.is_set():
            raise JobCancelled(f"cancelled before {message}")
        self.step = message
        self._send({"id": self.job_id, "event": "progress", "message": message, "percentage": percentage})


def cancelled_reply(message: str) -> dict[str, Any]:
    return {"status": "cancelled", "message": message, "diagnostics": [], "result": None}


class JobRunner:
    """The job thread and its queue. `submit` and `cancel` are called by the thread reading stdin; replies
    and progress go out through `write` under one lock, so lines never interleave."""

    def __init__(self, run_job: RunJob, write: Callable[[bytes], object]) -> None:
        self._run_job = run_job
        self._write = write
        self._write_lock = threading.Lock()
        self._controls: dict[Any, JobControl] = {}  # submitted and not answered yet
        self._controls_lock = threading.Lock()
        self._queue: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="tl-worker-job", daemon=True)
        self._thread.start()

    def send(self, msg: dict[str, Any]) -> None:
        with self._write_lock:
            self._write(encode(msg))

    def submit(self, req: dict[str, Any]) -> None:
        with self._controls_lock:
            self._controls[req["id"]] = JobControl(req["id"], self.send)
        self._queue.put(req)

    def cancel(self, job_id: Any) -> None:
        """Flag the job and say so ("cancelling", with the step it finishes first); one answered already
        (or never submitted) has nothing left to stop: its result is on its way."""
        with self._controls_lock:
            control = self._controls.get(job_id)
        if control is None:
            return
        control.cancel()
        step = control.step or "nothing yet"
        log.info("job %s: cancel requested during %s", job_id, step)
        self.send({"id": job_id, "event": "cancelling", "step": step})

    def close(self) -> None:
        """stdin ended (the server is gone): cancel what is left and wait for the running job's step."""
        with self._controls_lock:
            controls = list(self._controls.values())
        for control in controls:
            control.cancel()
        self._queue.put(None)
        self._thread.join()

    def _loop(self) -> None:
        while (req := self._queue.get()) is not None:
            with self._controls_lock:
                control = self._controls[req["id"]]
            reply = self._answer(req, control)
            reply.update({"id": req["id"], "event": "result"})
            with self._controls_lock:
                del self._controls[req["id"]]
            self.send(reply)

    def _answer(self, req: dict[str, Any], control: JobControl) -> dict[str, Any]:
        if control.cancelled:
            return cancelled_reply("cancelled before it started")
        try:
            return self._run_job(req, control.emit)
        except JobCancelled as stop:
            log.info("job %s %s", req["id"], stop)
            return cancelled_reply(str(stop))
        except Exception:
            return {"status": "error", "message": traceback.format_exc(limit=8), "diagnostics": []}
