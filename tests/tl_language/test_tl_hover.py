"""Hover: every kind of word gets markdown from the model; comments show diagnostic codes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tl_language import Position, analyze
from tl_language.hover import hover

ROOT = Path(__file__).resolve().parents[2]
MHA = (ROOT / "examples" / "mha_fwd.tl").read_text(encoding="utf-8")


def at(text: str, needle: str, line_hint: str | None = None, offset: int = 0) -> Position:
    """The position of `needle` (on the first line containing `line_hint`, default the needle)."""
    for n, line in enumerate(text.splitlines()):
        if (line_hint or needle) in line and needle in line:
            return Position(n, line.index(needle) + offset)
    raise AssertionError(f"{needle!r} not found")


@pytest.fixture(scope="module")
def mha():  # type: ignore[no-untyped-def]
    return analyze(MHA)


@pytest.mark.parametrize(
    ("needle", "line_hint", "expect"),
    [
        ("Allocate", None, "**Allocate**"),
        ("Copy", None, "**Copy**"),
        ("Compute", None, "**Compute**"),
        ("Reshape", None, "**Reshape**"),
        ("for", "for j", "**for**"),
        ("end", "end", "**end**"),
        ("Kernel", None, "shared memory 98,304"),
        ("GEMM", None, "Q·Kᵀ"),
        ("Softmax", None, "online softmax".capitalize()),
        ("Multiply", None, "Elementwise product"),
        ("Divide", None, "row vector"),
        ("global", "Allocate Q", "**global**"),
        ("shared", "Copy Q (BM", "**shared** memory"),
        ("register", "Allocate S", "**register**"),
        ("sm_80", None, "A100 (108 SMs)"),
        ("bf16", "Dtype", "2 byte(s)"),
        ("none", "Mask", "no mask"),
        ("BM", "Param BM", "query rows per thread block"),
        ("stages", "Param stages", "shared memory per block: 98,304 of 166,912"),
        ("warps", "Param warps", "registers per thread ≈ 232"),
        ("seqlen_q", "Allocate Q", "number of query rows"),
        ("scale", "Multiply", "softmax scale"),
        ("j", "for j", "loop variable"),
        ("MMA_C", None, "accumulator fragment"),
        ("coordinate", "Copy Q (BM", "which tile"),
        ("accumulate", None, "added to X"),
    ],
)
def test_hover_words(mha, needle: str, line_hint: str | None, expect: str) -> None:  # type: ignore[no-untyped-def]
    h = hover(mha, at(MHA, needle, line_hint))
    assert h is not None, needle
    assert expect in h.markdown
    assert h.range.start.line == h.range.end.line


def test_tensor_hover_shows_levels_shapes_bytes_and_registers(mha) -> None:  # type: ignore[no-untyped-def]
    h = hover(mha, at(MHA, "Q", "Copy Q (BM"))
    assert h is not None
    assert "global: (seqlen_q, d)" in h.markdown
    assert "shared: (BM, d) = (128, 128), bf16" in h.markdown and "32,768 bytes" in h.markdown
    acc = hover(mha, at(MHA, "acc_o", "Allocate acc_o"))
    assert acc is not None and "fp32" in acc.markdown and "128 registers per thread" in acc.markdown


def test_hover_on_a_code_in_a_comment_shows_the_registry_entry() -> None:
    a = analyze("Param x = 1  # see TL202\n")
    h = hover(a, Position(0, 20))
    assert h is not None and "missing-reshape" in h.markdown and h.range.start.character == 19


def test_nothing_to_say() -> None:
    a = analyze("Param x = 1  # just a note\n\n")
    assert hover(a, Position(0, 16)) is None
    assert hover(a, Position(1, 0)) is None
    assert hover(a, Position(5, 0)) is None
    assert hover(a, Position(0, 10)) is None  # a number


def test_hover_on_a_hole_and_in_a_sketch() -> None:
    text = (ROOT / "examples" / "sketch_fwd.tl").read_text(encoding="utf-8")
    a = analyze(text)
    h = hover(a, at(text, "?"))
    assert h is not None and "hole" in h.markdown
    q = hover(a, at(text, "Q", "Copy Q in"))
    assert q is not None and "no tile yet" in q.markdown


def test_hover_uses_utf16_columns() -> None:
    text = "Param 𝔸x = 1\nParam BM = 64 # 𝔸\n"
    a = analyze(text)
    h = hover(a, Position(1, 6))
    assert h is not None and "**Param** `BM`" in h.markdown


def test_hover_explains_the_hopper_switches() -> None:
    text = MHA.replace("Target sm_80", "Target sm_90").replace(
        "Param stages", "Param persistent = 1\nParam pingpong = 1\nParam stages"
    )
    a = analyze(text)
    h = hover(a, at(text, "persistent", "Param persistent"))
    assert h is not None and "one thread block per SM walks the query tiles" in h.markdown
    h = hover(a, at(text, "pingpong", "Param pingpong"))
    assert h is not None and "take turns issuing their GEMMs" in h.markdown


VARIANTS = ROOT / "examples" / "variants"


@pytest.mark.parametrize(
    ("file", "needle", "line_hint", "expect"),
    [
        ("softcap.tl", "Scalar", "Scalar cap", "**Scalar** `NAME = value`"),
        ("softcap.tl", "cap", "Divide S, cap", "**Scalar** `cap` = 30.0, real"),
        ("softcap.tl", "Tanh", "Compute Tanh", "hyperbolic tangent"),
        ("dilated_window.tl", "dil", "Scalar dil", "**Scalar** `dil` = 2, integer"),
        ("dilated_window.tl", "abs", "Mask S, abs", "**abs**(x) — absolute value"),
        ("dilated_window.tl", "%", "Mask S, abs", "C semantics"),
        ("relative_bias.tl", "min", "Add S, rel", "**min**(a, b)"),
        (
            "document_mask.tl",
            "doc",
            "Allocate doc",
            "**side tensor** `doc` — global (batch, seqlen_k), int32",
        ),
        ("document_mask.tl", "doc", "Mask S, doc", "**side tensor** `doc`"),
        ("document_mask.tl", "dtype", "Allocate doc", "element type of a side tensor"),
        ("document_mask.tl", "int32", "Allocate doc", "4-byte integers"),
        ("document_mask.tl", "q_idx", "Mask S, doc", "**index value** `q_idx` — the query row"),
        ("learnable_sink.tl", "sinks", "Softmax S, sinks", "global (heads), float32"),
        ("learnable_sink.tl", "Softmax", "Softmax S, sinks", "learnable sink"),
        ("sigmoid_attention.tl", "Sigmoid", "Compute Sigmoid", "sigmoid attention"),
    ],
)
def test_hover_on_variant_constructs(file: str, needle: str, line_hint: str, expect: str) -> None:
    text = (VARIANTS / file).read_text(encoding="utf-8")
    code = "\n".join("" if line.startswith("#") else line for line in text.splitlines())  # skip the prose
    h = hover(analyze(text), at(code, needle, line_hint))
    assert h is not None, needle
    assert expect.lower() in h.markdown.lower(), h.markdown


def test_a_function_name_is_a_function_only_when_called() -> None:
    text = MHA.replace(
        "Compute Multiply S, scale and get new S",
        "Compute Multiply S, scale and get new S\n    Compute Add S, max(S, -30.0) and get new S",
    )
    a = analyze(text)
    h = hover(a, at(text, "max", "Add S, max"))
    assert h is not None and h.markdown.startswith("**max**(a, b)")
    op = hover(a, at(text, "Add", "Add S, max"))
    assert op is not None and op.markdown.startswith("**Add**")
