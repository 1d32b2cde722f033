"""The backward lens's worker job on a real GPU, in-process: *Benchmark backward* derives and compiles the
backward of mha_fwd.tl, verifies dQ, dK and dV against autograd of the float32 reference and times it
beside SDPA's flash and cuDNN backward. Skipped without a CUDA device."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.worker.jobs import run_job

ROOT = Path(__file__).resolve().parents[2]


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _cuda(), reason="needs a CUDA device")]


def test_worker_verifies_and_times_the_backward() -> None:
    progress: list[str] = []
    reply = run_job(
        {
            "kind": "benchmark-backward",
            "text": (ROOT / "examples" / "mha_fwd.tl").read_text(),
            "path": "mha_fwd.tl",
            "shapes": [{"batch": 2, "heads": 16, "seqlen_q": 2048, "seqlen_k": 2048}],
        },
        lambda message, percent: progress.append(message),
    )
    result = reply["result"]
    assert reply["status"] == "ok", reply
    assert result["verified"] and result["grads"] == ["dq", "dk", "dv"] and result["rel_l2"] < 3e-2
    assert result["tflops"] > 0 and result["vs_fa2"] > 0 and result["vs_cudnn"] > 0
    assert any("verifying" in m for m in progress) and any("timing" in m for m in progress)
    print(f"\nbackward worker result: {result}")
