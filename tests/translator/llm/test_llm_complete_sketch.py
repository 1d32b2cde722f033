"""`tl complete` on the paper's statements-only sketch: stage 2 offline (print, --diff, --write, the header
options) and with the model, whose answer the same checks and repair loop judge."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fake_openai import RECORDINGS, FakeOpenAI

from tl_language import analyze
from tl_language.cli import main
from tl_language.diagnostics import Severity
from translator import translate
from translator.llm.extract import extract_tl
from translator.llm.settings import LlmSettings, Secret
from translator.llm.workflow import complete

ROOT = Path(__file__).resolve().parents[3]
PAPER = ROOT / "examples" / "sketches" / "sketch_paper.tl"
LLM_ENV = ("OPENAI_API_KEY", "TL_LLM_BASE_URL", "OPENAI_BASE_URL", "TL_LLM_MODEL", "TL_LLM_TIMEOUT")


@pytest.fixture(autouse=True)
def no_llm_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in LLM_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def sketch(tmp_path: Path) -> Path:
    path = tmp_path / "paper_fwd.tl"
    shutil.copy(PAPER, path)
    return path


def buildable(text: str) -> None:
    analysis = analyze(text)
    assert not [d for d in analysis.diagnostics if d.severity <= Severity.WARNING], analysis.diagnostics
    assert not analysis.model.is_sketch
    translate(analysis)


def test_complete_prints_tl_code_that_builds(sketch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["complete", str(sketch)]) == 0
    out = capsys.readouterr()
    buildable(out.out)
    assert out.out.startswith("# The paper's first stage")  # the sketch's own comment leads, as written
    assert "Kernel paper_fwd" in out.out  # the file's name
    assert "note: assumed head dimension 128" in out.err
    assert sketch.read_text() == PAPER.read_text()  # nothing written without --write


def test_complete_diff_shows_only_what_stage_2_adds(sketch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["complete", str(sketch), "--diff"]) == 0
    diff = capsys.readouterr().out
    assert diff.startswith(f"--- {sketch}\n+++ {sketch} (completed)\n")
    added = [ln[1:] for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    removed = [ln[1:] for ln in diff.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    assert "Allocate Q in global (seqlen_q, d) with offset q_offset" in added
    assert "for j = 0: seqlen_k / BN" in added and "for j = 0: N" in removed
    assert not [ln for ln in removed if ln.startswith("#")]  # comments are never removed


def test_complete_write_for_sm90(sketch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["complete", str(sketch), "--write", "--target", "sm_90", "--dtype", "bf16", "--head-dim", "64"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert f"wrote {sketch}" in err
    text = sketch.read_text()
    buildable(text)
    model = analyze(text).model
    assert (model.target.arch, model.dtype, model.params["d"].value) == ("sm_90", "bf16", 64)
    assert main(["check", str(sketch)]) == 0


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--target", "sm_99", "unknown target"),
        ("--dtype", "fp64", "unknown dtype"),
        ("--head-dim", "80", "80"),
    ],
)
def test_bad_header_options_are_usage_errors(
    sketch: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, says: str
) -> None:
    assert main(["complete", str(sketch), flag, value]) == 2
    assert says in capsys.readouterr().err


def settings(fake: FakeOpenAI) -> LlmSettings:
    return LlmSettings(
        base_url=fake.base_url, model="test-model", api_key=Secret("sk-x"), timeout_s=5.0, retries=1,
        backoff_s=0.01,
    )  # fmt: skip


def test_complete_with_the_model_does_stage_2_and_is_repaired(fake_openai: FakeOpenAI) -> None:
    fake = fake_openai.load("complete_sketch")
    r = complete(PAPER.read_text(), settings(fake), rounds=2, stages=[])
    assert r.ok and not r.offline and r.rounds == 1
    answers = json.loads((RECORDINGS / "complete_sketch.json").read_text())["responses"]
    assert r.text == extract_tl(answers[1]["content"])
    first = fake.requests[0].last_user
    # the prompt asks for stage 2, lists what the sketch lacks, and ranks the tilings of its completion
    assert "sketch of bare statements" in first
    assert "TL453" in first and "TL455" in first and "TL456" in first
    assert "1. BM=" in first
    # the answer without the Reshape was judged by the checker and sent back
    assert "TL202 error" in fake.requests[1].last_user
