"""benchmarks/compile_latency.py without NVRTC: NVRTC's --time CSV read per phase, the table, translation
of an example in memory (nothing written beside it), the A/B of an NVRTC option (`--nvrtc-option`,
`--compare`); and what the runner's NVRTC options deliberately leave out."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from runner.compile import nvrtc_options

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("compile_latency", ROOT / "benchmarks" / "compile_latency.py")
assert _spec is not None and _spec.loader is not None
cl = importlib.util.module_from_spec(_spec)
sys.modules["compile_latency"] = cl  # dataclasses look their module up by name
_spec.loader.exec_module(cl)


def test_phases_sum_per_phase_in_seconds_and_empty_the_file(tmp_path: Path) -> None:
    csv = tmp_path / "time.csv"
    csv.write_text(
        "File name, phase name, metric, unit\n"
        "k.cu, CUDA C++ Frontend, 126978, ms\n"
        "k.cu, NVVM Optimizer, 28652, ms\n"
        "k.cu, PTX Translation, 1871, ms\n"
    )
    assert cl._phases(csv) == {"front": 126.98, "opt": 28.65, "ptx": 1.87}
    assert not csv.exists() and cl._phases(csv) == {}


def test_table_has_one_row_per_kernel_with_wall_cpu_and_the_cold_split() -> None:
    ms = [
        cl.Measure("mha_fwd", "sm_80", "sm_80", "cold", 30.0, 29.5, {"front": 24.0, "opt": 5.0, "ptx": 1.0}),
        cl.Measure("mha_fwd", "sm_80", "sm_80", "warm", 26.0, 25.0, pch="used"),
        cl.Measure("hopper_mha_fwd", "sm_90", "sm_90a", "cold", error="NVRTC failed"),
    ]
    lines = cl.table(ms, ["cold", "warm"]).splitlines()
    assert lines[0] == "| example | arch | cold s (cpu) | warm s (cpu) | cold front/opt/ptx s |"
    assert lines[2] == "| mha_fwd | sm_80 | 30.0 (29.5) | 26.0 (25.0) | 24.0 / 5.0 / 1.0 |"
    assert lines[3] == "| hopper_mha_fwd | sm_90a | FAIL | - | - |"


def test_translate_keeps_examples_untouched_and_retargets() -> None:
    before = sorted(p.name for p in (ROOT / "examples").iterdir())
    k = cl.translate(ROOT / "examples" / "mha_fwd.tl", None)
    assert k.arch == "sm_80" and k.name == "mha_fwd.cu" and "#include <cute/tensor.hpp>" in k.source
    assert '#line 12 "mha_fwd.tl"' in k.source  # the bare name: the source does not depend on a directory
    k89 = cl.translate(ROOT / "examples" / "mha_fwd.tl", "sm_89")
    assert k89.arch == "sm_89" and k89.target == "sm_89"
    assert sorted(p.name for p in (ROOT / "examples").iterdir()) == before


def test_translate_backward_gives_the_backward_translation_unit() -> None:
    """--backward measures the backward's source (its dQ/dK/dV kernel beside the D and convert kernels),
    on the wgmma skeleton at sm_90 and the mma.sync one at sm_80, nothing written beside the example."""
    before = sorted(p.name for p in (ROOT / "examples").iterdir())
    k90 = cl.translate(ROOT / "examples" / "mha_fwd.tl", "sm_90", backward=True)
    assert (k90.example, k90.arch, k90.name) == ("mha_fwd.bwd", "sm_90a", "mha_fwd.bwd.cu")
    assert "mha_fwd_bwd_dq_dk_dv(" in k90.source and "warpgroup_reg_alloc" in k90.source
    k80 = cl.translate(ROOT / "examples" / "mha_fwd.tl", None, backward=True)
    assert k80.arch == "sm_80" and "mha_fwd_bwd_convert_dq(" in k80.source and "wgmma" not in k80.source
    assert sorted(p.name for p in (ROOT / "examples").iterdir()) == before


def test_examples_are_the_plain_ones_or_named_from_anywhere_under_examples() -> None:
    plain = cl.examples(None)
    assert {p.parent for p in plain} == {ROOT / "examples"} and "sketch_fwd" not in {p.stem for p in plain}
    named = cl.examples(["alibi", "paged_decode", "mha_fwd"])
    assert sorted(p.relative_to(ROOT).as_posix() for p in named) == [
        "examples/inference/paged_decode.tl", "examples/mha_fwd.tl", "examples/variants/alibi.tl",
    ]  # fmt: skip
    with pytest.raises(SystemExit, match="no such example: nope"):
        cl.examples(["alibi", "nope"])


def test_the_runner_compiles_without_split_compile_or_fast_compile() -> None:
    # Both change the machine code: --split-compile=0 moved registers in hopper_mha_fwd and dropped 24
    # instructions from the sm_90a backward's dq_dk_dv, and its cubins differ from run to run (symbol
    # order); -Ofast-compile trades kernel speed for compile time. See
    # docs/results/2026-12-01-vm-nvrtc-options.json. compile_latency.py --compare measures them.
    opts = nvrtc_options("sm_90a", "k.cu")
    assert not {"split_compile", "ofast_compile", "minimal"} & opts.keys()
    assert opts["lineinfo"] is True and opts["std"] == "c++17"
    # A caller's own options still reach NVRTC (compile_latency's --nvrtc-option and --compare).
    assert nvrtc_options("sm_80", "k.cu", {"split_compile": 0})["split_compile"] == 0


# ---- benchmarks/compile_latency.py --compare -------------------------------------------------------------


def test_parse_option_reads_json_values_or_strings() -> None:
    assert cl.parse_option("split_compile=1") == ("split_compile", 1)
    assert cl.parse_option("split-compile=0") == ("split_compile", 0)
    assert cl.parse_option("ofast_compile=min") == ("ofast_compile", "min")
    assert cl.parse_option("minimal=true") == ("minimal", True)
    with pytest.raises(ValueError):
        cl.parse_option("split_compile")


def test_compare_measures_a_b_b_a_and_labels_the_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []

    def fake_child(
        kernel: Any, modes: list[str], process: str, device_arch: Any, prelude: bool, options: Any
    ) -> dict[str, Any]:
        calls.append(dict(options or {}))
        wall = 20.0 if options else 30.0
        return {m: {"wall_s": wall, "cpu_s": wall, "phases_s": {"front": 1.0}, "load": [1.0]} for m in modes}

    monkeypatch.setattr(cl, "run_child", fake_child)
    kernel = cl.Kernel("hopper_mha_fwd", "sm_90", "sm_90a", "k.cu", "src")
    got = cl.measure(kernel, ["cold"], None, repeat=2, compare={"split_compile": 1})
    assert calls == [{}, {"split_compile": 1}, {"split_compile": 1}, {}]
    assert [(m.variant, m.wall_s) for m in got] == [("", 30.0), ("split_compile=1", 20.0)]
    lines = cl.table(got, ["cold"]).splitlines()
    assert lines[2].startswith("| hopper_mha_fwd | sm_90a | 30.0 (30.0) |")
    assert lines[3].startswith("| hopper_mha_fwd [split_compile=1] | sm_90a | 20.0 (20.0) |")
