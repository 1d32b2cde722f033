"""Compile CUDA C++ (CuTe) source through NVRTC (cuda.core `Program`), with an on-disk cache.

`compile_source` compiles one kernel; `compile_many` compiles many in worker processes (NVRTC is single
threaded and a CuTe attention kernel takes 20–30 s, so a suite of ~30 kernels must spread over the cores).
Errors raise `CompileError` with the whole NVRTC log, the options, and the log parsed into records whose
file/line point into the TL file when the source carries `#line` directives.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from runner import finalize
from runner.cache import KernelCache, cache_key
from runner.nvrtc_log import LogRecord, map_records, parse_log
from runner.toolchain import compile_target, toolchain


@dataclass(frozen=True)
class CompiledKernel:
    code: bytes
    kind: str  # "cubin" | "ptx"
    target: str  # the NVRTC arch option: "sm_80", or "compute_75" for PTX
    arch: str  # the kernel's own arch (LaunchSpec.arch)
    name: str  # source file name NVRTC saw
    log: str  # warnings of a successful compile ("" when clean)
    seconds: float  # compile time (of the original compile, for a cache hit)
    cached: bool
    key: str
    # Set when `code` is a cubin that ptxas assembled for the device from PTX for an older `target`.
    sass_arch: str | None = None


class CompileError(Exception):
    """NVRTC rejected the source. Carries the full log and options; `records` are the parsed messages."""

    def __init__(
        self,
        *,
        message: str,
        log: str,
        options: Mapping[str, Any],
        records: Sequence[LogRecord],
        source_name: str,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.log = log
        self.options = dict(options)
        self.records = list(records)
        self.source_name = source_name

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only constructor: rebuild through a helper so the error crosses process boundaries.
        return (
            _rebuild_compile_error,
            (self.message, self.log, self.options, self.records, self.source_name),
        )

    @property
    def errors(self) -> list[LogRecord]:
        return [r for r in self.records if r.is_error]

    def __str__(self) -> str:
        lines = [self.message]
        lines += [f"  {r}" for r in self.errors[:10]]
        return "\n".join(lines)


def _rebuild_compile_error(
    message: str, log: str, options: dict, records: list, source_name: str
) -> CompileError:
    return CompileError(message=message, log=log, options=options, records=records, source_name=source_name)


def nvrtc_options(target: str, name: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The options every kernel is compiled with, as a plain dict (hashed for the cache key)."""
    opts: dict[str, Any] = {
        "name": name,
        "arch": target,
        "std": "c++17",
        "include_path": list(toolchain().include_paths),
        # CuTe has host/device lambdas; without this NVRTC rejects them ("host functions ... JIT mode").
        "device_as_default_execution_space": True,
        "lineinfo": True,  # profiles and sanitizer reports map to source (and through #line, to TL)
    }
    if extra:
        opts.update(extra)
    return opts


def compile_source(
    source: str,
    *,
    arch: str,
    device_arch: str | None = None,
    name: str = "kernel.cu",
    options: Mapping[str, Any] | None = None,
    source_map: Mapping[int, int] | None = None,
    tl_file: str | None = None,
    cache: KernelCache | None = None,
    use_cache: bool = True,
) -> CompiledKernel:
    """Compile `source` for `arch` (running on `device_arch`, or build-only when None)."""
    store = cache if cache is not None else KernelCache()
    ptx = _compile_cached(source, arch, device_arch, name, options, source_map, tl_file, store, use_cache)
    if ptx.kind == "ptx" and device_arch is not None:
        return _finalize(ptx, device_arch, store, use_cache)
    return ptx


def _finalize_key(key: str, device_arch: str) -> str | None:
    version = finalize.ptxas_version()
    if version is None:
        return None
    return hashlib.sha256(f"{key}|{version}|{device_arch}".encode()).hexdigest()


