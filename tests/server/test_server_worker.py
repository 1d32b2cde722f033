"""The worker process and its manager: results, progress, crashes, segfaults and hangs each end with a clear
outcome and a fresh worker (fake jobs via TL_WORKER_FAKE, see server/worker/fake.py); cancellation is in
test_server_worker_cancel.py."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from server.worker.jobs import diagnostics_from_log
from server.worker.manager import WorkerManager, describe_exit

ROOT = Path(__file__).resolve().parents[2]
MHA = (ROOT / "examples" / "mha_fwd.tl").read_text()


def manager(fake: str) -> WorkerManager:
    env = {k: v for k, v in os.environ.items() if k != "TL_WORKER_FAKE"}
    env["TL_WORKER_FAKE"] = fake
    return WorkerManager(env=env)


def request(kind: str = "compile", text: str = MHA) -> dict:
    return {
        "kind": kind,
        "uri": "file:///x/mha_fwd.tl",
        "path": "/x/mha_fwd.tl",
        "text": text,
        "target": "sm_80",
    }


async def test_fake_job_reports_progress_and_result() -> None:
    m = manager("delay=0.2")
    seen: list[tuple[str, int | None]] = []
    out = await m.run(request(), lambda msg, pct: seen.append((msg, pct)), timeout=20)
    await m.stop()
    assert out.status == "ok" and out.result and out.result["compiled"]
    assert seen and seen[-1][1] == 100


async def test_the_worker_runs_without_address_randomisation_unless_told_not_to() -> None:
    """So its precompiled headers serve the next worker (runner.pch_heap); TL_PCH_ON_DISK=0 keeps the
    ordinary process."""
    from runner.pch_heap import randomization_off, spawn_options

    if not spawn_options():
        pytest.skip("not Linux")
    m = manager("delay=0")
    out = await m.run(request(), lambda msg, pct: None, timeout=20)
    await m.stop()
    assert out.result is not None
    if not out.result["randomisation_off"] and not randomization_off():
        pytest.skip("this sandbox refuses personality(ADDR_NO_RANDOMIZE)")
    assert out.result["randomisation_off"]
    plain = WorkerManager(env={**m.env, "TL_PCH_ON_DISK": "0"} if m.env else None)
    out = await plain.run(request(), lambda msg, pct: None, timeout=20)
    await plain.stop()
    assert out.result is not None and out.result["randomisation_off"] == randomization_off()


async def test_nvrtc_errors_become_tl502_on_the_tl_line() -> None:
    m = manager('nvrtc-error=14:identifier "tOrQ" is undefined')
    out = await m.run(request(), lambda *_: None, timeout=20)
    await m.stop()
    assert out.status == "failed"
    (d,) = out.diagnostics
    assert d["code"] == "TL502" and d["range"]["start"]["line"] == 13 and "tOrQ" in d["message"]


def test_nvrtc_errors_outside_tl_land_on_the_kernel_line() -> None:
    log = 'mha_fwd.cu(120): error: no instance of overloaded function "cute::gemm"\n'
    (d,) = diagnostics_from_log(log, MHA, "/x/mha_fwd.tl")
    assert d["range"]["start"]["line"] == 1 and "mha_fwd.cu:120" in d["message"]


async def test_document_with_errors_is_not_compiled() -> None:
    m = manager("delay=0")
    out = await m.run(request(text="Kernel k\nCopy Q fro global\n"), lambda *_: None, timeout=20)
    await m.stop()
    assert out.status == "skipped" and "error" in out.message


@pytest.mark.parametrize(("fake", "what"), [("crash", "exit status 86"), ("segfault", "segmentation fault")])
async def test_a_crashing_worker_is_reported_and_restarted(fake: str, what: str) -> None:
    m = manager(fake)
    out = await m.run(request(), lambda *_: None, timeout=20)
    assert out.status == "crashed" and what in out.message
    assert m.restarts == 1
    m.env = {**(m.env or {}), "TL_WORKER_FAKE": "delay=0"}  # the next worker behaves
    await asyncio.sleep(0)  # let the background respawn take the lock first
    again = await m.run(request(), lambda *_: None, timeout=20)
    await m.stop()
    assert again.status in ("ok",) and m.started >= 2


async def test_a_hanging_worker_times_out_and_is_restarted() -> None:
    m = manager("hang")
    out = await m.run(request(), lambda *_: None, timeout=1.5)
    pid = m.pid
    await m.stop()
    assert out.status == "timeout" and "1.5 s" in out.message and m.restarts == 1
    assert pid is None or isinstance(pid, int)


def test_describe_exit() -> None:
    assert describe_exit(-11) == "segmentation fault (SIGSEGV)"
    assert describe_exit(3) == "exit status 3"


def test_compile_note_says_whether_precompiled_headers_were_read() -> None:
    from types import SimpleNamespace

    from server.worker.jobs import _compile_note

    assert _compile_note(SimpleNamespace(cached=True, pch="used")) == " (cached)"
    assert _compile_note(SimpleNamespace(cached=False, pch="used")) == " (precompiled headers)"
    assert _compile_note(SimpleNamespace(cached=False, pch="created")) == " (precompiled headers written)"
    assert _compile_note(SimpleNamespace(cached=False, pch=None)) == ""
