"""Fixtures shared by the real-editor tests: a workspace of examples plus a file with a known error."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_common import ARTIFACTS, ERROR_FILE, EXAMPLES, error_text


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