def _finalize(ptx: CompiledKernel, device_arch: str, store: KernelCache, use_cache: bool) -> CompiledKernel:
    """PTX → cubin for the device with ptxas (see runner/finalize.py); the PTX itself when that fails."""
    key = _finalize_key(ptx.key, device_arch)
    if key is None:
        return ptx
    if use_cache and (hit := store.get(key)) is not None:
        return replace(
            ptx,
            code=hit.code,
            kind="cubin",
            sass_arch=device_arch,
            key=key,
            seconds=ptx.seconds + hit.meta.get("seconds", 0.0),
        )
    start = time.perf_counter()
    cubin, log = finalize.assemble(ptx.code, device_arch)
    if cubin is None:
        return replace(
            ptx, log="\n".join(filter(None, [ptx.log, f"ptxas (kept the PTX for the driver): {log}"]))
        )
    seconds = time.perf_counter() - start
    if use_cache:
        store.put(key, cubin, {"seconds": seconds, "log": log, "sass_arch": device_arch})
    return replace(
        ptx,
        code=cubin,
        kind="cubin",
        sass_arch=device_arch,
        key=key,
        cached=False,
        seconds=ptx.seconds + seconds,
    )


def _compile_cached(
    source: str,
    arch: str,
    device_arch: str | None,
    name: str,
    options: Mapping[str, Any] | None,
    source_map: Mapping[int, int] | None,
    tl_file: str | None,
    store: KernelCache,
    use_cache: bool,
) -> CompiledKernel:
    target, kind = compile_target(arch, device_arch)
    opts = nvrtc_options(target, name, options)
    key = cache_key(source, opts, toolchain().fingerprint(), target, kind)
    if use_cache:
        hit = store.get(key)
        if hit is not None:
            return CompiledKernel(
                code=hit.code,
                kind=kind,
                target=target,
                arch=arch,
                name=name,
                log=hit.meta.get("log", ""),
                seconds=hit.meta.get("seconds", 0.0),
                cached=True,
                key=key,
            )
    code, log, seconds = _nvrtc(source, opts, kind, source_map=source_map, tl_file=tl_file)
    if use_cache:
        store.put(key, code, {"log": log, "seconds": seconds, "target": target, "kind": kind, "name": name})
    return CompiledKernel(
        code=code,
        kind=kind,
        target=target,
        arch=arch,
        name=name,
        log=log,
        seconds=seconds,
        cached=False,
        key=key,
    )


def _nvrtc(
    source: str, opts: dict[str, Any], kind: str, *, source_map: Mapping[int, int] | None, tl_file: str | None
) -> tuple[bytes, str, float]:
    """One NVRTC compile through cuda.bindings, with the flags cuda.core's `ProgramOptions` builds.

    Not `Program.compile`: for PTX it asks the driver whether the PTX will load, which fails outright on
    a machine without a GPU driver (CI, laptops), and `tl build` must work there.
    """
    from cuda.bindings import nvrtc
    from cuda.core import ProgramOptions

    flags = ProgramOptions(**opts).as_bytes("nvrtc")
    start = time.perf_counter()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), opts["name"].encode(), 0, [], [])
    _check(err, "nvrtcCreateProgram")
    try:
        (result,) = nvrtc.nvrtcCompileProgram(prog, len(flags), flags)
        log = _program_log(prog)
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            records = map_records(parse_log(log), opts["name"], source_map, tl_file)
            first = next((r for r in records if r.is_error), None)
            where = f": {first}" if first else f" ({result.name})"
            raise CompileError(
                message=f"NVRTC failed to compile {opts['name']} for {opts['arch']}{where}",
                log=log,
                options=opts,
                records=records,
                source_name=opts["name"],
            )
        if kind == "ptx":
            err, size = nvrtc.nvrtcGetPTXSize(prog)
            _check(err, "nvrtcGetPTXSize")
            buf = b" " * size
            (err,) = nvrtc.nvrtcGetPTX(prog, buf)
            _check(err, "nvrtcGetPTX")
            buf = buf.rstrip(b"\x00")  # PTX is text; the driver wants it without the C terminator
        else:
            err, size = nvrtc.nvrtcGetCUBINSize(prog)
            _check(err, "nvrtcGetCUBINSize")
            buf = b" " * size
            (err,) = nvrtc.nvrtcGetCUBIN(prog, buf)
            _check(err, "nvrtcGetCUBIN")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return buf, log, time.perf_counter() - start


