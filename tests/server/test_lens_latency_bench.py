"""benchmarks/lens_latency.py end to end over stdio with the fake worker (no NVRTC, no GPU): every save gets
its own `tl/result`, each edit changes the score line, the table reads the lens text, and `--twice` times a
save made during the previous save's compile."""

from __future__ import annotations

import argparse
import asyncio

import pytest

from benchmarks import lens_latency as ll


def test_each_edit_is_a_different_score_line() -> None:
    text = ll.DEFAULT_FILE.read_text()
    versions = [ll.edited(text, k) for k in range(6)]
    assert versions[0] == text
    assert len(set(versions)) == 6
    with pytest.raises(SystemExit, match="no line"):
        ll.edited("Kernel k\n", 1)


def test_saves_are_timed_to_their_own_result(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TL_WORKER_FAKE", "delay=0.2,rel-l2=1e-3,tflops=100")
    args = argparse.Namespace(
        file=ll.DEFAULT_FILE, target="sm_90", saves=3, twice=False, restart=False, json=None
    )
    result = asyncio.run(asyncio.wait_for(ll.run(args), 60))
    saves = result["saves"]
    assert [s["save"] for s in saves] == [1, 2, 3]
    assert all(s["seconds"] >= 0.2 and s["kind"] == "verify" for s in saves)
    assert all("rel-L2" in s["summary"] for s in saves), saves
    out = ll.table(result)
    assert "| 1 (cold) |" in out and "warm saves: at most" in out


def test_saving_twice_times_the_second_save_and_sees_the_worker_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """The second save goes out during the first's (fake, 1 s) compile; the first job ends cancelled, and
    the second's result is the one timed."""
    monkeypatch.setenv("TL_WORKER_FAKE", "compile=1,rel-l2=1e-3,tflops=100")
    args = argparse.Namespace(
        file=ll.DEFAULT_FILE, target="sm_90", saves=1, twice=True, restart=False, json=None
    )
    result = asyncio.run(asyncio.wait_for(ll.run(args), 60))
    twice = result["twice"]
    assert twice["first_job_ended"] == "cancelled"
    assert twice["worker_pid_kept"] and twice["worker_restarts"] == 0
    # The second job waits for the first's compile to finish, then compiles for its own 1 s.
    assert twice["seconds"] >= 1.0 and twice["since_first_save"] >= 2.0
    assert twice["kind"] == "verify" and "rel-L2" in twice["summary"]
    out = ll.table(result)
    assert "| twice: saved again" in out and "the worker's pid kept (0 restarts)" in out
