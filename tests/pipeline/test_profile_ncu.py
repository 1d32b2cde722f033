"""benchmarks/profile_ncu.py reads Nsight Compute's CSV pages (no GPU or ncu needed; real excerpts)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("profile_ncu", REPO / "benchmarks" / "profile_ncu.py")
assert _spec and _spec.loader
profile_ncu = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(profile_ncu)

# `ncu --import R --csv --page source --print-source sass` (columns cut after the ones read)
SOURCE_PAGE = """"Kernel Name","tl_sm_90_bf16_d128_none",
"Address","Source","Warp Stall Sampling (All Samples)","# Samples","Instructions Executed"
"0x7fadd37a3c00","      LDC R1, c[0x0][0x28]","77","77","24576"
"0x7fadd37a3c10","      R2UR UR16, R214","11","11","1,048,576"
"0x7fadd37a3c20","      R2UR UR17, R215","3","3","1048576"
"0x7fadd37a3c30","@!P0 BRA 0x8270","1","1","2048"
"0x7fadd37a3c40","      HGMMA.64x160x16.F32.BF16 R24, gdesc[UR16], RZ, !UPT","40","40","524288"
"""

# `ncu --import R --csv --page raw --print-units base`: names, units, one row per profiled kernel
RAW_PAGE = "\n".join(
    (
        '"ID","Kernel Name","gpu__time_duration.sum","sm__cycles_elapsed.avg.per_second",'
        '"smsp__inst_executed.sum"',
        '"","","nsecond","hertz","inst"',
        '"0","small","1200","1715590000","1000"',
        '"1","tl_sm_90_bf16_d128_none","1567520","1715590000","512300000"',
    )
)


def test_opcode_mix_sums_executed_warp_instructions_per_opcode() -> None:
    mix = profile_ncu.opcode_mix_from_csv(SOURCE_PAGE)
    assert mix == {"LDC": 24576, "R2UR": 2 * 1048576, "BRA": 2048, "HGMMA": 524288}  # predicate dropped
    assert profile_ncu.opcode_mix_from_csv("no table here") == {}
    samples = profile_ncu.opcode_mix_from_csv(SOURCE_PAGE, profile_ncu.SAMPLES)
    assert samples == {"LDC": 77, "R2UR": 14, "BRA": 1, "HGMMA": 40}


def test_raw_metrics_take_the_longest_kernel_and_print_in_readable_units() -> None:
    metrics = profile_ncu.raw_from_csv(RAW_PAGE)
    assert metrics["Kernel Name"] == "tl_sm_90_bf16_d128_none"
    assert profile_ncu._row_value(metrics, r"^gpu__time_duration\.sum$") == "1567.5"  # us
    assert profile_ncu._row_value(metrics, r"^sm__cycles_elapsed\.avg\.per_second$") == "1715.6"  # MHz
    assert profile_ncu._row_value(metrics, r"^smsp__inst_executed\.sum$") == "512.3"  # millions
    assert profile_ncu._row_value(metrics, r"^no_such_metric$") == "-"


def test_params_per_head_dim() -> None:
    assert profile_ncu._parse_params("hd64:BN=128,hd64:stages=3,hd128:persistent=1") == {
        64: {"BN": 128, "stages": 3},
        128: {"persistent": 1},
    }
