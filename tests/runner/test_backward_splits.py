"""How many grid columns the dQ/dK/dV kernel gets (`runner.backward.dq_splits`)."""

from __future__ import annotations

from runner.abi import BackwardSpec
from runner.backward import dq_splits


def _spec(deterministic: bool) -> BackwardSpec:
    return BackwardSpec(
        name="k",
        block_m=64,
        block_n=128,
        threads=256,
        shared_bytes=0,
        dtype="bf16",
        head_dim=128,
        arch="sm_80",
        deterministic=deterministic,
    )


def test_one_column_per_key_block_with_atomics():
    assert dq_splits(_spec(False), 8192, 2, 16, 132) == 64
    assert dq_splits(_spec(False), 1, 1, 1, 132) == 1


def test_deterministic_columns_fill_the_sms_once_and_never_exceed_the_key_blocks():
    assert dq_splits(_spec(True), 8192, 2, 16, 132) == 4  # 4 × 32 (batch, head) = 128 ≤ 132 SMs
    assert dq_splits(_spec(True), 1000, 1, 1, 132) == 8  # all 8 key blocks
    assert dq_splits(_spec(True), 8192, 16, 16, 132) == 1  # more (batch, head)s than SMs
