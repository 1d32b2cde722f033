"""Neovim 0.7's built-in LSP client, headless, as a second real client of the TL server.

`neovim/lsp_check.lua` opens `missing_reshape.tl`, waits for the server's diagnostics, asks for hover at a
keyword and prints JSON; these tests assert on it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from e2e_common import ERROR_CODE, ERROR_FILE, server_command, unavailable
from e2e_install import InstallError, ensure_apt

pytestmark = pytest.mark.e2e

SCRIPT = Path(__file__).resolve().parent / "neovim" / "lsp_check.lua"
HOVER_WORD = "Softmax"
TIMEOUT_S = 60


def run_neovim(file: Path, hover_word: str, expect_code: str, home: Path) -> dict[str, Any]:
    """Runs lsp_check.lua on `file`; `home` holds nvim's XDG folders so no user config or state leaks in."""
    nvim = shutil.which("nvim")
    assert nvim is not None
    env = {
        **os.environ,
        "TL_LSP_CMD": json.dumps(server_command()),
        "TL_FILE": str(file),
        "TL_HOVER_WORD": hover_word,
        "TL_EXPECT_CODE": expect_code,
        "TL_TIMEOUT_MS": str((TIMEOUT_S - 10) * 1000),
        # No user config, plugins or shada from the machine: only the script.
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_STATE_HOME": str(home / "state"),
    }
    # `timeout` is the outer guard: a headless nvim that hits an error outside xpcall never exits.
    cmd = ["timeout", "-k", "5", str(TIMEOUT_S), nvim, "--headless", "-n", "-i", "NONE", "-u", str(SCRIPT)]
    started = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S + 15, check=False)
    elapsed = time.monotonic() - started
    print(f"[neovim-e2e] nvim ran {elapsed:.2f} s, exit {proc.returncode}", file=sys.stderr)
    if proc.returncode != 0:
        output = f"stdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-4000:]}"
        pytest.fail(f"nvim exited {proc.returncode}\n{output}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"no JSON on stdout\nstdout: {proc.stdout!r}\nstderr: {proc.stderr[-4000:]}"
    result: dict[str, Any] = json.loads(lines[-1])
    result["elapsed_s"] = elapsed
    return result


@pytest.fixture(scope="module")
def neovim_run(e2e_workspace: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    try:
        if reason := ensure_apt(["nvim"]):
            unavailable(reason)
    except (InstallError, subprocess.TimeoutExpired) as error:
        unavailable(f"could not install neovim: {error}")
    version = subprocess.run(["nvim", "--version"], capture_output=True, text=True, check=False).stdout
    if "NVIM v0." not in version or tuple(int(x) for x in version.split()[1][1:].split(".")[:2]) < (0, 7):
        unavailable(f"Neovim 0.7+ needed, found {version.splitlines()[0] if version else 'nothing'}")
    home = tmp_path_factory.mktemp("nvim-home")
    return run_neovim(e2e_workspace / ERROR_FILE, HOVER_WORD, ERROR_CODE, home)


def test_filetype_is_tl_not_teal(neovim_run: dict[str, Any]) -> None:
    assert neovim_run["filetype"] == "tl"


def test_diagnostics_arrive(neovim_run: dict[str, Any]) -> None:
    assert neovim_run["diagnostics_arrived"], neovim_run["diagnostics"]
    codes = [d["code"] for d in neovim_run["diagnostics"]]
    assert ERROR_CODE in codes, neovim_run["diagnostics"]
    reshape = next(d for d in neovim_run["diagnostics"] if d["code"] == ERROR_CODE)
    assert reshape["severity"] == 1  # vim.diagnostic.severity.ERROR
    assert "Reshape" in reshape["message"]
    # The second GEMM (`Compute GEMM S, V ...`) is line 29 of missing_reshape.tl, 0-based 28.
    assert reshape["lnum"] == 28, reshape


def test_hover_over_keyword(neovim_run: dict[str, Any]) -> None:
    hover = neovim_run["hover"]
    assert hover is not None, "no hover result"
    contents = hover["contents"]
    text = contents["value"] if isinstance(contents, dict) else json.dumps(contents)
    assert HOVER_WORD.lower() in text.lower(), text
    assert len(text) > len(HOVER_WORD) + 10, text


def test_server_exits_cleanly(neovim_run: dict[str, Any]) -> None:
    assert neovim_run["exit"] is not None, "the server did not exit after shutdown"
    assert neovim_run["exit"]["code"] == 0, neovim_run["exit"]
