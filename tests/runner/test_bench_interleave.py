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
    assert order == ["a", "b"] * 3
    a, b = out["a"], out["b"]
    assert isinstance(a, bench.Timing) and isinstance(b, bench.Timing)
    assert a.runs == b.runs == 9
    # pooled over the whole window, the drift shows as spread and shifts both medians alike
    assert b.median_ms - a.median_ms == pytest.approx(0.1)
    assert a.p90_ms > a.p10_ms


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
