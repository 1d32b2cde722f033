"""LaunchSpec JSON: round trip with the sm_90 fields, and specs written before them still load."""

from __future__ import annotations

import json

from runner.abi import ATTENTION_PARAMS, TMA_PARAMS, LaunchSpec

BASE = dict(
    kernel_name="k", block_m=128, threads=128, shared_bytes=65536, dtype="fp16", head_dim_qk=128,
    head_dim_v=128, mask="causal", arch="sm_80",
)


def test_round_trip_with_block_n_heads_kv_and_tma_params() -> None:
    spec = LaunchSpec(
        **BASE,  # type: ignore[arg-type]
        block_n=176,
        heads_kv=1,
        params=tuple(p[0] for p in ATTENTION_PARAMS) + TMA_PARAMS,
    )
    back = LaunchSpec.from_json(spec.to_json())
    assert back == spec and back.block_n == 176 and back.heads_kv == 1 and back.uses_tma


def test_json_written_before_the_new_fields_still_loads() -> None:
    old = LaunchSpec(**BASE).to_json()  # type: ignore[arg-type]
    data = json.loads(old)
    del data["block_n"], data["heads_kv"]
    spec = LaunchSpec.from_json(json.dumps(data))
    assert (spec.block_n, spec.heads_kv) == (0, 0) and not spec.uses_tma
    assert spec.params == tuple(p[0] for p in ATTENTION_PARAMS)
