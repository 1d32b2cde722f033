from pathlib import Path

from pipeline.variants import head_dim_params, variant
from tl_language import analyze

ROOT = Path(__file__).resolve().parents[2]
MHA = (ROOT / "examples" / "mha_fwd.tl").read_text()
MLA = (ROOT / "examples" / "mla_fwd.tl").read_text()


def header(text: str, kw: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(kw + " ")]


def test_headers_and_params_replaced_comments_kept():
    v = variant(MHA, kernel="mha_d64", target="sm_75", dtype="fp16", mask="window(32, 0)", params={"d": 64})
    assert header(v, "Kernel") == ["Kernel mha_d64"]
    assert header(v, "Target") == ["Target sm_75"]
    assert header(v, "Dtype") == ["Dtype fp16"]
    assert header(v, "Mask") == ["Mask window(32, 0)"]
    assert "Param d = 64        # head dimension of Q, K and V" in v.splitlines()


def test_missing_param_is_added_after_the_last_param():
    v = variant(MHA, params={"group": 4})
    lines = v.splitlines()
    assert lines[lines.index("Param group = 4") - 1].startswith("Param stages")


def test_variants_stay_valid_tl():
    for v in (variant(MHA, dtype="fp16", params={"d": 64, "BN": 128}), variant(MLA, mask="none")):
        assert not analyze(v).has_errors, [d.message for d in analyze(v).diagnostics]


def test_head_dim_params():
    assert head_dim_params(MHA, 96) == {"d": 96}
    assert head_dim_params(MLA, 192, 128) == {"d_qk": 192, "d_v": 128}


def test_benchmark_times_the_sm80_and_sm90_paths_with_their_tiles() -> None:
    from pipeline.variants import bench_kernels, tiles

    on_hopper = bench_kernels(128, "bf16", "causal", "sm_90")
    assert [(label, kc.target) for label, kc in on_hopper] == [("tl-sm80", "sm_80"), ("tl-sm90", "sm_90")]
    assert [label for label, _ in bench_kernels(128, "bf16", "none", "sm_80")] == ["tl-sm80"]
    assert [label for label, _ in bench_kernels(96, "bf16", "none", "sm_90")] == ["tl-sm80"]  # no TMA boxes
    # sm_80 tiles per mask (measured on the H200); sm_90 from the Hopper defaults
    assert tiles("sm_80", 128, "none")["stages"] == 1 and tiles("sm_80", 128, "causal")["stages"] == 2
    assert tiles("sm_80", 256) == {"BM": 64, "BN": 64, "warps": 4, "stages": 1}
    assert tiles("sm_90", 128) == {"BM": 128, "BN": 160, "consumers": 2, "stages": 2, "overlap": 1,
                                    "pingpong": 1, "persistent": 0}
    text = on_hopper[1][1].tl_text()
    assert "Target sm_90" in text and "Param BN = 128" in text and "Param pingpong = 1" in text
