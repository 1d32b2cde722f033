"""One source of Param defaults: for a TL file without `warps` / `stages`, the checker's estimates, the
translator's plan and the planner's candidate use the same values (tl_language.resources.default_*)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.variants import head_dim_params, variant
from tl_language import analyze
from tl_language import resources as core
from translator.plan import make_plan
from translator.planner import plan_candidates

MHA = (Path(__file__).parents[2] / "examples" / "mha_fwd.tl").read_text()

CASES = [
    ("sm_80", "bf16", 64, 128, "none"),
    ("sm_80", "bf16", 128, 128, "none"),
    ("sm_80", "bf16", 128, 128, "causal"),
    ("sm_80", "fp16", 256, 128, "none"),
    ("sm_80", "fp16", 256, 64, "causal"),
    ("sm_75", "fp16", 64, 64, "none"),
    ("sm_90", "bf16", 128, 128, "none"),
    ("sm_90", "bf16", 256, 128, "causal"),
]


def without_warps_and_stages(target: str, dtype: str, d: int, bm: int, mask: str) -> str:
    text = variant(
        MHA, target=target, dtype=dtype, mask=mask, params={"BM": bm, "BN": 64, **head_dim_params(MHA, d)}
    )
    return "\n".join(ln for ln in text.splitlines() if not ln.startswith(("Param warps", "Param stages")))


@pytest.mark.parametrize(("target", "dtype", "d", "bm", "mask"), CASES)
def test_checker_translator_and_planner_agree(target: str, dtype: str, d: int, bm: int, mask: str) -> None:
    text = without_warps_and_stages(target, dtype, d, bm, mask)
    analysis = analyze(text)
    model = analysis.model
    assert "warps" not in model.params and "stages" not in model.params
    want = (core.default_warps(target, bm, d), core.default_stages(target, d, mask))
    assert (core.warps(model), core.stages(model)) == want  # the checker (TL303/TL304, hover)
    plan = make_plan(model, text)
    assert (plan.warps, plan.stages) == want  # the translator
    candidates = plan_candidates(analysis)
    assert candidates, "the planner found no tiling for the fixed tiles"
    assert {(c.tiling.warps, c.tiling.stages) for c in candidates} == {want}  # the planner


def test_the_defaults_follow_the_measured_tiles() -> None:
    assert core.default_stages("sm_80", 128, "none") == 1 and core.default_stages("sm_80", 128, "causal") == 2
    assert core.default_stages("sm_80", 64) == 2 and core.default_stages("sm_75", 64) == 1
    assert core.default_stages("sm_90", 256) == 2
    assert core.default_warps("sm_80", 128, 256) == 8 and core.default_warps("sm_80", 64, 256) == 4
    assert core.hopper_tile(128) == {"BM": 128, "BN": 160, "consumers": 2, "stages": 2, "overlap": 1,
                                     "pingpong": 1, "persistent": 0}
    assert core.hopper_tile(64, "causal")["BM"] == 192 and core.hopper_tile(64)["consumers"] == 3
    assert core.hopper_tile(64)["pingpong"] == 1  # the three-group ring
    assert core.hopper_tile(256)["pingpong"] == 0
