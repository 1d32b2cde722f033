"""pytest-lsp fixtures: a client over stdio talking to `python -m server` (what `tl lsp` runs), with and
without a fake worker (TL_WORKER_FAKE, see server/worker/fake.py)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import pytest_lsp
from lsp_harness import EXAMPLES, server_config
from pytest_lsp import LanguageClient

# crash-once: the first worker job crashes and writes this marker; the restarted worker then succeeds.
CRASH_MARKER = Path(tempfile.mkdtemp(prefix="tl-lsp-crash-")) / "crashed"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    for f in EXAMPLES.glob("*.tl"):
        (tmp_path / f.name).write_text(f.read_text())
    return tmp_path


@pytest_lsp.fixture(config=server_config())
async def client(lsp_client: LanguageClient):  # type: ignore[no-untyped-def]
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=server_config(TL_WORKER_FAKE="delay=0.3,rel-l2=0.0021,tflops=583"))
async def fake_client(lsp_client: LanguageClient):  # type: ignore[no-untyped-def]
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=server_config(TL_WORKER_FAKE="delay=60"))
async def slow_client(lsp_client: LanguageClient):  # type: ignore[no-untyped-def]
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=server_config(TL_WORKER_FAKE="hang"))
async def hanging_client(lsp_client: LanguageClient):  # type: ignore[no-untyped-def]
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=server_config(TL_WORKER_FAKE=f"delay=0.2,crash-once={CRASH_MARKER}"))
async def crashing_client(lsp_client: LanguageClient):  # type: ignore[no-untyped-def]
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=server_config(TL_WORKER_FAKE='nvrtc-error=24:identifier "tSrS" is undefined'))
async def nvrtc_error_client(lsp_client: LanguageClient):  # type: ignore[no-untyped-def]
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(
    config=server_config(
        TL_WORKER_APPEND_CUDA='#line 25 "{tl}"\nstatic_assert(sizeof(int) == 3, "injected by the test");'
    )
)
async def nvrtc_client(lsp_client: LanguageClient):  # type: ignore[no-untyped-def]
    yield
    await lsp_client.shutdown_session()
