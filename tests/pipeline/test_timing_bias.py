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
