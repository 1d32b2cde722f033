"""The import layers of docs/architecture.md (Invariants): the import-linter contracts in pyproject.toml.

They run on this checkout, and on a temporary copy of its packages with forbidden imports added, which
shows that each contract catches a violation, direct or through another package, and that the one runner
module the translator may import (runner.abi, the kernel ABI) stays allowed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
PACKAGES: list[str] = CONFIG["root_packages"]
# Each contract guards one package: name it by that package.
CONTRACT = {c["source_modules"][0]: c["name"] for c in CONFIG["contracts"]}
PROBE = "_layer_probe"
# The summary line of each contract: `<name> KEPT` or `<name> BROKEN (n ignored imports)`.
_VERDICT = re.compile(r"^(?P<name>.+?) (?P<verdict>KEPT|BROKEN)\b", re.MULTILINE)


def lint_imports(root: Path) -> tuple[int, dict[str, str], str]:
    """Run the contracts of root/pyproject.toml on the packages under root: (exit code, verdicts, report).

    A subprocess, so that grimp finds the packages under root and not the ones this process imported."""
    env = {
        **os.environ,
        "PYTHONPATH": str(root),
        "COLUMNS": "10000",  # one summary line per contract: rich wraps at the terminal width
        "NO_COLOR": "1",
    }
    lint = "from importlinter.cli import lint_imports_command; lint_imports_command()"
    res = subprocess.run(
        [sys.executable, "-c", lint, "--no-cache", "--no-logo", str(root / "pyproject.toml")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
        env=env,
    )
    report = res.stdout + res.stderr
    verdicts = {
        m["name"]: m["verdict"] for m in _VERDICT.finditer(res.stdout) if m["name"] in CONTRACT.values()
    }
    return res.returncode, verdicts, report


def test_every_contract_is_kept() -> None:
    code, verdicts, report = lint_imports(REPO)
    assert code == 0, report
    assert verdicts == dict.fromkeys(CONTRACT.values(), "KEPT"), report


@pytest.fixture(scope="module")
def checkout_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkout's packages (their Python files) and pyproject.toml, once for all the cases below."""
    root = tmp_path_factory.mktemp("layers")
    for pkg in PACKAGES:
        shutil.copytree(REPO / pkg, root / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


@pytest.fixture
def probed(checkout_copy: Path) -> Iterator[Callable[[dict[str, str]], Path]]:
    """Writes package → source as a probe module in each package of the copy; removed after the test."""
    written: list[Path] = []

    def write(modules: dict[str, str]) -> Path:
        for pkg, source in modules.items():
            path = checkout_copy / pkg / f"{PROBE}.py"
            path.write_text(source + "\n")
            written.append(path)
        return checkout_copy

    yield write
    for path in written:
        path.unlink(missing_ok=True)


# (package → its probe module's source, the packages whose contracts that breaks)
CASES: list[tuple[dict[str, str], set[str]]] = [
    ({"tl_language": "import translator.plan"}, {"tl_language"}),
    ({"tl_language": "import kernel_ir"}, {"tl_language"}),
    ({"tl_language": "import torch"}, {"tl_language"}),
    ({"tl_language": "from pygls.server import LanguageServer"}, {"tl_language"}),
    ({"tl_language": "import cuda.core"}, {"tl_language"}),
    ({"translator": "import pipeline.build"}, {"translator"}),
    ({"translator": "import server"}, {"translator"}),
    ({"translator": "import torch"}, {"translator"}),
    ({"translator": "from runner.launch import load"}, {"translator"}),
    ({"translator": "import runner"}, {"translator"}),
    ({"runner": "from tl_language import analyze"}, {"runner"}),
    ({"runner": "import translator.plan"}, {"runner"}),
    ({"runner": "import pipeline"}, {"runner"}),
    ({"kernel_ir": "import tl_language"}, {"kernel_ir"}),
    ({"kernel_ir": "from runner.abi import LaunchSpec"}, {"kernel_ir"}),
    ({"kernel_ir": "import torch"}, {"kernel_ir"}),
    ({"runner": "import tl_attention"}, {"runner"}),
    ({"pipeline": "from tl_attention import compile"}, {"pipeline"}),
    ({"tl_attention": "import server"}, {"tl_attention"}),
    # Indirect: translator reaches torch only through a module of tl_language.
    (
        {"tl_language": "import torch", "translator": f"import tl_language.{PROBE}"},
        {"tl_language", "translator"},
    ),
]


@pytest.mark.parametrize(
    ("modules", "broken"), CASES, ids=[" + ".join(f"{k}: {v}" for k, v in m.items()) for m, _ in CASES]
)
def test_a_forbidden_import_breaks_its_contract(
    probed: Callable[[dict[str, str]], Path], modules: dict[str, str], broken: set[str]
) -> None:
    code, verdicts, report = lint_imports(probed(modules))
    assert code != 0, report
    assert verdicts == {n: "BROKEN" if pkg in broken else "KEPT" for pkg, n in CONTRACT.items()}, report
    for pkg in broken:
        assert f"{pkg}.{PROBE} -> " in report, report  # the report names the offending import


def test_the_translator_may_import_the_kernel_abi(probed: Callable[[dict[str, str]], Path]) -> None:
    code, verdicts, report = lint_imports(probed({"translator": "from runner.abi import LaunchSpec"}))
    assert code == 0, report
    assert verdicts == dict.fromkeys(CONTRACT.values(), "KEPT"), report
