"""The derived backward in the language server: the ∇ lens text (one formatting path with the forward's, a
stale mark after an edit) and the worker's backward job (`server.worker.backward_steps`), in-process —
the no-backward and no-device paths for real, the GPU path with the runner's pieces stood in for."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from test_server_worker import request as worker_request

from server.features.code_lens import lens_title, result_text
from server.worker import backward_steps, gpu_steps
from server.worker.jobs import run_job

ROOT = Path(__file__).resolve().parents[2]
MHA = (ROOT / "examples" / "mha_fwd.tl").read_text()
KERNEL_LINE = MHA.splitlines().index("Kernel mha_fwd")


def request(kind: str, text: str = MHA) -> dict[str, Any]:
    return {
        **worker_request(kind, text),
        "shapes": [{"batch": 2, "heads": 4, "seqlen_q": 1000, "seqlen_k": 1000}],
    }


# ---- the lens text ------------------------------------------------------------------------------------


def test_a_verified_backward_names_its_gradients_behind_nabla() -> None:
    ok = {
        "kind": "benchmark-backward",
        "status": "ok",
        "verified": True,
        "grads": ["dq", "dk", "dv"],
        "rel_l2": 3.1e-3,
        "tflops": 212.4,
        "device": "H200",
    }
    assert result_text(ok) == "∇ ✓ dQ/dK/dV rel-L2 3.1e-03 · 212 TFLOPS (H200)"
    side = {**ok, "grads": ["dq", "dk", "dv", "dslopes"], "vs_fa2": 0.94, "compile_seconds": 81.7}
    assert (
        result_text(side)
        == "∇ ✓ dQ/dK/dV/dslopes rel-L2 3.1e-03 · 212 TFLOPS · 0.94× FA2 · NVRTC 81.7 s (H200)"
    )


def test_a_backward_without_a_device_says_it_compiled_only() -> None:
    compiled = {
        "kind": "verify-backward",
        "status": "ok",
        "compiled": True,
        "compile_seconds": 12.3,
        "gpu": "no CUDA device",
    }
    assert result_text(compiled) == "∇ ✓ compiles (NVRTC in 12.3 s) · not verified: no CUDA device"


def test_a_failed_backward_names_the_failing_gradient() -> None:
    reply = backward_steps.failed_reply(
        request("verify-backward"),
        "H200",
        "2x4x1000x1000",
        [
            SimpleNamespace(name="dq", ok=True, rel_l2=3e-3, max_abs=1e-2, nonfinite=0),
            SimpleNamespace(name="dk", ok=False, rel_l2=0.42, max_abs=1.3, nonfinite=12),
        ],
        {"compiled": True, "device": "H200", "verified": False},
        "unused",
    )
    assert (
        reply["status"] == "failed"
        and reply["message"] == "dK rel-L2 4.2e-01 (max_abs 1.3e+00, 12 non-finite)"
    )
    (diag,) = reply["diagnostics"]
    assert diag["code"] == "TL503" and diag["range"]["start"]["line"] == KERNEL_LINE
    assert "dK rel-L2" in diag["message"] and "H200" in diag["message"]
    shown = {"kind": "verify-backward", "status": "failed", "message": reply["message"], **reply["result"]}
    assert (
        result_text(shown)
        == "∇ ✗ verification failed: dK rel-L2 4.2e-01 (max_abs 1.3e+00, 12 non-finite) (H200)"
    )


def test_an_edit_marks_either_result_stale() -> None:
    forward = {"kind": "verify", "status": "ok", "compiled": True, "version": 3}
    backward = {**forward, "kind": "verify-backward"}
    assert lens_title(forward, 3) == "✓ compiles (NVRTC)"
    assert lens_title(forward, 4) == "✓ compiles (NVRTC) · stale (edited since)"
    assert lens_title(backward, 4) == "∇ ✓ compiles (NVRTC) · stale (edited since)"
    assert lens_title(None, 4) == "not verified yet"


# ---- the worker's job ---------------------------------------------------------------------------------


def test_a_program_without_a_backward_says_why_with_its_line_and_code() -> None:
    mla = (ROOT / "examples" / "mla_fwd.tl").read_text()
    reply = run_job(request("verify-backward", mla), lambda *_: None)
    assert reply["status"] == "failed"
    assert reply["message"] == (
        "no backward: line 29: TL501 the backward: head dims of Q·Kᵀ (192) and V (128) must be equal"
    )


class StubBuild:
    """Stands in for pipeline.backward.BackwardBuild: no NVRTC, no device."""

    def __init__(self, fail_compile: Exception | None = None) -> None:
        self.fail_compile = fail_compile
        self.compiled_for: list[str | None] = []

    def compile(self, device_arch: str | None = None) -> Any:
        self.compiled_for.append(device_arch)
        if self.fail_compile is not None:
            raise self.fail_compile
        return SimpleNamespace(seconds=12.34, cached=False, pch=None)

    def load(self) -> Any:
        return SimpleNamespace(spec=SimpleNamespace(name="mha_fwd"), device_id=0)


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> StubBuild:
    import pipeline.backward

    build = StubBuild()
    monkeypatch.setattr(pipeline.backward, "translate_backward", lambda text, **kw: build)
    return build


def test_without_a_device_the_backward_compiles_and_stops(
    stub: StubBuild, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gpu_steps, "device_arch", lambda: None)
    progress: list[str] = []
    reply = run_job(request("benchmark-backward"), lambda message, pct: progress.append(message))
    assert reply["status"] == "ok"
    assert reply["message"] == "backward compiled in 12.3 s; not verified: no CUDA device"
    assert reply["result"]["gpu"] == "no CUDA device" and reply["result"]["compile_seconds"] == 12.34
    assert stub.compiled_for == [None]  # build-only, as `tl build --backward`
    assert progress == ["deriving the backward", "compiling the backward with NVRTC"]


def test_a_backward_compile_error_lands_on_the_kernel_line(
    stub: StubBuild, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner.compile import CompileError
    from runner.nvrtc_log import parse_log

    log = 'mha_fwd.bwd.cu(120): error: identifier "tdKrdK" is undefined\n'
    stub.fail_compile = CompileError(
        message="NVRTC failed", log=log, options={}, records=parse_log(log), source_name="mha_fwd.bwd.cu"
    )
    monkeypatch.setattr(gpu_steps, "device_arch", lambda: None)
    reply = run_job(request("verify-backward"), lambda *_: None)
    assert reply["status"] == "failed" and reply["message"] == "the backward does not compile: NVRTC failed"
    (diag,) = reply["diagnostics"]
    assert diag["code"] == "TL502" and diag["range"]["start"]["line"] == KERNEL_LINE
    assert "mha_fwd.bwd.cu:120" in diag["message"] and "tdKrdK" in diag["message"]


def _gpu(
    monkeypatch: pytest.MonkeyPatch, checks: list[Any], rates: dict[str, float | None]
) -> dict[str, Any]:
    """Where verify_backward and backward_tflops were called, and with what."""
    torch = pytest.importorskip("torch")
    import pipeline.backward_bench
    import runner.backward_verify

    calls: dict[str, Any] = {}

    def verify(loaded: Any, shape: Any) -> Any:
        calls["verify"] = shape
        return runner.backward_verify.BackwardResult(
            kernel="mha_fwd", shape=shape, dtype="bf16", checks=checks
        )

    def timed(loaded: Any, *dims: int) -> dict[str, float | None]:
        calls["bench"] = dims
        return rates

    monkeypatch.setattr(gpu_steps, "device_arch", lambda: "sm_90")
    monkeypatch.setattr(runner.backward_verify, "verify_backward", verify)
    monkeypatch.setattr(pipeline.backward_bench, "backward_tflops", timed)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    return calls


def _check(name: str, rel: float, ok: bool = True) -> Any:
    from runner.backward_verify import GradCheck

    return GradCheck(name=name, rel_l2=rel, max_abs=rel, nonfinite=0, ok=ok)


def test_on_a_device_the_backward_is_verified_then_timed(
    stub: StubBuild, monkeypatch: pytest.MonkeyPatch
) -> None:
    checks = [_check("dq", 2e-3), _check("dk", 3.1e-3), _check("dv", 1e-3)]
    calls = _gpu(monkeypatch, checks, {"tl": 212.4, "sdpa-flash": 226.0, "sdpa-cudnn": None})
    reply = run_job(request("benchmark-backward"), lambda *_: None)
    assert reply["status"] == "ok", reply
    assert reply["message"] == "backward verified (dQ/dK/dV rel-L2 3.1e-03), 212 TFLOPS"
    result = reply["result"]
    assert result["grads"] == ["dq", "dk", "dv"] and result["rel_l2"] == 3.1e-3 and result["verified"]
    assert (
        result["tflops"] == 212.4 and result["vs_fa2"] == round(212.4 / 226.0, 3) and "vs_cudnn" not in result
    )
    assert result["device"] == "NVIDIA H200" and stub.compiled_for == ["sm_90"]
    shape = calls["verify"]
    assert (shape.batch, shape.heads, shape.heads_kv, shape.seqlen_q, shape.seqlen_k) == (2, 4, 4, 1000, 1000)
    assert calls["bench"] == (2, 4, 1000, 1000)
    shown = {"kind": "benchmark-backward", **result}
    assert result_text({**shown, "status": "ok"}).startswith(
        "∇ ✓ dQ/dK/dV rel-L2 3.1e-03 · 212 TFLOPS · 0.94× FA2"
    )


def test_verify_backward_does_not_time(stub: StubBuild, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _gpu(monkeypatch, [_check("dq", 2e-3), _check("dk", 3e-3), _check("dv", 1e-3)], {"tl": 1.0})
    reply = run_job(request("verify-backward"), lambda *_: None)
    assert reply["status"] == "ok" and "tflops" not in reply["result"] and "bench" not in calls


def test_a_failing_gradient_fails_the_job_before_timing(
    stub: StubBuild, monkeypatch: pytest.MonkeyPatch
) -> None:
    checks = [_check("dq", 2e-3), _check("dk", 0.5, ok=False), _check("dv", 1e-3)]
    calls = _gpu(monkeypatch, checks, {"tl": 1.0})
    reply = run_job(request("benchmark-backward"), lambda *_: None)
    assert reply["status"] == "failed" and reply["message"].startswith("dK rel-L2 5.0e-01")
    assert not reply["fatal"] and "bench" not in calls
    assert [d["code"] for d in reply["diagnostics"]] == ["TL503"]


def test_a_gpu_fault_in_the_backward_is_fatal(stub: StubBuild, monkeypatch: pytest.MonkeyPatch) -> None:
    _gpu(monkeypatch, [], {})
    import runner.backward_verify

    def fault(loaded: Any, shape: Any) -> Any:
        raise RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS")

    monkeypatch.setattr(runner.backward_verify, "verify_backward", fault)
    reply = run_job(request("verify-backward"), lambda *_: None)
    assert reply["status"] == "failed" and reply["fatal"]  # the server restarts the worker
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in reply["message"]


@pytest.mark.slow
@pytest.mark.nvrtc
def test_the_real_backward_compiles_without_a_device(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """pipeline.backward derives and NVRTC compiles the three kernels (head dim 64, the smaller build);
    without a device the lens is told so."""
    pytest.importorskip("cuda.core")
    monkeypatch.setenv("TL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(gpu_steps, "device_arch", lambda: None)
    text = MHA.replace("Param d = 128", "Param d = 64")
    reply = run_job(request("verify-backward", text), lambda *_: None)
    assert reply["status"] == "ok", reply
    assert reply["message"].startswith("backward compiled in ") and reply["message"].endswith(
        "; not verified: no CUDA device"
    )
    assert reply["result"]["compile_seconds"] > 0 and not reply["result"]["cached"]
