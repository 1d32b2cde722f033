"""`fill`: holes and tiles filled, only those lines changed, comments kept; `suggest`; shapes; waves."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tl_language import analyze
from translator.planner import Shape, fill, plan, plan_candidates, suggest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_fill_makes_the_sketch_example_valid() -> None:
    text = (EXAMPLES / "sketch_fwd.tl").read_text()
    r = fill(text)
    after = analyze(r.text)
    assert [d for d in after.diagnostics if d.severity <= 2] == []
    assert [d for d in after.diagnostics if d.code in ("TL450", "TL451")] == []
    assert r.diagnostics == after.diagnostics and r.problems == []
    # Only the two Params and the four global copies changed, each only by the filled span.
    assert [c.line for c in r.changes] == [4, 5, 14, 19, 25, 30]
    old, new = text.split("\n"), r.text.split("\n")
    assert [i for i, (a, b) in enumerate(zip(old, new, strict=True)) if a != b] == [4, 5, 14, 19, 25, 30]
    assert new[4] == f"Param BM = {r.candidate.holes['BM']}"
    assert new[14] == "Copy Q (BM, d) in coordinate [L = block_m] from global to shared"
    assert new[19] == "    Copy K (BN, d) in coordinate [L = j] from global to shared"
    assert new[30] == "Copy acc_o (BM, d) in coordinate [L = block_m] from register to global as O"


def test_fill_keeps_comments_and_their_column() -> None:
    text = (EXAMPLES / "mla_fwd.tl").read_text().replace("Param BM = 128", "Param BM = ?       # rows")
    text = text.replace("Copy V (BN, d_v) in", "Copy V in")
    r = fill(text)
    lines = r.text.split("\n")
    bm = next(line for line in lines if line.startswith("Param BM"))
    assert bm.endswith("# rows") and bm.index("#") == len("Param BM = ?       ")
    assert "    Copy V (BN, d_v) in coordinate [L = j] from global to shared" in lines
    assert r.candidate is not None and set(r.candidate.holes) == {"BM"}


def test_fixed_params_are_kept() -> None:
    cands = plan_candidates(analyze((EXAMPLES / "mha_fwd.tl").read_text()))
    assert len(cands) == 1
    assert cands[0].values == {"BM": 128, "BN": 64, "d": 128, "warps": 4, "stages": 2}
    assert cands[0].holes == {}


def test_nothing_fits_is_reported() -> None:
    text = (EXAMPLES / "mha_fwd.tl").read_text().replace("Param d = 128", "Param d = 256")
    text = text.replace("Param BN = 64", "Param BN = 256").replace("Param BM = 128", "Param BM = ?")
    r = fill(text)
    assert r.candidate is None and r.changes == []
    assert len(r.problems) == 2
    assert r.problems[0].startswith("no tiling fits sm_80 with the fixed parameters; rejected by: ")
    assert "shared memory" in r.problems[0]
    assert r.problems[1] == "the planner has no rule for `BM`: fill by hand"


def test_suggest_ranks_values_of_one_param() -> None:
    model = analyze((EXAMPLES / "sketch_fwd.tl").read_text()).model
    s = suggest(model, "BN")
    assert [x.value for x in s] == sorted(
        {x.value for x in s}, key=lambda v: -max(y.score for y in s if y.value == v)
    )
    assert [x.score for x in s] == sorted((x.score for x in s), reverse=True)
    assert s[0].value == plan_candidates(model)[0].values["BN"]
    assert s[0].reason.startswith(f"BM={plan_candidates(model)[0].values['BM']} BN={s[0].value} ")
    assert suggest(model, "nonexistent") == []
    assert [x.value for x in suggest(model, "d")] == [128]  # fixed: only its own value


def test_shape_parse() -> None:
    assert Shape.parse("2,16,4096,8192") == Shape(2, 16, 4096, 8192)
    assert Shape.parse("1, 8, 1024") == Shape(1, 8, 1024, 1024)
    with pytest.raises(ValueError, match="shape `1,2` is not B,H,Sq,Sk"):
        Shape.parse("1,2")


def test_wave_quantisation() -> None:
    text = (EXAMPLES / "mha_fwd.tl").read_text()
    model = analyze(text).model
    # sm_80's largest part has 108 SMs and this tiling fits one block per SM.
    one_wave = plan(model, Shape(1, 108, 128, 4096)).candidates[0]
    assert one_wave.resources.blocks_per_sm == 1
    assert (one_wave.breakdown["waves"], one_wave.breakdown["wave_efficiency"]) == (1.0, 1.0)
    spill = plan(model, Shape(1, 109, 128, 4096)).candidates[0]
    assert spill.breakdown["waves"] == 2.0
    assert spill.breakdown["wave_efficiency"] == pytest.approx(109 / 216)
    assert spill.score < one_wave.score


def test_fill_and_suggest_never_raise_on_half_written_files() -> None:
    """Every prefix of every example (what an editor sees while typing), with its params made holes."""
    for path in sorted(EXAMPLES.glob("*.tl")):
        lines = path.read_text().split("\n")
        for n in range(len(lines) + 1):
            text = "\n".join(lines[:n]).replace("= 128", "= ?").replace("= 64", "= ?")
            r = fill(text)
            assert isinstance(r.text, str)
            model = analyze(text).model
            for name in model.params:
                suggest(model, name)


@settings(max_examples=60, deadline=None)
@given(
    st.text(
        alphabet=st.sampled_from(list("ParmBNd=?0123456789 \n#Copy Q in global ()seqlen_q,kS")), max_size=200
    )
)
def test_fill_never_raises_on_arbitrary_text(text: str) -> None:
    r = fill(text)
    assert isinstance(r.text, str) and isinstance(r.problems, list)


def test_hopper_sketches_get_the_measured_tiles_and_wgmma_sized_key_blocks() -> None:
    """sm_90: the key tile is searched in wgmma-sized steps of 16 (the H200's best are 160 and 80, not
    powers of two), the softmax overlaps the GEMMs in the model, and the measured default ranks first."""
    sketch = (EXAMPLES / "sketch_fwd.tl").read_text().replace("Target sm_80", "Target sm_90")
    for d, mask, tile in (
        (128, "none", (128, 160)),
        (128, "causal", (128, 128)),
        (64, "none", (192, 128)),
        (256, "none", (128, 80)),
    ):
        text = sketch.replace("Param d = 128", f"Param d = {d}").replace("Mask none", f"Mask {mask}")
        cands = plan_candidates(analyze(text), Shape(2, 2048 // d, 8192, 8192))
        best = cands[0]
        assert (best.tiling.block_m, best.tiling.block_n) == tile and best.measured, (d, mask)
        assert "measured default on the H200" in " ".join(best.reasons)
        assert any(c.tiling.block_n in (80, 144, 160, 176) for c in cands)
    # at head dim 256 the model alone already prefers the measured 128×80
    text = sketch.replace("Param d = 128", "Param d = 256")
    scored = sorted(plan_candidates(analyze(text), Shape(8, 8, 4096, 4096)), key=lambda c: -c.score)
    assert (scored[0].tiling.block_m, scored[0].tiling.block_n) == (128, 80)
