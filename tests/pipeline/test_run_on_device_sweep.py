"""benchmarks/run_on_device.sh sweep: the sm_90 A/B sweep runs as a mode, its arguments reach
benchmarks/sm90_device_check.py."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_sweep_mode_forwards_its_arguments_to_device_check(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "TL_DEVICE_BUDGET_S": "120", "TL_FA4_DIR": str(tmp_path / "fa4")}
    res = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "run_on_device.sh"), "sweep", "--help"],
        capture_output=True, text=True, timeout=180, env=env, cwd=REPO,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "sweep: exit 0" in res.stdout
    log = (out / "sweep.log").read_text()
    assert "--only" in log and "device run of the Hopper backend" in log  # device_check's own --help


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_a_profile_can_follow_the_sweep_in_one_call(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "TL_DEVICE_BUDGET_S": "120", "TL_FA4_DIR": str(tmp_path / "fa4")}
    res = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "run_on_device.sh"), "sweep", "--help", "--", "profile", "--help"],
        capture_output=True, text=True, timeout=180, env=env, cwd=REPO,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "sweep: exit 0" in res.stdout and "profile: exit 0" in res.stdout
    sweep_log = (out / "sweep.log").read_text()
    assert "device run of the Hopper backend" in sweep_log and "profile" not in sweep_log.split("usage")[0]
    assert "Nsight Compute" in (out / "profile.log").read_text()  # profile_ncu's own --help
