"""`pipeline.inference.build_inference`: an inference TL file becomes a callable kernel (no GPU needed
to build it); a forward file is refused with a message."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.inference import InferenceBuildError, build_inference

ROOT = Path(__file__).resolve().parents[2]


def test_builds_an_inference_kernel_for_another_target_and_dtype() -> None:
    k = build_inference(ROOT / "examples" / "inference" / "paged_decode.tl", dtype="fp16", target="sm_90")
    assert k.spec.arch == "sm_90" and k.spec.dtype == "fp16"
    assert k.spec.inference is not None and k.spec.inference["page_size"] == 64


def test_a_forward_file_is_refused() -> None:
    with pytest.raises(InferenceBuildError, match="no inference Params"):
        build_inference(ROOT / "examples" / "gqa_fwd.tl")


def test_auto_block_n_runs_the_bn32_twin_where_the_rule_picks_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    import runner.launch

    monkeypatch.setattr(runner.launch, "sm_count", lambda index: 132)
    k = build_inference(ROOT / "examples" / "inference" / "paged_decode.tl", target="sm_90", block_n="auto")
    cache = torch.empty(64, 64, 8, 128, device="meta")
    wide = k.for_shape(torch.empty(64, 1, 32, 128, device="meta"), cache)  # B 64: tiles fill a wave
    assert wide is not k and wide.spec.block_n == 32 and "Param BN = 32" in wide.translated.text
    assert k.for_shape(torch.empty(64, 1, 32, 128, device="meta"), cache) is wide  # translated once
    assert k.for_shape(torch.empty(8, 1, 32, 128, device="meta"), cache) is k  # B 8: the TL's BN 64
    fixed = build_inference(ROOT / "examples" / "inference" / "paged_decode.tl", target="sm_90")
    assert fixed.for_shape(torch.empty(64, 1, 32, 128, device="meta"), cache) is fixed
    with pytest.raises(ValueError, match="block_n"):
        build_inference(ROOT / "examples" / "inference" / "paged_decode.tl", block_n="32")
