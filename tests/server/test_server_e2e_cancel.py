"""End to end over stdio (issue 21): a save during a running job supersedes it without killing the warm
worker — the first job's compile finishes, its progress ends "cancelled", the second save's job runs next in
the same process and its result is the lens; a worker that does not answer the cancel is killed after
`tl.worker.cancelGraceSeconds` and the server carries on. Fake jobs (TL_WORKER_FAKE)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsp_harness import change, command, doc_id, ended, open_doc, save, server_config, start, until
from lsprotocol import types as lsp
from pytest_lsp import LanguageClient

pytestmark = pytest.mark.e2e

PROGRESS = "$/progress"
VERIFIED = "✓ rel-L2 2.1e-03 · 583 TFLOPS · NVRTC 2.5 s (fake device)"


@pytest_lsp.fixture(config=server_config(TL_WORKER_FAKE="compile=2.5,rel-l2=0.0021,tflops=583"))
async def compiling_client(lsp_client: LanguageClient):  # type: ignore[no-untyped-def]
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=server_config(TL_WORKER_FAKE="deaf=2,delay=0.2"))
async def deaf_client(lsp_client: LanguageClient):  # type: ignore[no-untyped-def]
    yield
    await lsp_client.shutdown_session()


def reported(client: LanguageClient, text: str) -> bool:
    return any(
        isinstance(v, lsp.WorkDoneProgressReport) and text in (v.message or "")
        for values in client.progress_reports.values()
        for v in values
    )


def end_messages(client: LanguageClient) -> list[str | None]:
    """Each progress's end message, in the order the progresses began."""
    return [end.message for end in ended(client)]


async def lens_title(client: LanguageClient, uri: str) -> str:
    lenses = await client.text_document_code_lens_async(lsp.CodeLensParams(text_document=doc_id(uri)))
    assert lenses and lenses[0].command is not None
    return lenses[0].command.title


async def saved_twice(client: LanguageClient, workspace: Path, settings: dict[str, Any], during: str) -> Any:
    """Open mha_fwd.tl, save, and once the job reports `during`, edit and save again: (uri, the worker's
    info while the first job ran)."""
    rec = await start(client, workspace, settings)
    text = (workspace / "mha_fwd.tl").read_text()
    uri = open_doc(client, workspace / "mha_fwd.tl", text)
    await rec.wait_for(uri, version=1)
    save(client, uri)
    await until(client, PROGRESS, lambda: reported(client, during))
    first = await command(client, "tl.workerInfo")
    assert first["busy"] and first["pid"]
    change(client, uri, 2, text + "# the second save\n")
    await rec.wait_for(uri, version=2)
    save(client, uri)
    await until(client, PROGRESS, lambda: len(ended(client)) == 2, timeout=30)
    return uri, first


async def test_a_save_during_the_compile_keeps_the_warm_worker_and_shows_the_second_result(
    compiling_client: LanguageClient, workspace: Path
) -> None:
    client = compiling_client
    results: list[Any] = []

    @client.feature("tl/result")
    def on_result(ls: LanguageClient, params: Any) -> None:
        results.append(params)

    uri, first = await saved_twice(client, workspace, {"onSave": "verify"}, "compiling with NVRTC")
    assert end_messages(client) == ["cancelled", "fake job done"]
    # Only the second save's job reached the lens (of version 2: not stale), and the status bar.
    assert await lens_title(client, uri) == VERIFIED
    assert [r.summary for r in results] == [VERIFIED]
    info = await command(client, "tl.workerInfo")
    assert info["pid"] == first["pid"] and info["started"] == 1 and info["restarts"] == 0
    # Still the same, warm process: its third job.
    again = await command(client, "tl.verify", uri)
    assert again["status"] == "ok" and again["result"]["worker"] == {"pid": first["pid"], "jobs": 3}


async def test_a_worker_that_does_not_answer_the_cancel_is_killed_after_the_grace_period(
    deaf_client: LanguageClient, workspace: Path
) -> None:
    client = deaf_client
    settings = {"onSave": "compile", "worker": {"cancelGraceSeconds": 0.5}}
    uri, first = await saved_twice(client, workspace, settings, "fake deaf step")
    assert end_messages(client) == ["cancelled", "fake job done"]
    assert await lens_title(client, uri) == "✓ compiles (NVRTC in 0.2 s)"
    info = await command(client, "tl.workerInfo")
    assert info["pid"] != first["pid"] and info["restarts"] == 1
