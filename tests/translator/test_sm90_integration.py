"""Target sm_90 goes through the Hopper backend: dispatch, the plan's sm_90 checks and Params, the checker's
Hopper resource accounting, and the sm_90a compile target. No compile here (test_sm90.py has the one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.sm90_variants import Variant, tl_text
from pipeline.variants import variant
from runner.abi import TMA_PARAMS
from runner.toolchain import ToolchainError, compile_target
from tl_language import analyze
from tl_language.resources import hopper_shared_bytes, register_estimate, shared_memory_bytes
from translator.backends import backend_for
from translator.backends.sm90.config import STATIC_SMEM, hopper_config
from translator.errors import TranslateError
from translator.plan import make_plan

MHA = (Path(__file__).parents[2] / "examples" / "mha_fwd.tl").read_text()


def build(text: str):  # type: ignore[no-untyped-def]
    plan = make_plan(analyze(text).model, text)
    source, _, spec = backend_for(plan)(plan, tl_file="k.tl")
    return plan, source, spec


def test_target_sm90_dispatches_to_the_hopper_backend() -> None:
    plan, source, spec = build(variant(MHA, target="sm_90"))
    for needle in ("SM90_TMA_LOAD_4D", "_F32BF16BF16_SS<", "warpgroup_reg_alloc", "cute::TmaDescriptor"):
        assert needle in source, needle
    assert "SM80_CP_ASYNC" not in source
    assert spec.arch == "sm_90a" and spec.params[-4:] == TMA_PARAMS and spec.uses_tma
    assert spec.block_n == plan.block_n == 64 and spec.threads == 128 * (plan.consumers + 1)


def test_target_sm80_keeps_the_mma_sync_backend() -> None:
    _, source, spec = build(MHA)
    assert "SM80_16x8x16_F32" in source and "SM80_CP_ASYNC" in source and "wgmma" not in source
    assert spec.arch == "sm_80" and not spec.uses_tma and spec.block_n == 64 and spec.heads_kv == 0


def test_mqa_heads_kv_reaches_the_launch_spec_on_both_paths() -> None:
    text = (Path(__file__).parents[2] / "examples" / "mqa_fwd.tl").read_text()
    for target in ("sm_80", "sm_90"):
        _, _, spec = build(variant(text, target=target))
        assert spec.heads_kv == 1, target


def test_sm90_plan_takes_what_the_sm80_limits_refused() -> None:
    # head dim 256 with 8 warps and 3 stages: the copy split and stages ≤ 2 were sm_80 limits.
    text = tl_text(Variant("h256", block_m=128, block_n=48, d_qk=256, d_v=256, stages=3, warps=8))
    plan = make_plan(analyze(text).model, text)
    assert (plan.stages, plan.warps) == (3, 8)
    with pytest.raises(TranslateError, match="stages = 3"):
        make_plan(analyze(text.replace("sm_90", "sm_80")).model, text.replace("sm_90", "sm_80"))
    cfg = hopper_config(plan, consumers=plan.consumers, overlap=plan.overlap, pingpong=plan.pingpong)
    assert cfg.smem()["total"] + STATIC_SMEM <= 227 * 1024


def test_consumers_overlap_pingpong_are_tl_params() -> None:
    base = tl_text(Variant("h64", block_m=128, d_qk=64, d_v=64))
    plan, source, spec = build(variant(base, params={"consumers": 2, "overlap": 1, "pingpong": 1}))
    assert (plan.consumers, plan.overlap, plan.pingpong) == (2, True, True)
    assert "kConsumers = 2;" in source and "ping-pong" in source and spec.threads == 384
    plan, source, _ = build(variant(base, params={"consumers": 1, "overlap": 0, "pingpong": 0}))
    assert (plan.consumers, plan.overlap, plan.pingpong) == (1, False, False)
    assert "kConsumers = 1;" in source and "warpgroup_wait<1>()" not in source


def test_bad_switch_is_tl307_in_the_checker_and_tl501_in_the_plan() -> None:
    text = variant(tl_text(Variant("h128")), params={"pingpong": 2})
    codes = {d.code for d in analyze(text).diagnostics}
    assert "TL307" in codes
    with pytest.raises(TranslateError) as info:
        make_plan(analyze(text).model, text)
    diag = info.value.diagnostics[0]
    assert diag.code == "TL501" and text.splitlines()[diag.range.start.line].startswith("Param pingpong")


def test_hopper_defaults_when_the_params_are_absent() -> None:
    plan = make_plan(analyze(tl_text(Variant("h64", block_m=192, d_qk=64, d_v=64))).model)
    assert plan.consumers == 3  # one consumer warp group per 64 query rows
    lines = tl_text(Variant("h128")).splitlines()
    no_switches = "\n".join(ln for ln in lines if not ln.startswith(("Param overlap", "Param pingpong")))
    plan = make_plan(analyze(no_switches).model, no_switches)
    assert (plan.consumers, plan.overlap, plan.pingpong) == (2, True, True)


def test_checker_accounts_sm90_shared_memory_and_registers_like_the_backend() -> None:
    # 128 × 176 tiles at head dim 128, 2 stages: over the mma.sync register estimate, fine on sm_90.
    text = tl_text(Variant("wide", block_n=176, pingpong=True))
    analysis = analyze(text)
    assert not {"TL303", "TL304"} & {d.code for d in analysis.diagnostics}
    plan = make_plan(analysis.model, text)
    cfg = hopper_config(plan, consumers=plan.consumers, overlap=plan.overlap, pingpong=plan.pingpong)
    assert cfg.smem()["total"] == hopper_shared_bytes(128, 176, 128, 128, 2)
    assert shared_memory_bytes(analysis.model) == cfg.smem()["total"] + STATIC_SMEM
    est = register_estimate(analysis.model)
    assert est is not None and est.threads == 256 and est.total <= 240
    # The same tiles on sm_80 (4 warps) would spill: TL304 there.
    sm80 = analyze(text.replace("Target sm_90", "Target sm_80"))
    assert "TL304" in {d.code for d in sm80.diagnostics}


def test_sm90a_compiles_to_a_cubin_only_for_an_sm90_device() -> None:
    assert compile_target("sm_90a", "sm_90") == ("sm_90a", "cubin")
    assert compile_target("sm_90a", None) == ("sm_90a", "cubin")
    with pytest.raises(ToolchainError, match="runs only on an sm_90 device"):
        compile_target("sm_90a", "sm_100")
    assert compile_target("sm_80", "sm_90") == ("compute_80", "ptx")
