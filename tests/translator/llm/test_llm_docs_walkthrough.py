"""The two-stage walkthrough in docs/language.md (*Sketches*) and docs/llm.md shows what the tools do now:
its sketch is the example, its TL code is `tl complete`'s output, its CUDA lines are in the generated
source, and its `tl check` and `--diff` excerpts are in their real output."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import pytest

from tl_language import analyze
from tl_language.cli import main
from translator import translate
from translator.planner.sketch import complete_sketch

ROOT = Path(__file__).resolve().parents[3]
PAPER = (ROOT / "examples" / "sketches" / "sketch_paper.tl").read_text(encoding="utf-8")
LANGUAGE = (ROOT / "docs" / "language.md").read_text(encoding="utf-8")
LLM = (ROOT / "docs" / "llm.md").read_text(encoding="utf-8")


def blocks(doc: str, section: str, lang: str) -> list[str]:
    """The fenced `lang` blocks of `section` (from its heading to the next `## ` heading)."""
    start = doc.index(section)
    end = doc.find("\n## ", start + len(section))
    text = doc[start : end if end >= 0 else None]
    return re.findall(rf"```{lang}\n(.*?)```", text, re.DOTALL)


def body(text: str) -> str:
    """Without the example's two leading comment lines."""
    return text.split("\n", 2)[2].rstrip() + "\n"


COMPLETED = complete_sketch(PAPER, kernel="paper_fwd").text


def test_the_sketch_and_the_tl_code_are_what_the_tools_give() -> None:
    sketch, code = blocks(LANGUAGE, "## Sketches", "tl")
    assert sketch == body(PAPER)
    assert code == body(COMPLETED)


def test_the_cuda_lines_are_in_the_generated_source() -> None:
    (cuda,) = blocks(LANGUAGE, "## Sketches", "cuda")
    source = translate(analyze(COMPLETED), tl_path="paper_fwd.tl").source.splitlines()
    for line in cuda.splitlines():
        if line != "…":
            assert line in source, line


def test_the_check_and_diff_excerpts_are_real(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "paper_fwd.tl"
    path.write_text(PAPER, encoding="utf-8")
    main(["check", str(path)])
    out = capsys.readouterr()
    check = (out.out + out.err).replace(str(path), "paper_fwd.tl").splitlines()
    (excerpt,) = [b for b in blocks(LLM, "## The two stages on one example", "") if "tl check" in b]
    for line in excerpt.splitlines()[1:]:
        if line != "…":
            assert line in check, line
    (diff,) = blocks(LLM, "## The two stages on one example", "diff")
    real = list(difflib.unified_diff(PAPER.splitlines(), COMPLETED.splitlines(), lineterm=""))
    for line in diff.splitlines():
        assert line in real, line
