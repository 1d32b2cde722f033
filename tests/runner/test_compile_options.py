"""The runner's NVRTC options (what is deliberately not among them), and compile_latency.py's A/B of an
NVRTC option (`--nvrtc-option`, `--compare`); no NVRTC compile."""

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
