"""TL501: each pattern the translator cannot translate is reported on the offending TL statement."""

from __future__ import annotations

import pytest
from translator_cases import example_text

from tl_language import analyze
from translator import TranslateError, make_plan, translate

MHA = example_text("mha_fwd")


def line_of(text: str, needle: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines()) if needle in ln)


def plan_error(text: str) -> TranslateError:
    with pytest.raises(TranslateError) as info:
        make_plan(analyze(text).model, text)
    return info.value


def only_tl501(err: TranslateError) -> list[int]:
    assert err.diagnostics and all(d.code == "TL501" for d in err.diagnostics), err.diagnostics
    return [d.range.start.line for d in err.diagnostics]


def test_sketch_holes_are_reported_on_the_copy() -> None:
    text = example_text("sketch_fwd")
    lines = only_tl501(plan_error(text))
    assert lines == [line_of(text, "Copy Q in coordinate")]
    assert "tile" in plan_error(text).diagnostics[0].message


@pytest.mark.parametrize(
    ("old", "new", "at", "words"),
    [
        # an operation outside the pattern, inside the loop
        ("    Compute Softmax S", "    Compute Softmax S\n    Compute Exp S and get new S", "Compute Exp",
         "before the Softmax"),
        # the coordinate of K is not the loop variable
        ("Copy K (BN, d) in coordinate [L = j]", "Copy K (BN, d) in coordinate [L = block_m]", "Copy K (BN",
         "indexed by `j`"),
        # a second softmax
        ("    Compute Softmax S", "    Compute Softmax S\n    Compute Softmax S", "Compute Softmax",
         "second"),
        # head dim that no swizzle atom fits
        ("Param d = 128", "Param d = 80", "Copy K (BN", "multiples of 32"),
        # unsupported stage count
        ("Param stages = 2", "Param stages = 3", "Param stages", "stages = 3"),
        # warps that do not give whole MMA tiles
        ("Param warps = 4", "Param warps = 16", "Copy Q (BM", "whole 16-row"),
        # the loop does not start at 0
        ("for j = 0: seqlen_k / BN", "for j = 1: seqlen_k / BN", "for j", "from 0"),
        # fp8 has no mma.sync kernel here
        ("Dtype bf16", "Dtype fp8_e4m3", "Dtype", "fp8_e4m3"),
        # sm_75 tensor cores take fp16 only
        ("Target sm_80", "Target sm_75", "Dtype", "fp16 only"),
    ],
)
def test_unsupported_pattern(old: str, new: str, at: str, words: str) -> None:
    text = MHA.replace(old, new, 1)
    assert text != MHA
    err = plan_error(text)
    lines = only_tl501(err)
    found = [i for i, ln in enumerate(text.splitlines()) if at in ln]
    assert set(lines) & set(found), (lines, found, [d.message for d in err.diagnostics])
    assert any(words in d.message for d in err.diagnostics), [d.message for d in err.diagnostics]


def test_missing_softmax_names_the_pattern() -> None:
    text = MHA.replace("    Compute Softmax S", "", 1)
    err = plan_error(text)
    only_tl501(err)
    assert any("softmax" in d.message.lower() and "rowsum" in d.message for d in err.diagnostics)


def test_two_loops_are_unsupported() -> None:
    text = MHA.replace("Compute Divide", "for i = 0: 2\nend\nCompute Divide", 1)
    err = plan_error(text)
    assert "loops" in err.diagnostics[0].message


def test_document_errors_are_passed_through() -> None:
    text = MHA.replace("Copy K (BN, d)", "Cpy K (BN, d)", 1)
    analysis = analyze(text)
    assert analysis.has_errors
    with pytest.raises(TranslateError) as info:
        translate(analysis)
    assert {d.code for d in info.value.diagnostics} == {d.code for d in analysis.diagnostics
                                                         if d.severity.name == "ERROR"}
