"""End to end over stdio: the on-save job in the worker process — `$/progress`, results as diagnostics and
code lens, cancellation, a crash, a hang — with a fake job (TL_WORKER_FAKE), and one real NVRTC compile."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from lsp_harness import command, doc_id, ended, open_doc, save, start, until, until_reported
from lsprotocol import types as lsp
from pytest_lsp import LanguageClient

pytestmark = pytest.mark.e2e

PROGRESS = "$/progress"


async def idle_worker(client: LanguageClient) -> dict[str, Any]:
    """tl.workerInfo once the worker is free again (a cancelled job holds it until it has stopped)."""
    for _ in range(200):
        info = await command(client, "tl.workerInfo")
        if not info["busy"]:
            return info
        await asyncio.sleep(0.05)
    raise AssertionError(f"the worker stayed busy: {info}")


async def lens_title(client: LanguageClient, uri: str) -> str:
    lenses = await client.text_document_code_lens_async(lsp.CodeLensParams(text_document=doc_id(uri)))
    assert lenses and lenses[0].command is not None
    return lenses[0].command.title


async def test_save_runs_the_job_with_progress_and_updates_the_lens(
    fake_client: LanguageClient, workspace: Path
) -> None:
    client = fake_client
    results: list[object] = []

    @client.feature("tl/result")  # the extension's status bar listens for these
    def on_result(ls: LanguageClient, params: object) -> None:
        results.append(params)

    rec = await start(client, workspace, {"onSave": "verify"})
    uri = open_doc(client, workspace / "mha_fwd.tl")
    await rec.wait_for(uri, version=1)
    assert await lens_title(client, uri) == "not verified yet"
    save(client, uri)
    await until(client, PROGRESS, lambda: ended(client))
    ((_token, values),) = client.progress_reports.items()
    kinds = [type(v).__name__ for v in values]
    assert kinds[0] == "WorkDoneProgressBegin" and kinds[-1] == "WorkDoneProgressEnd"
    assert "WorkDoneProgressReport" in kinds and values[0].cancellable  # type: ignore[union-attr]
    verified = "✓ rel-L2 2.1e-03 · 583 TFLOPS · NVRTC 0.3 s (fake device)"  # the fake compile took 0.3 s
    assert await lens_title(client, uri) == verified
    (result,) = results
    assert result.uri == uri and result.ok and result.summary == verified


async def test_nvrtc_errors_arrive_as_tl502_on_the_tl_line(
    nvrtc_error_client: LanguageClient, workspace: Path
) -> None:
    client = nvrtc_error_client
    rec = await start(client, workspace, {"onSave": "compile"})
    uri = open_doc(client, workspace / "mha_fwd.tl")
    await rec.wait_for(uri, version=1)
    save(client, uri)
    got = await rec.wait_for(uri, predicate=lambda p: any(d.code == "TL502" for d in p.diagnostics))
    (d,) = [d for d in got.diagnostics if d.code == "TL502"]
    assert d.range.start.line == 23 and "tSrS" in d.message
    assert (await lens_title(client, uri)).startswith("✗")


async def test_cancelling_the_progress_stops_the_job_and_keeps_the_worker(
    slow_client: LanguageClient, workspace: Path
) -> None:
    """The Cancel button stops the job cooperatively: at its next step boundary, in the same process."""
    client = slow_client
    rec = await start(client, workspace, {"onSave": "compile"})
    uri = open_doc(client, workspace / "mha_fwd.tl")
    await rec.wait_for(uri, version=1)
    save(client, uri)
    await until_reported(client)
    info = await command(client, "tl.workerInfo")
    assert info["busy"] and info["pid"]
    (token,) = client.progress_reports
    client.window_work_done_progress_cancel(lsp.WorkDoneProgressCancelParams(token=token))
    await until(client, PROGRESS, lambda: ended(client), timeout=10)
    assert ended(client)[0].message == "cancelled"
    after = await idle_worker(client)
    assert after["restarts"] == 0 and after["started"] == 1 and after["pid"] == info["pid"]
    # The server lives on: the document still answers, and a cancelled job leaves the last result.
    assert await lens_title(client, uri) == "not verified yet"


async def test_a_worker_crash_is_reported_and_the_next_run_succeeds(
    crashing_client: LanguageClient, workspace: Path
) -> None:
    client = crashing_client
    rec = await start(client, workspace, {"onSave": "compile"})
    uri = open_doc(client, workspace / "mha_fwd.tl")
    await rec.wait_for(uri, version=1)
    save(client, uri)
    got = await rec.wait_for(uri, predicate=lambda p: any(d.source == "tl worker" for d in p.diagnostics))
    (d,) = [d for d in got.diagnostics if d.source == "tl worker"]
    assert "crashed" in d.message and "exit status 86" in d.message
    assert any("crashed" in m.message and m.type == lsp.MessageType.Error for m in client.messages)
    result = await command(client, "tl.compile", uri)  # the restarted worker takes the next job
    assert result["status"] == "ok"
    assert (await command(client, "tl.workerInfo"))["restarts"] == 1


async def test_a_hanging_worker_times_out(hanging_client: LanguageClient, workspace: Path) -> None:
    client = hanging_client
    rec = await start(client, workspace, {"onSave": "compile", "worker": {"timeoutSeconds": 1}})
    uri = open_doc(client, workspace / "mha_fwd.tl")
    await rec.wait_for(uri, version=1)
    result = await command(client, "tl.compile", uri)
    assert result["status"] == "timeout" and "timed out after 1 s" in result["message"]
    assert any("timed out" in m.message for m in client.messages)
    restarted = await command(client, "tl.restartWorker")
    assert restarted["status"] == "ok" and restarted["pid"]


async def test_verify_without_a_gpu_says_so(client: LanguageClient, workspace: Path) -> None:
    """No fake: the real worker translates; it compiles only if NVRTC is here (slow), so ask for `check`."""
    rec = await start(client, workspace, {"onSave": "check"})
    uri = open_doc(client, workspace / "mha_fwd.tl")
    await rec.wait_for(uri, version=1)
    save(client, uri)
    await until(client, PROGRESS, lambda: ended(client), timeout=60)
    assert ended(client)[0].message == "translates"
    assert (await lens_title(client, uri)) == "✓ translates"


@pytest.mark.slow
@pytest.mark.nvrtc
async def test_real_nvrtc_compile_on_save_maps_errors_to_tl(
    nvrtc_client: LanguageClient, workspace: Path
) -> None:
    """The one real compile: NVRTC on the generated kernel plus an injected `static_assert` at TL line 25
    (TL_WORKER_APPEND_CUDA), so a real NVRTC error travels back through `#line` as TL502."""
    pytest.importorskip("cuda.core")
    client = nvrtc_client
    rec = await start(client, workspace, {"onSave": "compile", "worker": {"timeoutSeconds": 400}})
    uri = open_doc(client, workspace / "mha_fwd.tl")
    await rec.wait_for(uri, version=1)
    save(client, uri)
    await until(client, PROGRESS, lambda: ended(client), timeout=420)
    got = await rec.wait_for(uri, predicate=lambda p: any(d.code == "TL502" for d in p.diagnostics))
    errs = [d for d in got.diagnostics if d.code == "TL502"]
    assert any(d.range.start.line == 24 and "injected by the test" in d.message for d in errs), errs
