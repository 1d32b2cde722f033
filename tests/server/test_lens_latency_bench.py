"""benchmarks/lens_latency.py end to end over stdio with the fake worker (no NVRTC, no GPU): every save gets
its own `tl/result`, each edit changes the score line, and the table reads the lens text."""

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
    args = argparse.Namespace(file=ll.DEFAULT_FILE, target="sm_90", saves=3, json=None)
    result = asyncio.run(asyncio.wait_for(ll.run(args), 60))
    saves = result["saves"]
    assert [s["save"] for s in saves] == [1, 2, 3]
    assert all(s["seconds"] >= 0.2 and s["kind"] == "verify" for s in saves)
    assert all("rel-L2" in s["summary"] for s in saves), saves
    out = ll.table(result)
    assert "| 1 (cold) |" in out and "warm saves: at most" in out
