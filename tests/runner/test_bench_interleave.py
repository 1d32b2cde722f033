"""runner.bench.time_interleaved: every candidate is timed in each round and its runs are pooled."""

from __future__ import annotations

from collections import Counter
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
    out = bench.time_interleaved({"a": lambda i: "a", "b": lambda i: "b"}, rounds=4, target_s=0.4)
    assert order == ["a", "b", "b", "a"] * 2  # the balanced design for two, twice
    a, b = out["a"], out["b"]
    assert isinstance(a, bench.Timing) and isinstance(b, bench.Timing)
    assert a.runs == b.runs == 12
    # pooled over the whole window and in alternating order, the drift shows as spread, not a bias
    assert a.median_ms == pytest.approx(b.median_ms)
    assert a.p90_ms > a.p10_ms


def _returns(name: str) -> Any:
    return lambda i: name


@pytest.mark.parametrize("n", range(1, 10))
def test_balanced_orders_put_every_candidate_after_every_other_equally_often(n: int) -> None:
    orders = bench.balanced_orders(n)
    assert len(orders) == (n if n % 2 == 0 or n == 1 else 2 * n)
    assert all(sorted(order) == list(range(n)) for order in orders)
    pairs = Counter((order[i - 1], order[i]) for order in orders for i in range(1, n))
    assert len(pairs) == n * (n - 1)  # every ordered pair occurs ...
    assert len(set(pairs.values())) <= 1  # ... equally often


def test_no_candidate_always_follows_the_same_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a power cap the kernel timed after a light one starts at boosted clocks: predecessors vary."""
    order: list[str] = []

    def fake_samples(fn: Any, **kw: Any) -> list[float]:
        order.append(fn(0))
        return [1.0]

    monkeypatch.setattr(bench, "timed_samples", fake_samples)
    names = ["tl-sm80", "tl-sm90", "sdpa-flash", "sdpa-cudnn", "sdpa-efficient", "flex", "fa4"]
    out = bench.time_interleaved({n: _returns(n) for n in names}, target_s=1.4)
    assert len(order) == 14 * len(names)  # the default: one whole design, 2n passes for odd n
    assert all(isinstance(t, bench.Timing) and t.runs == 14 for t in out.values())
    after_light = Counter(order[i] for i in range(1, len(order)) if order[i - 1] == "sdpa-efficient")
    assert after_light["fa4"] == after_light["tl-sm90"] >= 2


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


def test_given_orders_replace_the_design(monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    monkeypatch.setattr(bench, "timed_samples", lambda fn, **kw: order.append(fn(0)) or [1.0])
    bench.time_interleaved({n: _returns(n) for n in "abc"}, rounds=3, orders=[[0, 1, 2]])
    assert order == list("abc") * 3  # the fixed order the benchmark used before the balanced design
