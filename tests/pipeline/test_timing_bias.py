"""benchmarks/timing_bias.py: its case names and its reading of nvidia-smi's samples (no GPU needed)."""

from __future__ import annotations

import importlib.util
import math
from datetime import datetime
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("timing_bias", REPO / "benchmarks" / "timing_bias.py")
assert _spec and _spec.loader
timing_bias = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(timing_bias)

# `nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader,nounits -lms 20` on the H200
LINES = [
    "2026/11/30 22:18:19.020, 1980, 119.44",
    "2026/11/30 22:18:19.040, 1650, 220.38",
    "2026/11/30 22:18:19.060, 1635, [N/A]",
    "2026/11/30 22:18:19.080, 1620, 690.09",
    "2026/11/30 22:18:1",  # cut short when the sampler was stopped
]


def _t(text: str) -> float:
    return datetime.strptime(text, "%Y/%m/%d %H:%M:%S.%f").astimezone().timestamp()


def test_window_mean_averages_the_samples_inside_the_window_and_skips_bad_lines() -> None:
    mhz, watts = timing_bias.window_mean(LINES, _t("2026/11/30 22:18:19.030"), _t("2026/11/30 22:18:19.090"))
    assert mhz == pytest.approx((1650 + 1620) / 2) and watts == pytest.approx((220.38 + 690.09) / 2)


def test_an_empty_window_is_nan_not_zero() -> None:
    mhz, watts = timing_bias.window_mean(LINES, 0.0, 1.0)
    assert math.isnan(mhz) and math.isnan(watts)


def test_cases_parse_and_a_bad_name_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    args = timing_bias.parse_args(["soak", "--cases", "hd128,hd64-causal"])
    assert args.case_list == [(128, "none"), (64, "causal")]
    with pytest.raises(SystemExit) as exc:
        timing_bias.parse_args(["order", "--cases", "hd64causal"])
    assert exc.value.code == 2 and "hd64causal" in capsys.readouterr().err


def _returns(ms: float):
    return lambda i: ms


def _fake_configuration(times: dict[str, float]):  # stands in for compile, verify and the baselines
    from contextlib import contextmanager

    @contextmanager
    def configuration(d: int, mask: str, seqlen: int, baselines: tuple[str, ...] | None):
        yield {name: _returns(ms) for name, ms in times.items()}, 2e9

    return configuration


def test_order_mode_reports_our_ratio_to_fa4_and_cudnn_for_both_orders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from runner import bench

    monkeypatch.setattr(
        timing_bias, "configuration", _fake_configuration({"tl-sm90": 2.0, "sdpa-cudnn": 2.2, "fa4": 1.9})
    )
    monkeypatch.setattr(bench, "timed_samples", lambda fn, **kw: [fn(0)])
    out = timing_bias.order_mode(timing_bias.parse_args(["order", "--cases", "hd64-causal", "--reps", "2"]))
    assert set(out["hd64-causal"]) == {"fixed", "balanced"}
    for reps in out["hd64-causal"].values():
        assert reps == [{"fa4": pytest.approx(0.95), "sdpa-cudnn": pytest.approx(1.1)}] * 2


def test_soak_mode_reads_each_windows_clock_after_the_sampler_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    import torch

    class FakeClocks:  # nvidia-smi at 1650 MHz, 690 W, one sample every 20 ms from start to close
        def __init__(self) -> None:
            self.start = time.time()

        def close(self) -> list[str]:
            stamps = [self.start + 0.02 * i for i in range(int((time.time() - self.start) / 0.02) + 1)]
            return [
                f"{datetime.fromtimestamp(t).strftime('%Y/%m/%d %H:%M:%S.%f')[:-3]}, 1650, 690.0"
                for t in stamps
            ]

    monkeypatch.setattr(timing_bias, "configuration", _fake_configuration({"tl-sm90": 1.0, "fa4": 1.0}))
    monkeypatch.setattr(timing_bias, "ClockLog", FakeClocks)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    rows = timing_bias.soak_mode(timing_bias.parse_args(["soak", "--cases", "hd128", "--soak-s", "0.4"]))
    assert [(r["kernel"], r["turn"]) for r in rows] == [
        ("tl-sm90", 0),
        ("fa4", 0),
        ("tl-sm90", 1),
        ("fa4", 1),
    ]
    for r in rows:
        assert r["sm_mhz"] == 1650 and r["watts"] == 690.0
        assert r["tflops"] > 0 and r["tflops_per_ghz"] == pytest.approx(r["tflops"] / 1.65)
