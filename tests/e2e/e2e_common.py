"""Shared by the real-editor tests: the workspace's files, the server command, the skip-or-fail policy.

A plain module (not conftest.py) so test modules can import it by name whatever other conftest files exist.
Set TL_E2E_REQUIRE=1 (CI should) to turn "editor not available" skips into failures.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"

# The deliberate error: mha_fwd.tl without its Reshape, so the second GEMM consumes an MMA_C accumulator.
ERROR_FILE = "missing_reshape.tl"
ERROR_CODE = "TL202"
RESHAPE_LINE = "    Reshape S from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_N_new)\n"


def unavailable(reason: str) -> None:
    """Skip (or fail, under TL_E2E_REQUIRE=1) because an editor or tool cannot be had here."""
    if os.environ.get("TL_E2E_REQUIRE") == "1":
        pytest.fail(f"TL_E2E_REQUIRE=1 but: {reason}", pytrace=False)
    pytest.skip(reason)


def server_command() -> list[str]:
    """`tl lsp` through this interpreter, so it works in a venv, in CI and without `tl` on PATH."""
    return [sys.executable, "-m", "tl_language.cli", "lsp"]


def error_text() -> str:
    text = (EXAMPLES / "mha_fwd.tl").read_text()
    assert RESHAPE_LINE in text, "examples/mha_fwd.tl changed: update RESHAPE_LINE in tests/e2e/e2e_common.py"
    return text.replace(RESHAPE_LINE, "").replace("Kernel mha_fwd", "Kernel missing_reshape")
