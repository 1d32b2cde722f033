"""The language server's on-save worker on a real GPU: the same job the editor runs on save with
`tl.onSave = benchmark`, in-process: translate, NVRTC compile, verify, time against cuDNN and FA2."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu_matrix import TL_CONFIGS

pytestmark = pytest.mark.gpu


def test_worker_verifies_and_benchmarks_against_cudnn_and_fa2():
    from server.worker.jobs import run_job

    cfg = next(c for c in TL_CONFIGS if (c.d_qk, c.dtype, c.mask, c.target) == (128, "bf16", "none", "sm_80"))
    progress: list[str] = []
    reply = run_job(
        {
            "kind": "benchmark",
            "text": cfg.tl_text(),
            "path": str(Path(f"{cfg.name}.tl")),
            "shapes": [{"batch": 4, "heads": 16, "seqlen_q": 2048, "seqlen_k": 2048}],
        },
        lambda message, percent: progress.append(message),
    )
    result = reply["result"]
    assert reply["status"] == "ok", reply
    assert result["verified"] and result["rel_l2"] < 1e-2
    assert result["tflops"] > 0 and result["vs_cudnn"] > 0 and result["vs_fa2"] > 0
    assert any("verifying" in m for m in progress) and any("benchmarking" in m for m in progress)
    print(f"\nworker result: {result}")
