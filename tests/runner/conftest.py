"""Fixtures of the runner's tests."""

from __future__ import annotations

import pytest

from runner import compile as rc


@pytest.fixture
def fresh_pch(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """A precompiled-header state of its own (headers on, an empty kernel cache), closed afterwards."""
    pytest.importorskip("cuda.bindings")
    pytest.importorskip("cutlass_library")
    monkeypatch.setenv("TL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(rc.PCH_ENV, "1")
    state = rc._Pch()
    monkeypatch.setattr(rc, "_PCH", state)
    yield state
    if state.store is not None:
        state.store.close()
