"""End to end over stdio: the derived backward from the editor — the ∇ lens line, Verify / Benchmark
backward (commands, code lens, source actions) run as worker jobs with `$/progress`, cancellable, a crash
survived, a failure naming its gradient, a stale mark after an edit — driven by the fake worker
(TL_WORKER_FAKE's bwd-* options, server/worker/fake.py)."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsp_harness import (
    change,
    command,
    doc_id,
    ended,
    open_doc,
    save,
    server_config,
    start,
    until,
    until_reported,
)
from lsprotocol import types as lsp
from pytest_lsp import LanguageClient

pytestmark = pytest.mark.e2e

PROGRESS = "$/progress"
FORWARD = "delay=0.3,rel-l2=0.0021,tflops=583"


@pytest_lsp.fixture(config=server_config(TL_WORKER_FAKE=f"{FORWARD},bwd-rel-l2=0.0031,bwd-tflops=212"))
async def gpu_client(lsp_client: LanguageClient):  # type: ignore[no-untyped-def]
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=server_config(TL_WORKER_FAKE="delay=0.3,bwd-fail=dk"))
async def failing_client(lsp_client: LanguageClient):  # type: ignore[no-untyped-def]
    yield
    await lsp_client.shutdown_session()


# its own marker: `conftest` as a module name is whichever test directory's conftest came first
CRASH_MARKER = Path(tempfile.mkdtemp(prefix="tl-lsp-crash-bwd-")) / "crashed"


@pytest_lsp.fixture(config=server_config(TL_WORKER_FAKE=f"delay=0.2,crash-once={CRASH_MARKER}"))
async def crash_once_client(lsp_client: LanguageClient):  # type: ignore[no-untyped-def]
    yield
    await lsp_client.shutdown_session()


async def opened(client: LanguageClient, workspace: Path, settings: dict[str, Any] | None = None) -> Any:
    """(recorder, uri): the session started and mha_fwd.tl open, its first diagnostics published."""
    rec = await start(client, workspace, settings)
    uri = open_doc(client, workspace / "mha_fwd.tl")
    await rec.wait_for(uri, version=1)
    return rec, uri


async def titles(client: LanguageClient, uri: str) -> list[str]:
    lenses = await client.text_document_code_lens_async(lsp.CodeLensParams(text_document=doc_id(uri)))
    assert lenses is not None
    return [lens.command.title for lens in lenses if lens.command is not None]


async def commands(client: LanguageClient, uri: str) -> list[str]:
    lenses = await client.text_document_code_lens_async(lsp.CodeLensParams(text_document=doc_id(uri)))
    assert lenses is not None
    return [lens.command.command for lens in lenses if lens.command is not None]


async def test_benchmark_backward_fills_the_second_lens_line_and_an_edit_marks_it_stale(
    gpu_client: LanguageClient, workspace: Path
) -> None:
    client = gpu_client
    results: list[object] = []

    @client.feature("tl/result")
    def on_result(ls: LanguageClient, params: object) -> None:
        results.append(params)

    rec = await start(client, workspace)
    text = (workspace / "mha_fwd.tl").read_text()
    uri = open_doc(client, workspace / "mha_fwd.tl", text)
    await rec.wait_for(uri, version=1)
    assert await titles(client, uri) == [
        "not verified yet",
        "Benchmark",
        "Generate CUDA",
        "∇ Verify backward",
        "∇ Benchmark backward",
    ]
    assert (await commands(client, uri))[3:] == ["tl.verifyBackward", "tl.benchmarkBackward"]

    outcome = await command(client, "tl.benchmarkBackward", uri)
    assert (
        outcome["status"] == "ok"
        and outcome["message"] == "backward verified (dQ/dK/dV rel-L2 3.1e-03), 212 TFLOPS"
    )
    ((_token, values),) = client.progress_reports.items()
    assert values[0].title == "TL: benchmarking the backward" and values[0].cancellable  # type: ignore[union-attr]
    assert isinstance(values[-1], lsp.WorkDoneProgressEnd)
    lens = "∇ ✓ dQ/dK/dV rel-L2 3.1e-03 · 212 TFLOPS · NVRTC 0.3 s (fake device)"
    shown = await titles(client, uri)
    assert shown[0] == "not verified yet" and shown[3] == lens  # the forward's line is its own
    (result,) = results
    assert result.kind == "benchmark-backward" and result.ok and result.summary == lens  # type: ignore[attr-defined]

    change(client, uri, 2, text + "# an edit\n")
    await rec.wait_for(uri, version=2)
    assert (await titles(client, uri))[3] == lens + " · stale (edited since)"
    assert (await command(client, "tl.verify", uri))["status"] == "ok"  # the forward's job leaves it alone
    shown = await titles(client, uri)
    assert shown[0] == "✓ rel-L2 2.1e-03 · 583 TFLOPS · NVRTC 0.3 s (fake device)"
    assert shown[3] == lens + " · stale (edited since)"
    assert (await command(client, "tl.verifyBackward", uri))["status"] == "ok"
    assert (await titles(client, uri))[3] == "∇ ✓ dQ/dK/dV rel-L2 3.1e-03 · NVRTC 0.3 s (fake device)"


async def test_without_a_device_the_backward_lens_says_compile_only(
    fake_client: LanguageClient, workspace: Path
) -> None:
    client = fake_client
    _rec, uri = await opened(client, workspace)
    outcome = await command(client, "tl.verifyBackward", uri)
    assert outcome["status"] == "ok" and outcome["result"]["gpu"] == "no CUDA device"
    assert (await titles(client, uri))[3] == "∇ ✓ compiles (NVRTC in 0.3 s) · not verified: no CUDA device"


async def test_a_failed_backward_names_the_gradient_in_the_lens_and_as_tl503(
    failing_client: LanguageClient, workspace: Path
) -> None:
    client = failing_client
    rec, uri = await opened(client, workspace)
    text = (workspace / "mha_fwd.tl").read_text()
    outcome = await command(client, "tl.verifyBackward", uri)
    assert outcome["status"] == "failed"
    got = await rec.wait_for(uri, predicate=lambda p: any(d.code == "TL503" for d in p.diagnostics))
    (d,) = [d for d in got.diagnostics if d.code == "TL503"]
    assert (
        d.range.start.line == text.splitlines().index("Kernel mha_fwd") and "dK rel-L2 4.2e-01" in d.message
    )
    assert (await titles(client, uri))[3] == (
        "∇ ✗ verification failed: dK rel-L2 4.2e-01 (max_abs 0.0e+00, 0 non-finite) (fake device)"
    )
    # A forward job afterwards keeps the backward's diagnostic (each family has its own).
    before = len(rec.published)
    assert (await command(client, "tl.compile", uri))["status"] == "ok"
    after = await rec.wait_for(uri, predicate=lambda p: p in rec.published[before:])
    assert any(d.code == "TL503" for d in after.diagnostics)


async def test_cancelling_the_backward_stops_the_job_and_keeps_the_lens_and_the_worker(
    slow_client: LanguageClient, workspace: Path
) -> None:
    client = slow_client
    _rec, uri = await opened(client, workspace)
    pending = asyncio.ensure_future(command(client, "tl.verifyBackward", uri))
    await until_reported(client)
    before = await command(client, "tl.workerInfo")
    assert before["busy"]
    (token,) = client.progress_reports
    client.window_work_done_progress_cancel(lsp.WorkDoneProgressCancelParams(token=token))
    assert (await pending)["status"] == "cancelled"
    assert ended(client)[0].message == "cancelled"
    after = await command(client, "tl.workerInfo")
    assert after["restarts"] == 0 and after["pid"] == before["pid"]  # stopped, not killed
    assert (await titles(client, uri))[3] == "∇ Verify backward"


async def test_a_crash_during_the_backward_is_survived(
    crash_once_client: LanguageClient, workspace: Path
) -> None:
    client = crash_once_client
    _rec, uri = await opened(client, workspace)
    crashed = await command(client, "tl.verifyBackward", uri)
    assert crashed["status"] == "crashed" and "exit status 86" in crashed["message"]
    assert (await titles(client, uri))[3].startswith("∇ ✗ verify-backward crashed")
    again = await command(client, "tl.verifyBackward", uri)
    assert again["status"] == "ok"
    assert (await titles(client, uri))[3] == "∇ ✓ compiles (NVRTC in 0.2 s) · not verified: no CUDA device"


async def test_a_save_during_the_backward_waits_for_the_worker_instead_of_killing_it(
    slow_client: LanguageClient, workspace: Path
) -> None:
    """The save's forward job and the backward are of different families: neither supersedes the other."""
    client = slow_client
    _rec, uri = await opened(client, workspace, {"onSave": "compile", "worker": {"timeoutSeconds": 200}})
    backward = asyncio.ensure_future(command(client, "tl.verifyBackward", uri))
    await until(client, PROGRESS, lambda: len(client.progress_reports) >= 1)
    save(client, uri)  # its job queues behind the backward's
    await until(client, PROGRESS, lambda: len(client.progress_reports) >= 2)
    assert ended(client) == []
    info = await command(client, "tl.workerInfo")
    assert info["busy"] and info["restarts"] == 0
    for token in list(client.progress_reports):  # end both quickly: cancel them
        client.window_work_done_progress_cancel(lsp.WorkDoneProgressCancelParams(token=token))
    assert (await backward)["status"] == "cancelled"
    await until(client, PROGRESS, lambda: len(ended(client)) == 2)


async def test_backward_source_actions_are_offered(client: LanguageClient, workspace: Path) -> None:
    _rec, uri = await opened(client, workspace)
    whole = lsp.Range(start=lsp.Position(line=0, character=0), end=lsp.Position(line=0, character=0))
    actions = await client.text_document_code_action_async(
        lsp.CodeActionParams(
            text_document=doc_id(uri), range=whole, context=lsp.CodeActionContext(diagnostics=[])
        )
    )
    assert actions is not None
    assert {"TL: Verify backward", "TL: Benchmark backward"} <= {a.title for a in actions}


async def test_the_real_worker_says_why_a_program_has_no_backward(
    client: LanguageClient, workspace: Path
) -> None:
    """No fake: the worker process runs pipeline.backward, which refuses MLA's unequal head dims before
    any compile."""
    rec = await start(client, workspace)
    uri = open_doc(client, workspace / "mla_fwd.tl")
    await rec.wait_for(uri, version=1)
    outcome = await command(client, "tl.verifyBackward", uri)
    assert outcome["status"] == "failed"
    assert (await titles(client, uri))[3] == (
        "∇ ✗ no backward: line 29: TL501 the backward: head dims of Q·Kᵀ (192) and V (128) must be equal"
    )
