"""`tl generate`, `tl complete`, `tl tune` through the real `tl` entry point."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI

from tl_language import analyze
from tl_language.cli import main
from translator.planner.measure import device_status

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
LLM_ENV = ("OPENAI_API_KEY", "TL_LLM_BASE_URL", "OPENAI_BASE_URL", "TL_LLM_MODEL", "TL_LLM_TIMEOUT")


@pytest.fixture(autouse=True)
def no_llm_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in LLM_ENV:
        monkeypatch.delenv(name, raising=False)


def test_generate_offline_prints_sketch_code_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "gqa.tl"
    rc = main(["generate", "a causal GQA kernel, bf16, head dim 64, group 4, for A100", "-o", str(out)])
    stdout = capsys.readouterr().out
    assert rc == 0
    assert stdout.startswith("# offline generator: no LLM endpoint configured")
    sketch_at, code_at, check_at = (stdout.index(h) for h in ("── sketch", "── code", "── check"))
    assert sketch_at < code_at < check_at
    assert "Param BM = ?" in stdout[sketch_at:code_at] and "Param BM = ?" not in stdout[code_at:check_at]
    assert "ok: 0 error(s), 0 warning(s) (offline generator)" in stdout
    written = analyze(out.read_text())
    assert not written.has_errors
    assert written.model.params["group"].value == 4 and written.model.params["d"].value == 64
    assert written.model.dtype == "bf16" and written.model.mask == "causal"


def test_generate_with_the_model(
    fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = fake_openai.load("missing_reshape")
    monkeypatch.setenv("TL_LLM_BASE_URL", fake.base_url)
    monkeypatch.setenv("TL_LLM_MODEL", "test-model")
    rc = main(["generate", "causal MHA fp16 head dim 128 on A100", "--rounds", "2"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "ok: 0 error(s), 0 warning(s) (1 repair round(s), 3 answer(s))" in captured.out
    assert "sketch: repair round 1: asking test-model" in captured.err
    assert len(fake.requests) == 3


def test_complete_prints_and_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "sketch.tl"
    shutil.copy(EXAMPLES / "sketch_fwd.tl", path)
    assert main(["complete", str(path)]) == 0
    printed = capsys.readouterr().out
    assert "Param BM = 128" in printed and path.read_text() == (EXAMPLES / "sketch_fwd.tl").read_text()
    assert main(["complete", str(path), "--write"]) == 0
    assert path.read_text() == printed
    assert main(["complete", str(path), "--write"]) == 0
    assert "nothing to fill" in capsys.readouterr().err


def test_complete_llm_without_endpoint_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["complete", str(EXAMPLES / "sketch_fwd.tl"), "--llm"]) == 2
    assert "tl complete: no LLM endpoint configured: set TL_LLM_BASE_URL" in capsys.readouterr().err


def test_complete_unreadable_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["complete", str(tmp_path / "missing.tl")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_bad_shape_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", str(EXAMPLES / "mha_fwd.tl"), "--shape", "4,16"]) == 2
    assert "shape `4,16` is not B,H,Sq,Sk" in capsys.readouterr().err


@pytest.mark.skipif(device_status() is None, reason="a GPU is present: tune measures instead")
def test_tune_without_gpu_prints_the_ranking_and_exits_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mha.tl"
    shutil.copy(EXAMPLES / "mha_fwd.tl", path)
    rc = main(["tune", str(path), "--shape", "2,16,4096,4096", "--top", "3", "--yes"])
    captured = capsys.readouterr()
    assert rc == 3
    assert captured.out.startswith("planner ranking for sm_80 bf16, shape B,H,Sq,Sk = 2,16,4096,4096")
    assert "   1. BM=" in captured.out
    assert "tl tune: no GPU measurement:" in captured.err
    assert path.read_text() == (EXAMPLES / "mha_fwd.tl").read_text()  # nothing written without a measurement
