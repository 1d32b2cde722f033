"""Resource facts the checker, hover, translator and planner share, on the bundled examples."""

from __future__ import annotations

from pathlib import Path

import pytest

from tl_language import Severity, analyze
from tl_language.resources import (
    head_dims,
    register_estimate,
    registers_per_thread,
    shared_memory_breakdown,
    shared_memory_bytes,
    stages,
    warps,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def model(name: str):  # type: ignore[no-untyped-def]
    return analyze((EXAMPLES / name).read_text(encoding="utf-8")).model


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.tl")), ids=lambda p: p.name)
def test_examples_have_no_errors_or_warnings(path: Path) -> None:
    diags = analyze(path.read_text(encoding="utf-8")).diagnostics
    assert [d for d in diags if d.severity <= Severity.WARNING] == []


def test_sketch_gets_only_information() -> None:
    diags = analyze((EXAMPLES / "sketch_fwd.tl").read_text(encoding="utf-8")).diagnostics
    assert {d.code for d in diags} == {"TL450", "TL451"}


def test_mha_numbers() -> None:
    m = model("mha_fwd.tl")
    # Q 128×128 + 2 stages × (K 64×128 + V 64×128), 2 bytes each
    assert shared_memory_bytes(m) == 2 * (128 * 128 + 2 * (64 * 128 + 64 * 128))
    parts = {b.tensor: (b.bytes, b.staged) for b in shared_memory_breakdown(m) or []}
    assert parts == {"Q": (32768, False), "K": (16384, True), "V": (16384, True)}
    est = register_estimate(m)
    assert est is not None and est.threads == 128
    assert est.accumulators == (128 * 64 + 128 * 128) // 128  # acc_s + acc_o, fp32
    # widest GEMM slice: P·V, (BM / warps + d) rows × k16 × 2 bytes / 4 bytes per register / 32 lanes
    assert est.fragments == (32 + 128) * 16 * 2 // (4 * 32)
    assert registers_per_thread(m) == est.total
    assert head_dims(m) == (128, 128) and warps(m) == 4 and stages(m) == 2


def test_mla_head_dims_and_single_stage() -> None:
    m = model("mla_fwd.tl")
    assert head_dims(m) == (192, 128)
    assert shared_memory_bytes(m) == 2 * (128 * 192 + 1 * (64 * 192 + 64 * 128))


def test_sketch_numbers_are_unknown_not_guessed() -> None:
    m = model("sketch_fwd.tl")
    assert shared_memory_bytes(m) is None
    assert registers_per_thread(m) is None
    assert head_dims(m) == (128, 128)


def test_defaults_without_params() -> None:
    m = analyze("Target sm_75\nDtype fp16\n").model
    assert warps(m) == 4 and stages(m) == 1 and head_dims(m) == (None, None)
    m = analyze("Target sm_80\nDtype fp16\nAllocate Q in global (seqlen_q, 64)\n").model
    assert stages(m) == 2 and head_dims(m) == (64, None)
