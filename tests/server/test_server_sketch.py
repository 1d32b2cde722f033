"""The language server's stage 2: the "Complete sketch" code action and command (the edit `tl complete`
makes, as line edits), and completions while a sketch is being written."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from lsprotocol import types as lsp

from server.features.completion import complete
from server.sketch import COMMAND, completion_edits, is_sketch, line_edits
from tl_language import analyze
from tl_language.source import LineText
from translator.planner.sketch import complete_sketch

ROOT = Path(__file__).resolve().parents[2]
PAPER = (ROOT / "examples" / "sketches" / "sketch_paper.tl").read_text(encoding="utf-8")
MHA = (ROOT / "examples" / "mha_fwd.tl").read_text(encoding="utf-8")


def apply(text: str, edits: list[lsp.TextEdit]) -> str:
    """Apply edits whose positions are UTF-16 columns of `text` (LSP's), last first."""
    lines = text.split("\n")
    offsets = [0]
    for s in lines:
        offsets.append(offsets[-1] + len(s) + 1)

    def at(p: lsp.Position) -> int:
        return offsets[p.line] + LineText(p.line, lines[p.line]).index(p.character)

    for e in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        text = text[: at(e.range.start)] + e.new_text + text[at(e.range.end) :]
    return text


lines = st.lists(st.sampled_from(["a", "b", "", "Copy Q", "end", "# 𝔸 é"]), max_size=8)


@settings(max_examples=300, deadline=None)
@given(lines, lines)
def test_line_edits_turn_the_old_text_into_the_new(old: list[str], new: list[str]) -> None:
    a, b = "\n".join(old), "\n".join(new)
    assert apply(a, line_edits(a, b)) == b


def test_the_edit_is_stage_2_and_keeps_untouched_lines() -> None:
    analysis = analyze(PAPER)
    edits = completion_edits(analysis)
    assert edits
    assert apply(PAPER, edits) == complete_sketch(PAPER).text
    # the sketch's comment lines and its `Copy Q from shared to register` are not rewritten
    touched = {ln for e in edits for ln in range(e.range.start.line, e.range.end.line)}
    kept = [
        i
        for i, ln in enumerate(PAPER.splitlines())
        if ln.startswith("#") or ln == "Copy Q from shared to register"
    ]
    assert not touched & set(kept)


def test_the_tl_target_setting_is_the_target_of_a_sketch_without_one() -> None:
    edits = completion_edits(analyze(PAPER), "sm_90")
    assert edits and "Target sm_90" in apply(PAPER, edits)


def test_tl_code_is_not_offered_a_completion() -> None:
    assert not is_sketch(analyze(MHA))
    assert completion_edits(analyze(MHA)) is None


def labels(text: str, line: int, col: int, uri: str | None = None) -> list[lsp.CompletionItem]:
    return complete(analyze(text), line, col, uri)


def test_a_blank_line_of_a_sketch_offers_complete_sketch_first() -> None:
    n = len(PAPER.splitlines())
    items = labels(PAPER + "\n", n, 0, "file:///paper.tl")
    assert items[0].label == "Complete sketch"
    assert items[0].command is not None and items[0].command.command == COMMAND
    assert items[0].command.arguments == ["file:///paper.tl"]
    assert "Complete sketch" not in [
        i.label for i in labels(MHA + "\n", len(MHA.splitlines()), 0, "file:///m.tl")
    ]


def test_a_copy_being_written_in_a_sketch_gets_its_tile_and_coordinate() -> None:
    text = "Copy Q "
    q = labels(text, 0, len(text))
    assert q[0].label == "(BM, d) in coordinate [L = …] from global to shared"
    assert "[L = ${1:block_m}]" in (q[0].insert_text or "")
    k = labels("Copy K ", 0, len("Copy K "))
    assert k[0].label.startswith("(BN, d) in coordinate") and "[L = ${1:j}]" in (k[0].insert_text or "")


def test_a_loop_bound_being_written_offers_the_key_blocks() -> None:
    text = "Param BN = 64\nfor j = 0: "
    items = labels(text, 1, len("for j = 0: "))
    assert items[0].label == "seqlen_k / BN"
