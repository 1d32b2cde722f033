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
