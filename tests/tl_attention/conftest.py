"""Fixtures: `on_cpu` registers CPU kernels for the tl_attention ops for one test (cpu_reference.py), so
models and autograd run without a GPU; `provider` registers the reference backward provider alone,
`no_providers` none."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from cpu_reference import reference_backward, reference_forward

from tl_attention import backward, checks, ops
from tl_attention.backward import register_backward_provider


@pytest.fixture
def on_cpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """CPU kernels for the ops, for this test only, and CPU tensors accepted by the call's checks."""
    monkeypatch.setattr(checks, "_DEVICES", ("cuda", "meta", "cpu"))
    with torch.library._scoped_library("tl_attention", "IMPL") as lib:
        torch.library.register_kernel("tl_attention::forward", "cpu", reference_forward, lib=lib)
        torch.library.register_kernel("tl_attention::backward", "cpu", ops.run_backward, lib=lib)
        yield


@pytest.fixture
def no_providers(monkeypatch: pytest.MonkeyPatch) -> None:
    """No backward provider at all, not even the backward kernels' default one, for this test."""
    monkeypatch.setattr(backward, "_PROVIDERS", [])
    monkeypatch.setattr(backward, "_DEFAULTS_LOADED", True)


@pytest.fixture
def provider(no_providers: None) -> None:
    """The reference provider alone (the backward kernels' provider needs a GPU)."""
    register_backward_provider(reference_backward)
