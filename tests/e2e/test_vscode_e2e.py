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
from pathlib import Path
from typing import Any

import pytest
from conftest import ERROR_CODE, ERROR_FILE, server_command, unavailable
from e2e_install import (
    CODE_SERVER_BIN,
    CODE_SERVER_DIR,
    InstallError,
    ensure_apt,
    ensure_code_server,
    ensure_vsix,
    node_problem,
)
from editor_process import free_port, process_group, wait_http

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

EXAMPLE_FILE = "mha_fwd.tl"
HOVER_WORD = "Softmax"
FIX_TITLE = "Reshape"
DRIVER_TIMEOUT_S = 300


def _log(message: str) -> None:
    print(f"[vscode-e2e] {message}", file=sys.stderr, flush=True)


def _user_settings(workspace: Path) -> dict[str, Any]:
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


@pytest.fixture(scope="module")
def vscode_run(
    e2e_workspace: Path, artifacts_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    timings: dict[str, float] = {}
    started = time.monotonic()
    if reason := node_problem():
        unavailable(reason)
    try:
        if reason := ensure_apt(["chromium", "rg", "krb5-config"]):
            unavailable(reason)
        timings["apt"] = time.monotonic() - started
        vsix = ensure_vsix()
        timings["vsix"] = time.monotonic() - started - sum(timings.values())
        ensure_code_server()
        timings["code-server install"] = time.monotonic() - started - sum(timings.values())
    except (InstallError, subprocess.TimeoutExpired) as error:
        unavailable(f"could not install the VS Code test tools: {error}")
    chromium = shutil.which("chromium")
    assert chromium is not None

    out = artifacts_dir / "vscode"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    home = tmp_path_factory.mktemp("code-server")
    user_data, extensions = home / "user-data", home / "extensions"
    (user_data / "User").mkdir(parents=True)
    (user_data / "User" / "settings.json").write_text(json.dumps(_user_settings(e2e_workspace), indent=2))

    base = [str(CODE_SERVER_BIN), "--user-data-dir", str(user_data), "--extensions-dir", str(extensions)]
    t0 = time.monotonic()
    subprocess.run([*base, "--install-extension", str(vsix)], check=True, capture_output=True, timeout=120)
    timings["install vsix"] = time.monotonic() - t0

    port = free_port()
    cmd = [*base, "--auth", "none", "--bind-addr", f"127.0.0.1:{port}", "--disable-telemetry",
           "--disable-update-check", "--disable-workspace-trust", str(e2e_workspace)]  # fmt: skip
    with process_group(cmd, out / "code-server.log") as proc:
        t0 = time.monotonic()
        wait_http(f"http://127.0.0.1:{port}/healthz", timeout=60, proc=proc)
        timings["code-server start"] = time.monotonic() - t0
        config = {
            "url": f"http://127.0.0.1:{port}", "chromium": chromium, "artifacts": str(out),
            "workspace": str(e2e_workspace), "errorFile": ERROR_FILE, "exampleFile": EXAMPLE_FILE,
            "expectCode": ERROR_CODE, "hoverWord": HOVER_WORD, "fixTitle": FIX_TITLE,
            "stepTimeoutMs": 60000, "generateTimeoutMs": 120000,
        }  # fmt: skip
        t0 = time.monotonic()
        driver = subprocess.run(
            ["node", str(CODE_SERVER_DIR / "drive_vscode.js"), json.dumps(config)],
            capture_output=True,
            text=True,
            timeout=DRIVER_TIMEOUT_S,
            check=False,
        )
        timings["drive"] = time.monotonic() - t0
    (out / "driver.log").write_text(driver.stderr)
    # The extension host's logs hold the server's stderr and the LSP trace: keep them beside the screenshots.
    logs = user_data / "logs"
    if logs.exists():
        shutil.copytree(logs, out / "logs", dirs_exist_ok=True)
    lines = [ln for ln in driver.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        pytest.fail(f"driver printed no RESULT (exit {driver.returncode}):\n{driver.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    timings["total"] = time.monotonic() - started
    result["timings"] = timings
    (out / "result.json").write_text(json.dumps(result, indent=2))
    _log(f"artefacts (screenshots, logs, result.json) in {out}")
    _log("timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
    return result


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


def test_screenshots_saved(vscode_run: dict[str, Any]) -> None:
    shots = [Path(p) for p in vscode_run["screenshots"]]
    assert shots and all(p.stat().st_size > 10_000 for p in shots), shots
