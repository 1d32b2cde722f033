"""runner.bench.time_interleaved: every candidate is timed in each round and its runs are pooled."""

from __future__ import annotations

from typing import Any

import pytest

from runner import bench


def test_rounds_alternate_candidates_and_pool_their_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []

    def fake_samples(fn: Any, *, target_s: float, **kw: Any) -> list[float]:
        name = fn(0)
        order.append(name)
        # a clock that drifts: the later a candidate's turn, the slower its runs
        return [1.0 + 0.1 * len(order)] * 3

    monkeypatch.setattr(bench, "timed_samples", fake_samples)
    out = bench.time_interleaved({"a": lambda i: "a", "b": lambda i: "b"}, rounds=3, target_s=0.3)
    assert [sorted(order[r * 2 : r * 2 + 2]) for r in range(3)] == [["a", "b"]] * 3
    a, b = out["a"], out["b"]
    assert isinstance(a, bench.Timing) and isinstance(b, bench.Timing)
    assert a.runs == b.runs == 9
    # pooled over the whole window, the drift shows as spread and shifts both medians alike
    # (the rounds' orders differ, so the drift falls on both candidates)
    assert abs(b.median_ms - a.median_ms) <= 0.1 + 1e-9
    assert a.p90_ms > a.p10_ms


def _returns(name: str) -> Any:
    return lambda i: name


def test_no_candidate_always_follows_the_same_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a power cap the kernel timed after a light one starts at boosted clocks: predecessors vary."""
    order: list[str] = []

    def fake_samples(fn: Any, **kw: Any) -> list[float]:
        order.append(fn(0))
        return [1.0]

    monkeypatch.setattr(bench, "timed_samples", fake_samples)
    names = ["tl", "sdpa-flash", "sdpa-cudnn", "sdpa-efficient", "flex", "fa4"]
    bench.time_interleaved({n: _returns(n) for n in names}, rounds=8)
    assert len(order) == 8 * len(names)
    for r in range(8):
        assert sorted(order[r * 6 : r * 6 + 6]) == sorted(names)
    for n in names:
        before = {order[i - 1] for i in range(1, len(order)) if order[i] == n}
        assert len(before) >= 3, (n, before)
    again: list[str] = []
    monkeypatch.setattr(bench, "timed_samples", lambda fn, **kw: again.append(fn(0)) or [1.0])
    bench.time_interleaved({n: _returns(n) for n in names}, rounds=8)
    assert again == order  # seeded: a rerun times in the same order


def test_a_failing_candidate_is_reported_and_the_others_still_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_samples(fn: Any, **kw: Any) -> list[float]:
        return fn(0)

    def broken(i: int) -> list[float]:
        raise RuntimeError("unsupported head dim")

    monkeypatch.setattr(bench, "timed_samples", fake_samples)
    out = bench.time_interleaved({"x": broken, "y": lambda i: [2.0, 2.0]}, rounds=2)
    assert isinstance(out["x"], RuntimeError)
    y = out["y"]
    assert isinstance(y, bench.Timing) and y.median_ms == 2.0 and y.runs == 4
    case_result = bench.result_of(None, "x", out["x"])  # type: ignore[arg-type]
    assert not case_result.ok and "unsupported head dim" in (case_result.error or "")
