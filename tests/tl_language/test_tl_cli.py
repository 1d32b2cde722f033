"""`tl check`, `tl fmt`, `tl codes`: output format, exit codes 0/1/2, unreadable input without tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tl_language import cli

ROOT = Path(__file__).resolve().parents[2]
CLEAN = "Target sm_80\nDtype fp16\nParam BM = 64\n"
BROKEN = "Target sm_80\nDtype fp16\nParam BM = 64\nCopy Q from shraed to register\n"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_check_clean_examples_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["check", *map(str, sorted((ROOT / "examples").glob("*.tl")))], capsys)
    assert code == 0
    assert "error[" not in out and "warning[" not in out


def test_check_reports_one_based_positions_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "bad.tl"
    f.write_text(BROKEN, encoding="utf-8")
    code, out, _ = run(["check", str(f)], capsys)
    assert code == 1
    assert f"{f}:4:13: error[TL106] unknown memory level `shraed`" in out


def test_check_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "bad.tl"
    f.write_text(BROKEN, encoding="utf-8")
    code, out, _ = run(["check", "--format", "json", str(f)], capsys)
    records = json.loads(out)
    assert code == 1
    hit = next(r for r in records if r["code"] == "TL106")
    assert hit["file"] == str(f) and hit["range"]["start"] == {"line": 3, "character": 12}
    assert hit["fixes"][0]["edits"][0]["newText"] == "shared"


@pytest.mark.parametrize(("name", "content", "reason"), [
    ("latin1.tl", "Param x = 1 # caf\xe9\n".encode("latin-1"), "not UTF-8"),
    ("binary.tl", b"\x7fELF\x00\x01\x02", "binary file"),
    ("missing.tl", None, "no such file"),
])
def test_unreadable_input_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, content: bytes | None, reason: str
) -> None:
    f = tmp_path / name
    if content is not None:
        f.write_bytes(content)
    code, _, err = run(["check", str(f)], capsys)
    assert code == 2
    assert reason in err and "Traceback" not in err
    code, _, err = run(["fmt", "--check", str(f)], capsys)
    assert code == 2 and reason in err


def test_directory_and_empty_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["check", str(tmp_path)], capsys)
    assert code == 2 and "is a directory" in err
    empty = tmp_path / "empty.tl"
    empty.write_bytes(b"")
    code, out, _ = run(["check", str(empty)], capsys)
    assert code == 0 and out == ""


def test_unreadable_wins_over_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.tl"
    bad.write_text(BROKEN, encoding="utf-8")
    code, out, _ = run(["check", str(bad), str(tmp_path / "nope.tl")], capsys)
    assert code == 2 and "TL106" in out


def test_fmt_check_and_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "a.tl"
    f.write_text("param BM=64\n", encoding="utf-8")
    code, out, _ = run(["fmt", "--check", str(f)], capsys)
    assert code == 1 and str(f) in out and f.read_text(encoding="utf-8") == "param BM=64\n"
    code, _, _ = run(["fmt", str(f)], capsys)
    assert code == 0 and f.read_text(encoding="utf-8") == "Param BM = 64\n"
    code, out, _ = run(["fmt", "--check", str(f)], capsys)
    assert code == 0 and out == ""


def test_codes_listing_and_markdown(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["codes"], capsys)
    assert code == 0 and "TL202" in out and "missing-reshape" in out
    code, out, _ = run(["codes", "--markdown"], capsys)
    assert code == 0 and out.startswith("# TL diagnostics")


def test_plugins_register_subcommands(monkeypatch: pytest.MonkeyPatch) -> None:
    plugin = types.ModuleType("server.cli")

    def register(sub) -> None:  # type: ignore[no-untyped-def]
        p = sub.add_parser("hello")
        p.set_defaults(func=lambda args: 7)

    plugin.register = register  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "server.cli", plugin)
    assert cli.main(["hello"]) == 7


def test_a_missing_plugin_is_skipped_but_a_broken_one_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli._optional_import("no_such_package_xyz.cli") is None

    def boom(name: str) -> object:
        if name == "pipeline.cli":
            raise ModuleNotFoundError("No module named 'openai'", name="openai")
        raise ModuleNotFoundError(name=name)

    monkeypatch.setattr(cli.importlib, "import_module", boom)
    with pytest.raises(ModuleNotFoundError):
        cli.build_parser()


def test_console_script_runs_as_a_process(tmp_path: Path) -> None:
    f = tmp_path / "x.tl"
    f.write_bytes(b"\xff\xfe\x00")
    proc = subprocess.run([sys.executable, "-m", "tl_language.cli", "check", str(f)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    help_text = subprocess.run([sys.executable, "-m", "tl_language.cli", "check", "--help"],
                               capture_output=True, text=True, check=False).stdout
    assert "1-based" in help_text
