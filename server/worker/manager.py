"""Server side of the worker: one child process (`python -m server.worker`) running one job at a time.

A job that outlives its timeout or whose process dies (crash, segfault, GPU fault) ends with a clear
outcome; the process is killed if needed and a fresh one started, and the server carries on. A cancelled
job is stopped cooperatively: the worker is told, answers at once, finishes the step under way (an NVRTC
compile cannot be interrupted, and it leaves the precompiled headers the next compile reads) and keeps
running, so the next job finds it warm. Only a worker that does not answer within the grace period, or a
cancelled job that runs past its timeout, is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runner.pch_heap import spawn_options
from server.worker.protocol import cancel_message, decode, encode

log = logging.getLogger(__name__)

Progress = Callable[[str, int | None], None]

_LINE_LIMIT = 32 * 1024 * 1024  # an NVRTC log can be long; asyncio's default line limit is 64 KiB
# Seconds the worker has to answer a cancel (`tl.worker.cancelGraceSeconds`) before it is killed. Its
# stdin thread answers at once; the step under way (a compile: 61 s when it writes a prelude header on the
# 2-core VM) is bounded by the job's timeout instead, so this only catches a worker that cannot run Python.
DEFAULT_CANCEL_GRACE = 60.0


@dataclass
class JobOutcome:
    status: str  # ok | failed | skipped | unavailable | error | cancelled | crashed | timeout
    message: str
    diagnostics: list[dict[str, Any]] = field(default_factory=list)
    result: dict[str, Any] | None = None

    @property
    def worker_failed(self) -> bool:
        return self.status in ("crashed", "timeout", "error")


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        what = {
            "SIGSEGV": "segmentation fault",
            "SIGKILL": "killed",
            "SIGABRT": "aborted",
            "SIGBUS": "bus error",
        }.get(name, name)
        return f"{what} ({name})"
    return f"exit status {returncode}"


class WorkerManager:
    def __init__(self, command: list[str] | None = None, env: dict[str, str] | None = None) -> None:
        self.command = command or [sys.executable, "-m", "server.worker"]
        self.env = env
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()
        self._ids = itertools.count(1)
        self.restarts = 0
        self._background: set[asyncio.Future[Any]] = set()  # keep references until done
        self.started = 0
        self._closed = False  # after stop(): no background respawns
        self._settling: asyncio.Future[None] | None = None  # a cancelled job still stopping holds the lock
        self._restarting = False

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.returncode is None else None

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    async def _ensure(self) -> asyncio.subprocess.Process:
        if self._proc is None or self._proc.returncode is not None:
            env = dict(os.environ if self.env is None else self.env)
            # Without address-space randomisation, so its precompiled headers serve the next worker too
            # (runner.pch_heap: a restart, or the next editor session, compiles a known skeleton warm).
            self._proc = await asyncio.create_subprocess_exec(
                *self.command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=None,
                env=env,
                limit=_LINE_LIMIT,
                **spawn_options(env),
            )
            self.started += 1
            log.info("worker started (pid %s)", self._proc.pid)
        return self._proc

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            log.info("killing worker (pid %s)", proc.pid)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            self._background.add(asyncio.ensure_future(proc.wait()))
            self._prune()

    def _prune(self) -> None:
        self._background = {f for f in self._background if not f.done()}

    def _respawn(self, reason: str) -> None:
        """Restart in the background so the next job finds a warm worker."""
        self.restarts += 1
        log.warning("restarting the worker: %s", reason)
        self._background.add(asyncio.ensure_future(self._respawn_now()))
        self._prune()

    async def _respawn_now(self) -> None:
        if self._closed:
            return
        try:
            async with self._lock:
                await self._ensure()
                if self._closed:  # stop() ran while this worker was starting
                    self._kill()
        except OSError:
            log.exception("could not restart the worker")

    async def restart(self) -> None:
        self._closed = False
        # The worker goes anyway: a job cancelled for the restart (now, or just before) is not waited for.
        self._restarting = True
        try:
            if self._settling is not None:
                self._kill()
            async with self._lock:
                self._kill()
                self.restarts += 1
                await self._ensure()
        finally:
            self._restarting = False

    async def stop(self) -> None:
        """Kill the worker and wait for it (and any killed before) to be reaped."""
        self._closed = True
        self._kill()
        loop = asyncio.get_running_loop()
        give_up = loop.time() + 5
        # Waiting can add more: a respawn that was starting kills its new worker, a settling job ends.
        while (pending := [f for f in self._background if not f.done()]) and loop.time() < give_up:
            await asyncio.wait(pending, timeout=give_up - loop.time())
        self._prune()

    async def run(
        self,
        request: dict[str, Any],
        on_progress: Progress,
        timeout: float,
        cancel_grace: float = DEFAULT_CANCEL_GRACE,
    ) -> JobOutcome:
        """Run one job. Cancelling the calling task sends the worker a cancel for it and returns at once;
        the worker stays held (the next job waits) until the job stops at its next step boundary, and is
        killed and restarted only if it does not answer the cancel within `cancel_grace` seconds (0: kill
        at once) or the job runs past `timeout`."""
        self._closed = False
        await self._lock.acquire()
        settling = False  # the lock went to `_settle`, which releases it
        try:
            try:
                proc = await self._ensure()
            except OSError as exc:
                return JobOutcome("error", f"could not start the worker: {exc}")
            job_id = next(self._ids)
            deadline = asyncio.get_running_loop().time() + timeout
            try:
                return await self._exchange(proc, job_id, request, on_progress, deadline, timeout)
            except asyncio.CancelledError:
                settling = self._cancel(proc, job_id, cancel_grace, deadline)
                raise
        finally:
            if not settling:
                self._lock.release()

    async def _exchange(
        self,
        proc: asyncio.subprocess.Process,
        job_id: int,
        request: dict[str, Any],
        on_progress: Progress,
        deadline: float,
        timeout: float,
    ) -> JobOutcome:
        loop = asyncio.get_running_loop()
        try:
            assert proc.stdin is not None and proc.stdout is not None  # created with PIPE above
            proc.stdin.write(encode({**request, "id": job_id}))
            await proc.stdin.drain()
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise TimeoutError
                line = await asyncio.wait_for(proc.stdout.readline(), remaining)
                if not line:
                    code = await proc.wait()
                    self._proc = None
                    why = describe_exit(code)
                    self._respawn(f"crashed: {why}")
                    return JobOutcome("crashed", f"the TL worker crashed ({why}); it has been restarted")
                msg = decode(line)
                if msg is None or msg.get("id") != job_id:
                    continue  # e.g. the late reply of a job cancelled before this one
                if msg.get("event") != "result":
                    if msg.get("event") == "progress":
                        on_progress(str(msg.get("message", "")), msg.get("percentage"))
                    continue
                outcome = JobOutcome(
                    str(msg.get("status", "error")),
                    str(msg.get("message", "")),
                    list(msg.get("diagnostics") or []),
                    msg.get("result"),
                )
                if msg.get("fatal"):  # e.g. a GPU fault: the CUDA context is gone, start afresh
                    self._kill()
                    self._respawn("the job reported a fatal GPU error")
                return outcome
        except TimeoutError:
            self._kill()
            self._respawn(f"job timed out after {timeout:g} s")
            return JobOutcome(
                "timeout", f"the TL worker timed out after {timeout:g} s; it has been restarted"
            )
        except (BrokenPipeError, ConnectionResetError) as exc:
            self._kill()
            self._respawn(f"pipe broke: {exc}")
            return JobOutcome("crashed", f"lost the TL worker ({exc}); it has been restarted")

    def _cancel(self, proc: asyncio.subprocess.Process, job_id: int, grace: float, deadline: float) -> bool:
        """Ask the worker to stop `job_id`; True when `_settle` now holds the lock for it."""
        stdin = proc.stdin if proc is self._proc and proc.returncode is None else None
        if grace > 0 and stdin is not None and not self._restarting:
            try:
                stdin.write(encode(cancel_message(job_id)))
            except (BrokenPipeError, ConnectionResetError, RuntimeError):
                pass  # the pipe is gone: kill below
            else:
                self._settling = asyncio.ensure_future(self._settle(proc, job_id, grace, deadline))
                self._background.add(self._settling)  # stop() waits for it too
                return True
        self._kill()
        self._respawn("job cancelled")
        return False

    async def _settle(
        self, proc: asyncio.subprocess.Process, job_id: int, grace: float, deadline: float
    ) -> None:
        """Hold the worker until the cancelled job has stopped, then hand it to the next job. The worker must
        answer the cancel within `grace` seconds ("cancelling", or the job's result); the step under way
        then still has the job's own deadline. Past either, or if the process dies, it is killed and
        restarted."""
        loop = asyncio.get_running_loop()
        why = f"the worker did not answer the cancel within {grace:g} s"
        try:
            reply = await asyncio.wait_for(self._next_of(proc, job_id, ("cancelling", "result")), grace)
            if reply is not None and reply.get("event") == "cancelling":
                log.info("job %s stops after: %s", job_id, reply.get("step"))
                why = "the cancelled job ran past its timeout"
                left = max(0.0, deadline - loop.time())
                reply = await asyncio.wait_for(self._next_of(proc, job_id, ("result",)), left)
        except TimeoutError:
            if proc is self._proc:
                self._kill()
                self._respawn(why)
        else:
            if proc is not self._proc:  # stopped or restarted meanwhile: nothing left to look after
                return
            if reply is None:
                self._proc = None
                self._respawn(f"crashed while stopping a cancelled job: {describe_exit(await proc.wait())}")
            elif reply.get("fatal"):
                self._kill()
                self._respawn("the cancelled job reported a fatal GPU error")
            else:
                log.info("job %s: %s (worker pid %s kept)", job_id, reply.get("message"), proc.pid)
        finally:
            self._settling = None
            self._lock.release()

    @staticmethod
    async def _next_of(
        proc: asyncio.subprocess.Process, job_id: int, events: tuple[str, ...]
    ) -> dict[str, Any] | None:
        """The job's next message of one of `events` (others are dropped), or None when stdout ends."""
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            msg = decode(line)
            if msg is not None and msg.get("id") == job_id and msg.get("event") in events:
                return msg
        return None
