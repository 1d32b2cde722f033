"""Server side of the worker: one child process (`python -m server.worker`) running one job at a time.

A job that outlives its timeout, is cancelled, or whose process dies (crash, segfault, GPU fault) ends with
a clear outcome; the process is killed if needed and a fresh one started, and the server carries on.
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

from server.worker.protocol import decode, encode

log = logging.getLogger(__name__)

Progress = Callable[[str, int | None], None]

_LINE_LIMIT = 32 * 1024 * 1024  # an NVRTC log can be long; asyncio's default line limit is 64 KiB


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

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.returncode is None else None

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    async def _ensure(self) -> asyncio.subprocess.Process:
        if self._proc is None or self._proc.returncode is not None:
            env = dict(os.environ if self.env is None else self.env)
            self._proc = await asyncio.create_subprocess_exec(
                *self.command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=None,
                env=env,
                limit=_LINE_LIMIT,
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
        async with self._lock:
            self._kill()
            self.restarts += 1
            await self._ensure()

    async def stop(self) -> None:
        """Kill the worker and wait for it (and any killed before) to be reaped."""
        self._closed = True
        self._kill()
        pending = [f for f in self._background if not f.done()]
        if pending:
            await asyncio.wait(pending, timeout=5)
        self._prune()

    async def run(self, request: dict[str, Any], on_progress: Progress, timeout: float) -> JobOutcome:
        self._closed = False
        async with self._lock:
            try:
                proc = await self._ensure()
            except OSError as exc:
                return JobOutcome("error", f"could not start the worker: {exc}")
            job_id = next(self._ids)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
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
                        continue
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
            except asyncio.CancelledError:
                self._kill()
                self._respawn("job cancelled")
                raise
