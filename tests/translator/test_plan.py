"""Plan extraction: every example's tiles, head dims, warps, stages, mask and TL lines."""

from __future__ import annotations

import pytest
from translator_cases import FILLED, example_text

from tl_language import analyze
from translator import make_plan
from translator.pattern import REQUIRED

EXPECTED = {
    # name: (dtype, BM, BN, d_qk, d_v, warps, stages, mask, group, heads_kv)
    "mha_fwd": ("bf16", 128, 64, 128, 128, 4, 2, "none", 0, 0),
    "causal_mha_fwd": ("bf16", 128, 64, 128, 128, 4, 2, "causal", 0, 0),
    "gqa_fwd": ("fp16", 128, 64, 128, 128, 4, 2, "none", 8, 0),
    "mqa_fwd": ("bf16", 128, 128, 64, 64, 4, 2, "none", 0, 1),
    "mla_fwd": ("bf16", 128, 64, 192, 128, 8, 1, "causal", 0, 0),
}


def plan_of(text: str):
    return make_plan(analyze(text).model, text)


def test_every_filled_example_has_an_expectation() -> None:
    assert sorted(EXPECTED) == FILLED


@pytest.mark.parametrize("name", FILLED)
def test_plan_of_example(name: str) -> None:
    p = plan_of(example_text(name))
    got = (p.dtype, p.block_m, p.block_n, p.head_dim_qk, p.head_dim_v, p.warps, p.stages, p.mask, p.group,
           p.heads_kv)
    assert got == EXPECTED[name]
    assert p.kernel_name == name and p.arch == "sm_80" and p.threads == 32 * p.warps
    assert p.names == {"q": "Q", "k": "K", "v": "V", "s": "S", "acc_o": "acc_o", "o": "O"}


@pytest.mark.parametrize("name", FILLED)
def test_every_statement_has_its_tl_line(name: str) -> None:
    text = example_text(name)
    p = plan_of(text)
    lines = text.splitlines()
    for kind in REQUIRED:
        step = p.step(kind)
        assert step is not None, kind
        # The recorded line holds the statement the step came from.
        assert lines[step.tl_line - 1].split("#")[0].strip() == step.text
    assert p.line_of("gemm_qk") < p.line_of("softmax") < p.line_of("reshape") < p.line_of("gemm_pv")
    assert lines[p.header_lines["mask"] - 1].startswith("Mask")
    assert lines[p.header_lines["BM"] - 1].startswith("Param BM")


def test_defaults_when_params_are_absent() -> None:
    text = "\n".join(ln for ln in example_text("mha_fwd").splitlines()
                     if not ln.startswith(("Param warps", "Param stages")))
    p = plan_of(text)
    assert (p.warps, p.stages) == (4, 1)  # FA2: 4 warps up to head dim 128, one K/V buffer


def test_window_mask_defaults_come_from_the_tl() -> None:
    text = example_text("mha_fwd").replace("Mask none", "Mask window(256, 0)")
    p = plan_of(text)
    assert p.mask == "window" and p.window == (256, 0)


def test_plan_is_pure_data() -> None:
    import dataclasses

    p = plan_of(example_text("mla_fwd"))
    assert dataclasses.is_dataclass(p)
    assert dataclasses.replace(p, arch="sm_90").head_dim_qk == 192
