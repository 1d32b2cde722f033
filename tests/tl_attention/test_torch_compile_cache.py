"""A warm start runs no NVRTC: a second process compiling the same TL finds the binary in the disk cache."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import tl_attention

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.nvrtc
@pytest.mark.slow
def test_a_warm_start_runs_no_nvrtc() -> None:
    kernel = tl_attention.compile("mha_fwd.tl", lazy=True)
    first = kernel.build()  # NVRTC, unless an earlier run (test_nvrtc's examples) left it in the cache
    assert first.kind == "cubin" and first.code
    code = (
        "import tl_attention; c = tl_attention.compile('mha_fwd.tl', lazy=True).build(); "
        "print(c.cached, c.key)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env, timeout=300
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["True", first.key]
