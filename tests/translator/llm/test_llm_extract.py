"""Answer extraction: fences, prose, several blocks, truncation. Never raises."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from translator.llm.extract import extract_tl


def test_tl_fence_inside_prose() -> None:
    answer = "Sure!\n```tl\nKernel a\nParam BM = 64\n```\nBM = 64 keeps occupancy high."
    assert extract_tl(answer) == "Kernel a\nParam BM = 64\n"


def test_tl_fence_preferred_over_other_languages() -> None:
    answer = "```cpp\nint x;\n```\nand\n```tl\nKernel a\n```"
    assert extract_tl(answer) == "Kernel a\n"


def test_longest_tl_fence_wins() -> None:
    answer = (
        "Use `Reshape`:\n```tl\nReshape S from (MMA_C) to (MMA_A)\n```\n"
        "Full:\n```tl\nKernel a\nTarget sm_80\n```"
    )
    assert extract_tl(answer) == "Kernel a\nTarget sm_80\n"


def test_unfenced_statements_between_prose() -> None:
    answer = "Here it is:\nKernel a\n# tiles\nParam BM = 64\n\nfor j = 0: 4\nend\nThis loops over K/V."
    assert extract_tl(answer) == "Kernel a\n# tiles\nParam BM = 64\n\nfor j = 0: 4\nend\n"


def test_unclosed_fence_keeps_what_arrived() -> None:
    assert extract_tl("```tl\nKernel a\nfor j = 0: 4\n    Copy K") == "Kernel a\nfor j = 0: 4\n    Copy K\n"


def test_prose_only_is_empty() -> None:
    assert extract_tl("I cannot do that without the sequence length.") == ""


@given(st.text())
def test_never_raises(answer: str) -> None:
    assert isinstance(extract_tl(answer), str)