def _program_log(prog: Any) -> str:
    from cuda.bindings import nvrtc

    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    _check(err, "nvrtcGetProgramLogSize")
    buf = b" " * size
    (err,) = nvrtc.nvrtcGetProgramLog(prog, buf)
    _check(err, "nvrtcGetProgramLog")
    return buf.rstrip(b"\x00").decode(errors="replace").strip()


def _check(err: Any, what: str) -> None:
    from cuda.bindings import nvrtc

    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"{what} failed: {err.name}")


# ---- many kernels at once -------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompileJob:
    source: str
    arch: str
    name: str = "kernel.cu"
    device_arch: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    source_map: dict[int, int] | None = None
    tl_file: str | None = None


def _run_job(job: CompileJob) -> CompiledKernel | CompileError:
    try:
        return compile_source(
            job.source,
            arch=job.arch,
            device_arch=job.device_arch,
            name=job.name,
            options=job.options,
            source_map=job.source_map,
            tl_file=job.tl_file,
        )
    except CompileError as err:
        return err


WORKER_TIMEOUT_S = 900  # one NVRTC compile; a CuTe attention kernel takes 20–60 s


def compile_many(
    jobs: Iterable[CompileJob], *, max_workers: int | None = None
) -> list[CompiledKernel | CompileError]:
    """Compile every job, in parallel processes; results in job order, failures as `CompileError` values.

    Cache hits are answered in this process, so a warm rebuild starts no workers. Each miss runs in a
    fresh `python -m runner.compile_worker` (threads would not help: NVRTC serialises them). Fresh
    interpreters rather than multiprocessing: forking a process that holds a CUDA context or torch's
    threads is unsafe, and spawn re-imports the caller's `__main__`, which breaks unguarded scripts.
    """
    jobs = list(jobs)
    results: list[CompiledKernel | CompileError | None] = [None] * len(jobs)
    pending: list[int] = []
    store = KernelCache()
    for i, job in enumerate(jobs):
        target, kind = compile_target(job.arch, job.device_arch)
        opts = nvrtc_options(target, job.name, job.options)
        key = cache_key(job.source, opts, toolchain().fingerprint(), target, kind)
        keys = [key]
        if kind == "ptx" and job.device_arch is not None:
            keys.append(_finalize_key(key, job.device_arch) or key)
        if all(store.get(k) is not None for k in keys):
            results[i] = _run_job(job)  # a cache hit: cheap
        else:
            pending.append(i)
    if len(pending) == 1 or (max_workers or os.cpu_count() or 1) == 1:
        for i in pending:
            results[i] = _run_job(jobs[i])
    elif pending:
        workers = min(len(pending), max_workers or os.cpu_count() or 1)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for i, result in zip(
                pending, pool.map(_run_in_subprocess, [jobs[i] for i in pending]), strict=True
            ):
                results[i] = result
    return [r for r in results if r is not None]


def _run_in_subprocess(job: CompileJob) -> CompiledKernel | CompileError:
    # The child must import this very `runner` package, however the parent found it (installed,
    # PYTHONPATH, or pytest's rootdir on sys.path).
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    # The result travels through a file, not stdout: nothing a library prints can corrupt it.
    with tempfile.TemporaryDirectory(prefix="tl-compile-") as tmp:
        out = Path(tmp) / "result.pickle"
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "runner.compile_worker", str(out)],
                input=pickle.dumps(job),
                capture_output=True,
                env=env,
                timeout=WORKER_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return _worker_failure(job, f"the compile did not finish within {WORKER_TIMEOUT_S} s")
        if proc.returncode != 0 or not out.exists():
            stderr = proc.stderr.decode(errors="replace")[-2000:]
            return _worker_failure(job, f"the compile worker exited with {proc.returncode}: {stderr}")
        result = pickle.loads(out.read_bytes())
    if not isinstance(result, (CompiledKernel, CompileError)):
        return _worker_failure(job, f"the compile worker answered {type(result).__name__}")
    return result


def _worker_failure(job: CompileJob, message: str) -> CompileError:
    return CompileError(
        message=f"{job.name}: {message}",
        log=message,
        options={"arch": job.arch},
        records=[],
        source_name=job.name,
    )
