"""GPU suite: every kernel is compiled once, up front and in parallel, by a session fixture.

Kernels: TL variants of the examples (pipeline.variants.KernelConfig: head dims, dtypes, masks, targets,
GQA groups) and a few variants of the naive hand-written ABI kernel (tests/runner/data), which checks the
runner itself (launch, strides, masks, LSE, verification) independently of the translator.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import pytest
from gpu_matrix import NAIVE_CONFIGS, TL_CONFIGS

_SUMMARY: list[str] = []


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for line in _SUMMARY:
        terminalreporter.write_line(line)


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@dataclass
class Kernels:
    """Everything the suite compiled: name → Built or BuildError; loading happens on first use."""

    built: dict[str, Any]
    specs: dict[str, Any]
    compile_seconds: float
    _loaded: dict[str, Any]

    def get(self, name: str) -> Any:
        """The loaded kernel, or pytest.fail with the build error (mapped to TL lines)."""
        from pipeline.build import BuildError
        from pipeline.report import format_build_error
        from runner.launch import load

        result = self.built[name]
        if isinstance(result, BuildError):
            pytest.fail(f"{name} did not build:\n{format_build_error(result)}", pytrace=False)
        if name not in self._loaded:
            self._loaded[name] = load(result.compiled, self.specs[name])
        return self._loaded[name]


@pytest.fixture(scope="session")
def kernels(tmp_path_factory: Any) -> Kernels:
    from pipeline.build import BuildError, Translated, compile_all
    from runner.launch import require_device

    device_arch = require_device()
    workdir = tmp_path_factory.mktemp("tl")
    items: list[Translated] = []
    built: dict[str, Any] = {}
    for cfg in TL_CONFIGS:
        # A bare NAME.tl path: the same source (and compile cache entry) as benchmarks/attention.py's.
        try:
            items.append(cfg.translate())
        except BuildError as exc:
            built[cfg.name] = exc
    for n in NAIVE_CONFIGS:
        items.append(
            Translated(
                path=workdir / f"{n.name}.cu",
                cu_path=workdir / f"{n.name}.cu",
                source=n.source(),
                spec=n.spec(),
            )
        )
    start = time.perf_counter()
    workers = int(os.environ.get("TL_COMPILE_JOBS", "0")) or None
    for t, result in zip(
        items, compile_all(items, device_arch=device_arch, max_workers=workers), strict=True
    ):
        built[t.cu_path.stem] = result
    seconds = time.perf_counter() - start
    specs = {t.cu_path.stem: t.spec for t in items}
    n_ok = sum(not isinstance(r, BuildError) for r in built.values())
    _SUMMARY.append(
        f"compiled {n_ok}/{len(built)} kernels in {seconds:.1f} s for {device_arch} "
        f"({sum(getattr(r, 'compiled', None) is not None and r.compiled.cached for r in built.values())}"
        " from the cache)"
    )
    _SUMMARY.extend(
        [f"  build failed: {name} ({r.stage})" for name, r in built.items() if isinstance(r, BuildError)]
    )
    return Kernels(built=built, specs=specs, compile_seconds=seconds, _loaded={})
