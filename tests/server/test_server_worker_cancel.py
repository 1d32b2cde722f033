"""Cooperative cancellation (issue 21): a cancelled job stops at its next step boundary, a compile under way
finishes first, and the worker process lives on, warm, for the next job; a worker that does not answer the
cancel within the grace period is killed and restarted, and so is a cancelled job past its timeout. Fake
jobs (TL_WORKER_FAKE, server/worker/fake.py) in a real worker process, and the worker's job thread
(`server.worker.control`) in-process."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

import pytest
from test_server_worker import manager, request

from server.worker.control import JobRunner
from server.worker.manager import WorkerManager

QUICK = {"fake": "delay=0"}  # a request's own fake spec wins over TL_WORKER_FAKE


async def running(
    m: WorkerManager, until: str, *, kind: str = "compile", timeout: float = 120, cancel_grace: float = 60
) -> tuple[asyncio.Future[Any], int]:
    """Start a job and wait until it reports `until`: (its task, the worker's pid)."""
    reached = asyncio.Event()

    def progress(message: str, percentage: int | None) -> None:
        if until in message:
            reached.set()

    task = asyncio.ensure_future(m.run(request(kind), progress, timeout=timeout, cancel_grace=cancel_grace))
    await asyncio.wait_for(reached.wait(), 20)
    assert m.pid is not None
    return task, m.pid


async def cancel_once(m: WorkerManager, until: str, **options: Any) -> tuple[int, float]:
    """Start a job, cancel it once it reports `until`: (the worker's pid, seconds the cancel kept the
    caller)."""
    task, pid = await running(m, until, **options)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return pid, loop.time() - t0


async def gone(pid: int) -> bool:
    for _ in range(200):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_cancel_during_the_compile_lets_it_finish_and_keeps_the_worker_warm(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="server.worker.manager")
    m = manager("compile=1.5,rel-l2=0.001")
    pid, kept = await cancel_once(m, "compiling with NVRTC", kind="verify")
    assert kept < 1.0  # the caller (the superseded save) is not kept waiting for the compile
    assert m.busy  # but the worker is: its compile runs on, and the next job queues behind it
    out = await asyncio.wait_for(m.run(request("verify"), lambda *_: None, timeout=60), 30)
    await m.stop()
    assert out.status == "ok" and out.result is not None
    assert out.result["worker"] == {"pid": pid, "jobs": 2}  # the same process ran both jobs
    assert m.started == 1 and m.restarts == 0
    # The worker answered the cancel during the compile; the compile finished, then the job stopped at the
    # next step boundary.
    assert "job 1 stops after: compiling with NVRTC (fake)" in caplog.text
    assert "job 1: cancelled before loading the kernel (fake)" in caplog.text


async def test_a_job_cancelled_between_steps_stops_at_once_and_the_next_one_runs() -> None:
    m = manager("delay=30")  # a step boundary every 50 ms
    pid, _ = await cancel_once(m, "fake compile")
    out = await asyncio.wait_for(m.run({**request(), **QUICK}, lambda *_: None, timeout=60), 10)
    await m.stop()
    assert out.status == "ok" and out.result is not None
    assert out.result["worker"] == {"pid": pid, "jobs": 2}
    assert m.restarts == 0


async def test_cancelling_without_a_grace_period_kills_the_worker() -> None:
    """`tl.worker.cancelGraceSeconds = 0`: no cooperative stop, the worker is killed at once."""
    m = manager("delay=30")
    pid, _ = await cancel_once(m, "fake compile", cancel_grace=0)
    assert await gone(pid)  # reaped by the manager
    await m.stop()
    assert m.restarts == 1


async def test_a_worker_that_does_not_answer_the_cancel_is_killed_after_the_grace_period() -> None:
    m = manager("deaf=30")  # the job keeps the GIL: the worker cannot read the cancel
    pid, _ = await cancel_once(m, "fake deaf step", cancel_grace=0.5)
    out = await asyncio.wait_for(m.run({**request(), **QUICK}, lambda *_: None, timeout=60), 15)
    await m.stop()
    assert out.status == "ok" and out.result is not None
    assert out.result["worker"]["pid"] != pid and out.result["worker"]["jobs"] == 1  # a fresh process
    assert m.restarts == 1 and await gone(pid)


async def test_a_cancelled_job_still_running_at_its_timeout_is_killed() -> None:
    """The worker answers the cancel, but the compile it lets finish outlives the job's timeout."""
    m = manager("compile=30")
    # the worker is started first: its start (and, under load, its imports) must not eat the 1.5 s
    await asyncio.wait_for(m.run({**request(), **QUICK}, lambda *_: None, timeout=60), 30)
    pid, _ = await cancel_once(m, "compiling with NVRTC", timeout=1.5)
    out = await asyncio.wait_for(m.run({**request(), **QUICK}, lambda *_: None, timeout=60), 15)
    await m.stop()
    assert out.status == "ok" and out.result is not None and out.result["worker"]["pid"] != pid
    assert m.restarts == 1 and await gone(pid)


async def test_restarting_the_worker_does_not_wait_for_a_cancelled_job() -> None:
    m = manager("compile=30")
    pid, _ = await cancel_once(m, "compiling with NVRTC", cancel_grace=60)
    await asyncio.wait_for(m.restart(), 10)
    new_pid = m.pid
    await m.stop()
    assert new_pid is not None and new_pid != pid and await gone(pid)


async def test_a_restart_right_after_the_cancel_does_not_wait_either() -> None:
    """As `tl.restartWorker` does: cancel the job and restart at once, before the job saw its cancel."""
    m = manager("compile=30")
    task, pid = await running(m, "compiling with NVRTC")
    task.cancel()
    await asyncio.wait_for(m.restart(), 10)
    new_pid = m.pid
    await m.stop()
    assert task.cancelled() and new_pid != pid and await gone(pid)


async def test_stop_ends_a_cancelled_job_still_stopping() -> None:
    m = manager("compile=30")
    pid, _ = await cancel_once(m, "compiling with NVRTC")
    await asyncio.wait_for(m.stop(), 10)
    assert not m.busy and await gone(pid)


# ---- the worker's job thread, in-process ------------------------------------------------------------


class Channel:
    """What the job thread writes, decoded, with a wait for a line that satisfies a test."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self.changed = threading.Condition()

    def write(self, data: bytes) -> None:
        with self.changed:
            self.lines.append(json.loads(data))
            self.changed.notify_all()

    def wait(self, predicate: Callable[[dict[str, Any]], bool]) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: any(map(predicate, self.lines)), timeout=10)

    def results(self) -> dict[Any, dict[str, Any]]:
        return {m["id"]: m for m in self.lines if m["event"] == "result"}


def test_a_cancelled_job_stops_at_its_next_step_even_inside_a_fault_handler() -> None:
    compile_done = threading.Event()

    def job(req: dict[str, Any], emit: Callable[[str, int | None], None]) -> dict[str, Any]:
        emit("compiling", 15)
        assert compile_done.wait(10)  # the compile: a cancel cannot interrupt it
        try:  # as gpu_steps: an exception in a GPU step is a fatal fault
            emit("loading the kernel", 40)
            return {"status": "ok", "message": "verified", "diagnostics": []}
        except Exception:
            return {"status": "failed", "message": "GPU fault", "diagnostics": [], "fatal": True}

    out = Channel()
    jobs = JobRunner(job, out.write)
    jobs.submit({"id": 1})
    out.wait(lambda m: m.get("message") == "compiling")
    jobs.cancel(1)
    compile_done.set()
    jobs.close()
    assert {"id": 1, "event": "cancelling", "step": "compiling"} in out.lines  # answered at once
    (reply,) = out.results().values()
    assert reply["status"] == "cancelled" and not reply.get("fatal")
    assert reply["message"] == "cancelled before loading the kernel"
    assert [m["message"] for m in out.lines if m["event"] == "progress"] == ["compiling"]


def test_a_queued_job_cancelled_never_runs_and_a_late_cancel_changes_nothing() -> None:
    gate = threading.Event()
    ran: list[int] = []

    def job(req: dict[str, Any], emit: Callable[[str, int | None], None]) -> dict[str, Any]:
        ran.append(req["id"])
        if req["id"] == 1:
            assert gate.wait(10)
        return {"status": "ok", "message": f"job {req['id']}", "diagnostics": []}

    out = Channel()
    jobs = JobRunner(job, out.write)
    jobs.submit({"id": 1})
    jobs.submit({"id": 2})
    jobs.cancel(2)  # still queued behind job 1
    gate.set()
    out.wait(lambda m: m["id"] == 2 and m["event"] == "result")
    jobs.cancel(1)  # answered already
    jobs.submit({"id": 3})
    out.wait(lambda m: m["id"] == 3 and m["event"] == "result")
    jobs.close()
    replies = out.results()
    assert ran == [1, 3]
    assert replies[1]["status"] == "ok" and replies[3]["status"] == "ok"
    assert replies[2]["status"] == "cancelled" and replies[2]["message"] == "cancelled before it started"
    answers = [m for m in out.lines if m["event"] == "cancelling"]
    assert answers == [{"id": 2, "event": "cancelling", "step": "nothing yet"}]  # none for the answered job
