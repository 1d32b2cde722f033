"""The benchmark's table and JSON, from results made by hand (timing itself needs a GPU)."""

from __future__ import annotations

import json

from pipeline.benchmark import format_table, sweep_shape, to_json
from runner.bench import BenchCase, BenchResult, Timing, buffer_sets
from runner.verify import Shape


def case() -> BenchCase:
    c = BenchCase(shape=sweep_shape(4096, 128), head_dim_qk=128, head_dim_v=128, dtype="bf16", mask="none")
    t = Timing(median_ms=1.0, p10_ms=0.9, p90_ms=1.2, runs=100)
    c.results["tl"] = BenchResult(name="tl", tflops=350.0, timing=t)
    c.results["sdpa-flash"] = BenchResult(name="sdpa-flash", tflops=340.0, timing=t)
    c.results["fa4"] = BenchResult(name="fa4", error="ModuleNotFoundError: No module named 'flash_attn'")
    return c


def test_sweep_shape_is_16k_tokens_2048_wide():
    assert sweep_shape(4096, 128) == Shape(batch=4, heads=16, heads_kv=16, seqlen_q=4096, seqlen_k=4096)
    assert sweep_shape(16384, 64) == Shape(1, 32, 32, 16384, 16384)
    assert sweep_shape(512, 256) == Shape(32, 8, 8, 512, 512)


def test_table_has_tflops_ratios_and_na_reasons():
    table = format_table([case()], ["tl"], ["sdpa-flash", "fa4"], "NVIDIA H200")
    lines = table.splitlines()
    assert lines[0].startswith("TFLOPS on NVIDIA H200")
    # fa4 was not timed in any row: no ratio column of n/a, its reason is listed instead
    assert lines[1].split() == ["config", "tl", "sdpa-flash", "fa4", "tl/FA2"]
    row = lines[3].split()
    assert row[-4:] == ["350", "340", "n/a", "1.03"]
    assert any("fa4: ModuleNotFoundError" in line for line in lines)


def variants_case(seqlen: int, *, fa4: float | None) -> BenchCase:
    """The standard variants (tl-sm80, tl-sm90) with every baseline; fa4 timed or missing."""
    c = BenchCase(shape=sweep_shape(seqlen, 128), head_dim_qk=128, head_dim_v=128, dtype="bf16", mask="none")
    for name, tflops in [
        ("tl-sm80", 342.0),
        ("tl-sm90", 630.0),
        ("sdpa-flash", 340.0),
        ("sdpa-cudnn", 600.0),
        ("sdpa-efficient", 170.0),
        ("flex", None),
        ("fa4", fa4),
    ]:
        err = None if tflops else "not run at this seqlen"
        c.results[name] = BenchResult(name=name, tflops=tflops, error=err)
    return c


BASELINE_NAMES = ["sdpa-flash", "sdpa-cudnn", "sdpa-efficient", "flex", "fa4"]


def test_variants_get_their_reference_ratios_and_sm90_over_fa4():
    cases = [variants_case(4096, fa4=700.0), variants_case(8192, fa4=None)]
    lines = format_table(cases, ["tl-sm80", "tl-sm90"], BASELINE_NAMES, "NVIDIA H200").splitlines()
    assert lines[1].split()[-4:] == ["sm80/FA2", "sm90/cuDNN", "sm90/FA2", "sm90/FA4"]
    assert lines[3].split()[-4:] == ["1.01", "1.05", "1.85", "0.90"]  # 342/340, 630/600, 630/340, 630/700
    assert lines[4].split()[-4:] == ["1.01", "1.05", "1.85", "n/a"]  # fa4 missing in this row only
    assert not any(h.startswith("sm80/") and h != "sm80/FA2" for h in lines[1].split())


def test_sm90_over_fa4_only_when_fa4_was_timed():
    cases = [variants_case(4096, fa4=None)]
    missing = "ModuleNotFoundError: No module named 'flash_attn'"
    cases[0].results["fa4"] = BenchResult(name="fa4", error=missing)
    lines = format_table(cases, ["tl-sm80", "tl-sm90"], BASELINE_NAMES, "GPU").splitlines()
    assert lines[1].split()[-3:] == ["sm80/FA2", "sm90/cuDNN", "sm90/FA2"]
    assert "fa4" in lines[1].split()  # its TFLOPS column stays, n/a, with the reason below
    assert any("fa4: ModuleNotFoundError" in line for line in lines)


def test_failed_kernel_shows_fail():
    c = case()
    c.results["tl"] = BenchResult(name="tl", error="FAIL: verification failed, not timed")
    table = format_table([c], ["tl"], ["sdpa-flash"], "GPU")
    assert table.splitlines()[3].split()[-3:] == ["FAIL", "340", "n/a"]


def test_json_roundtrip():
    data = json.loads(to_json([case()], "NVIDIA H200", {"torch": "2.11"}))
    assert data["gpu"] == "NVIDIA H200" and data["torch"] == "2.11"
    res = data["cases"][0]["results"]
    assert res["tl"]["tflops"] == 350.0 and res["tl"]["timing"]["median_ms"] == 1.0
    assert res["fa4"]["tflops"] is None and "flash_attn" in res["fa4"]["error"]
    assert data["cases"][0]["flops"] == 4 * 4 * 16 * 4096 * 4096 * 128


def test_buffer_sets_exceed_twice_l2():
    assert buffer_sets(64 << 20, l2_bytes=50 << 20) == 2
    assert buffer_sets(4 << 20, l2_bytes=50 << 20) == 8  # capped
    assert buffer_sets(20 << 20, l2_bytes=50 << 20) == 5
