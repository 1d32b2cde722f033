"""The extension builds, lints, type-checks, passes its grammar tests and packages into a complete .vsix."""

from __future__ import annotations

import json
import subprocess
import zipfile

import pytest
from e2e_common import unavailable
from e2e_install import EXTENSION, InstallError, ensure_vsix, node_problem

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def vsix() -> zipfile.ZipFile:
    if reason := node_problem():
        unavailable(reason)
    try:
        path = ensure_vsix()
    except (InstallError, subprocess.TimeoutExpired) as error:
        unavailable(f"could not build the extension: {error}")
    return zipfile.ZipFile(path)


@pytest.mark.parametrize("script", ["lint", "typecheck", "test"])
def test_npm_script_clean(vsix: zipfile.ZipFile, script: str) -> None:
    cmd = ["npm", "run", "--silent", script]
    proc = subprocess.run(cmd, cwd=EXTENSION, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, f"npm run {script}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"


def test_vsix_holds_bundle_and_contributions(vsix: zipfile.ZipFile) -> None:
    names = set(vsix.namelist())
    for required in (
        "extension/dist/extension.js",
        "extension/package.json",
        "extension/language-configuration.json",
        "extension/syntaxes/tl.tmLanguage.json",
        "extension/snippets/tl.json",
        "extension/LICENSE.txt",
    ):
        assert required in names, sorted(names)
    # The client library is bundled by esbuild: no node_modules, no TypeScript sources.
    assert not any("node_modules/" in n or n.endswith(".ts") for n in names), sorted(names)


def test_contributed_commands_have_handlers(vsix: zipfile.ZipFile) -> None:
    manifest = json.loads(vsix.read("extension/package.json"))
    bundle = vsix.read("extension/dist/extension.js").decode()
    contributed = {c["command"] for c in manifest["contributes"]["commands"]}
    mirrors = {"tl.editor.generateCuda", "tl.editor.verify", "tl.editor.benchmark", "tl.editor.format"}
    assert mirrors <= contributed
    for command in contributed:
        assert command in bundle, f"{command} is contributed but never registered"
    for menu in manifest["contributes"]["menus"].values():
        assert {item["command"] for item in menu} <= contributed


def test_snippets_and_language_configuration_parse(vsix: zipfile.ZipFile) -> None:
    snippets = json.loads(vsix.read("extension/snippets/tl.json"))
    assert "attention" in {s["prefix"] for s in snippets.values()}
    config = json.loads(vsix.read("extension/language-configuration.json"))
    assert config["comments"]["lineComment"] == "#"
    assert config["folding"]["markers"]["start"]
