"""Every example compiles through NVRTC for sm_75 (fp16, resized to Turing's 64 KB), sm_80 and sm_89.

All compiles run at once in worker processes (`runner.compile.compile_many`) and land in the runner's
on-disk cache, so a second run, or another test compiling the same source, is instant.
"""

from __future__ import annotations

import os

import pytest
from translator_cases import FILLED, translate_example

from runner.abi import LaunchSpec
from translator import TranslateError

ARCHS = ("sm_75", "sm_80", "sm_89")
TURING_SMEM = 64 * 1024


def turing_changes(name: str) -> dict[str, object]:
    """fp16 (Turing's tensor cores take nothing else), and tiles shrunk until Q + K + V fit 64 KB."""
    changes: dict[str, object] = {"target": "sm_75", "dtype": "fp16", "stages": 1}
    try:
        translate_example(name, **dict(changes))
    except TranslateError as err:  # TL303: over Turing's shared memory
        assert {d.code for d in err.diagnostics} == {"TL303"}, err.diagnostics
        changes.update(BM=64, warps=4)
    return changes


def job_for(name: str, arch: str):
    from runner.compile import CompileJob

    changes = turing_changes(name) if arch == "sm_75" else {"target": arch}
    t = translate_example(name, **changes)
    assert t.launch.shared_bytes <= (TURING_SMEM if arch == "sm_75" else 99 * 1024)
    return CompileJob(source=t.source, arch=arch, name=f"{name}.cu", source_map=t.source_map,
                      tl_file=t.launch.tl_file), t.launch


@pytest.fixture(scope="module")
def compiled() -> dict[tuple[str, str], tuple[object, LaunchSpec]]:
    try:
        from runner.compile import compile_many
        from runner.toolchain import ToolchainError, toolchain

        toolchain()
    except (ImportError, ToolchainError) as exc:
        pytest.skip(f"no NVRTC toolchain: {exc}")
    keys, jobs, specs = [], [], []
    for name in FILLED:
        for arch in ARCHS:
            job, spec = job_for(name, arch)
            keys.append((name, arch))
            jobs.append(job)
            specs.append(spec)
    results = compile_many(jobs, max_workers=os.cpu_count() or 2)
    return {k: (r, s) for k, r, s in zip(keys, results, specs, strict=True)}


@pytest.mark.nvrtc
@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", FILLED)
def test_example_compiles(name: str, arch: str, compiled) -> None:
    from runner.compile import CompileError

    result, spec = compiled[(name, arch)]
    if isinstance(result, CompileError):
        pytest.fail(f"{name} for {arch}:\n{result}\n{result.log[:4000]}")
    assert result.kind == "cubin" and result.code
    assert spec.arch == arch and spec.kernel_name == name
    assert b"error" not in result.log.encode().lower()
