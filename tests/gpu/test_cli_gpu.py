"""`tl run` on the GPU: a TL file, then its generated `.cu` edited by hand (the engineer's loop)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]


def tl(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tl_language.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def test_tl_run_verifies_a_tl_file_then_its_hand_edited_cu(tmp_path):
    tl_path = tmp_path / "mha_fwd.tl"
    shutil.copy(ROOT / "examples" / "mha_fwd.tl", tl_path)
    first = tl("run", str(tl_path), "--shape", "2,8,8,1000,1000", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    cu = tl_path.with_suffix(".cu")
    assert cu.exists()
    # A hand edit that keeps the kernel correct (an extra comment) is compiled and verified as it is.
    cu.write_text(cu.read_text().replace('extern "C"', '// hand-tuned\nextern "C"', 1))
    second = tl("run", str(cu), "--shape", "1,4,4,517,1029", cwd=tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    print(first.stdout, second.stdout)
