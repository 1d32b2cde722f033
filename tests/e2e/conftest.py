"""Fixtures shared by the real-editor tests: a workspace of examples plus a file with a known error, the
command that starts the language server, and the skip-or-fail policy for missing editors.

Set TL_E2E_REQUIRE=1 (CI does) to turn "editor not available" skips into failures.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
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
    assert RESHAPE_LINE in text, "examples/mha_fwd.tl changed: update RESHAPE_LINE in tests/e2e/conftest.py"
    return text.replace(RESHAPE_LINE, "").replace("Kernel mha_fwd", "Kernel missing_reshape")


@pytest.fixture(scope="session")
def e2e_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with every example and `missing_reshape.tl`; editors may write `.cu` files into it."""
    workspace = tmp_path_factory.mktemp("tl-workspace")
    for example in EXAMPLES.glob("*.tl"):
        shutil.copy(example, workspace / example.name)
    (workspace / ERROR_FILE).write_text(error_text())
    return workspace


@pytest.fixture(scope="session")
def artifacts_dir() -> Iterator[Path]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    yield ARTIFACTS
