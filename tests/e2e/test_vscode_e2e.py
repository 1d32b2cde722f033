"""The packaged extension in a real VS Code (code-server 4.100.3) driven by headless Chromium.

One session per module: build the .vsix, install it offline into a fresh code-server, open a workspace of
the examples plus `missing_reshape.tl`, and let `code-server/drive_vscode.js` walk through diagnostics,
hover, the Reshape quick fix and "TL: Generate CUDA", taking screenshots. Each test asserts one feature.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from e2e_common import ERROR_CODE, ERROR_FILE, server_command, unavailable
from e2e_install import (
    CODE_SERVER_BIN,
    CODE_SERVER_DIR,
    InstallError,
    ensure_apt,
    ensure_code_server,
    ensure_vsix,
    node_problem,
)
from editor_process import free_port, process_group, run_group, wait_http

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

EXAMPLE_FILE = "mha_fwd.tl"
HOVER_WORD = "Softmax"
FIX_TITLE = "Reshape"
DRIVER_TIMEOUT_S = 300
BROKEN_PYTHON = "/nonexistent/tl-e2e/python3"


def _log(message: str) -> None:
    print(f"[vscode-e2e] {message}", file=sys.stderr, flush=True)


def _user_settings() -> dict[str, Any]:
    command = server_command()
    return {
        "security.workspace.trust.enabled": False,
        "workbench.startupEditor": "none",
        "workbench.tips.enabled": False,
        "workbench.enableExperiments": False,
        "extensions.ignoreRecommendations": True,
        "telemetry.telemetryLevel": "off",
        "update.mode": "none",
        "window.restoreWindows": "none",
        "editor.hover.delay": 150,
        "files.autoSave": "off",
        # The interpreter running these tests starts the server (`python -m tl_language.cli lsp`).
        "tl.server.python": command[0],
        "tl.server.env": {"PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        # No NVRTC compile on save in this test: it is about the editor, not the compiler.
        "tl.onSave": "check",
        "tl.trace.server": "messages",
    }


@dataclass
class VsCodeTools:
    vsix: Path
    chromium: str
    out: Path
    timings: dict[str, float] = field(default_factory=dict)


@pytest.fixture(scope="module")
def vscode_tools(artifacts_dir: Path) -> VsCodeTools:
    """Installs (or finds cached) chromium, the .vsix and code-server; skips with the reason if impossible."""
    timings: dict[str, float] = {}
    if reason := node_problem():
        unavailable(reason)
    try:
        t0 = time.monotonic()
        if reason := ensure_apt(["chromium", "rg", "krb5-config"]):
            unavailable(reason)
        timings["apt"] = time.monotonic() - t0
        t0 = time.monotonic()
        vsix = ensure_vsix()
        timings["vsix"] = time.monotonic() - t0
        t0 = time.monotonic()
        ensure_code_server()
        timings["code-server install"] = time.monotonic() - t0
    except (InstallError, subprocess.TimeoutExpired) as error:
        unavailable(f"could not install the VS Code test tools: {error}")
    chromium = shutil.which("chromium")
    assert chromium is not None
    out = artifacts_dir / "vscode"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    return VsCodeTools(vsix, chromium, out, timings)


def drive_code_server(
    tools: VsCodeTools, workspace: Path, home: Path, settings: dict[str, Any], scenario: str
) -> dict[str, Any]:
    """A fresh code-server with the .vsix and `settings`, driven through `scenario`; the driver's RESULT."""
    timings = tools.timings
    user_data, extensions = home / "user-data", home / "extensions"
    (user_data / "User").mkdir(parents=True)
    (user_data / "User" / "settings.json").write_text(json.dumps(settings, indent=2))
    base = [str(CODE_SERVER_BIN), "--user-data-dir", str(user_data), "--extensions-dir", str(extensions)]
    t0 = time.monotonic()
    install = [*base, "--install-extension", str(tools.vsix)]
    subprocess.run(install, check=True, capture_output=True, timeout=120)
    timings[f"{scenario}: install vsix"] = time.monotonic() - t0

    port = free_port()
    cmd = [*base, "--auth", "none", "--bind-addr", f"127.0.0.1:{port}", "--disable-telemetry",
           "--disable-update-check", "--disable-workspace-trust", str(workspace)]  # fmt: skip
    with process_group(cmd, tools.out / f"code-server-{scenario}.log") as proc:
        t0 = time.monotonic()
        wait_http(f"http://127.0.0.1:{port}/healthz", timeout=60, proc=proc)
        timings[f"{scenario}: code-server start"] = time.monotonic() - t0
        config = {
            "scenario": scenario, "url": f"http://127.0.0.1:{port}", "chromium": tools.chromium,
            "artifacts": str(tools.out), "workspace": str(workspace), "errorFile": ERROR_FILE,
            "exampleFile": EXAMPLE_FILE, "expectCode": ERROR_CODE, "hoverWord": HOVER_WORD,
            "fixTitle": FIX_TITLE, "stepTimeoutMs": 60000, "generateTimeoutMs": 60000,
        }  # fmt: skip
        t0 = time.monotonic()
        driver = run_group(
            ["node", str(CODE_SERVER_DIR / "drive_vscode.js"), json.dumps(config)], timeout=DRIVER_TIMEOUT_S
        )
        timings[f"{scenario}: drive"] = time.monotonic() - t0
    (tools.out / f"driver-{scenario}.log").write_text(driver.stderr)
    # The extension host's logs hold the server's stderr and the LSP trace: keep them beside the screenshots.
    if (user_data / "logs").exists():
        shutil.copytree(user_data / "logs", tools.out / f"logs-{scenario}", dirs_exist_ok=True)
    lines = [ln for ln in driver.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        pytest.fail(f"driver printed no RESULT (exit {driver.returncode}):\n{driver.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    result["timings"] = dict(timings)
    (tools.out / f"result-{scenario}.json").write_text(json.dumps(result, indent=2))
    _log(f"{scenario}: artefacts (screenshots, logs, result-{scenario}.json) in {tools.out}")
    _log("timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
    return result


@pytest.fixture(scope="module")
def vscode_run(
    vscode_tools: VsCodeTools, e2e_workspace: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    home = tmp_path_factory.mktemp("code-server")
    return drive_code_server(vscode_tools, e2e_workspace, home, _user_settings(), "features")


@pytest.fixture(scope="module")
def vscode_start_failure(
    vscode_tools: VsCodeTools, e2e_workspace: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    home = tmp_path_factory.mktemp("code-server-broken")
    settings = {**_user_settings(), "tl.server.python": BROKEN_PYTHON}
    return drive_code_server(vscode_tools, e2e_workspace, home, settings, "startFailure")


def _step(run: dict[str, Any], name: str) -> dict[str, Any]:
    step: dict[str, Any] = run["steps"].get(name, {"ok": False, "error": "step did not run"})
    if not step["ok"]:
        pytest.fail(f"VS Code step {name!r} failed: {step.get('error')}\nscreenshots: {run['screenshots']}")
    return step


def test_workbench_opens(vscode_run: dict[str, Any]) -> None:
    _step(vscode_run, "workbench")
    assert "fatal" not in vscode_run


def test_diagnostics_show_as_squiggles_and_problems(vscode_run: dict[str, Any]) -> None:
    step = _step(vscode_run, "diagnostics")
    assert step["squiggles"] >= 1
    rows = [row for row in step["problems"] if ERROR_CODE in row]
    assert rows, step["problems"]
    assert any("Reshape" in row or "MMA_C" in row for row in rows), rows


def test_status_bar_shows_target(vscode_run: dict[str, Any]) -> None:
    step = _step(vscode_run, "statusBar")
    assert "sm_80" in step["text"], step["text"]


def test_hover_over_keyword(vscode_run: dict[str, Any]) -> None:
    step = _step(vscode_run, "hover")
    assert HOVER_WORD.lower() in step["text"].lower(), step["text"]
    assert len(step["text"]) > len(HOVER_WORD) + 10, step["text"]


def test_quick_fix_inserts_reshape(vscode_run: dict[str, Any]) -> None:
    step = _step(vscode_run, "quickFix")
    assert any(FIX_TITLE in title for title in step["offered"]), step["offered"]
    assert "Reshape S" not in step["before"]
    assert "Reshape S" in step["after"], step["after"]
    assert not any(ERROR_CODE in row for row in step["problemsAfter"]), step["problemsAfter"]


def test_generate_cuda_opens_cu_file(vscode_run: dict[str, Any], e2e_workspace: Path) -> None:
    step = _step(vscode_run, "generateCuda")
    assert step["tab"].endswith(".cu"), step["tab"]
    generated = e2e_workspace / step["tab"]
    assert generated.exists(), sorted(p.name for p in e2e_workspace.iterdir())
    assert "#include" in step["head"] or "cute" in step["head"], step["head"]


def test_restart_server_command(vscode_run: dict[str, Any], vscode_tools: VsCodeTools) -> None:
    step = _step(vscode_run, "restartServer")
    assert HOVER_WORD.lower() in step["hover"].lower(), step["hover"]
    # The extension's log shows two starts of the server process, both running.
    logs = list((vscode_tools.out / "logs-features").rglob("TL Language Server.log"))
    assert logs, "no extension log copied"
    text = logs[0].read_text()
    assert text.count("Starting TL Language Server:") == 2, text[-3000:]
    assert text.count("TL Language Server is running.") == 2, text[-3000:]


def test_server_start_failure_is_reported(vscode_start_failure: dict[str, Any]) -> None:
    text = _step(vscode_start_failure, "startFailure")["text"]
    assert f"{BROKEN_PYTHON} -m tl_language.cli lsp" in text, text
    assert "ENOENT" in text, text
    assert "tl.server.python" in text, text


def test_screenshots_saved(vscode_run: dict[str, Any]) -> None:
    shots = [Path(p) for p in vscode_run["screenshots"]]
    assert shots and all(p.stat().st_size > 10_000 for p in shots), shots
