"""Compile CUDA C++ (CuTe) source through NVRTC (cuda.core `Program`), with an on-disk cache.

`compile_source` compiles one kernel; `compile_many` compiles many in worker processes (NVRTC is single
threaded and a CuTe attention kernel takes 20–60 s, so a suite of ~30 kernels must spread over the cores).
Errors raise `CompileError` with the whole NVRTC log, the options, and the log parsed into records whose
file/line point into the TL file when the source carries `#line` directives.

Precompiled headers: a process that compiles more than one kernel (a `compile_many` worker with several
jobs, the language server's worker) lets the first compile of an include block write an NVRTC
precompiled header and the later ones read it instead of parsing CuTe again (`use_precompiled_headers`,
`PCH_ENV`). A header is only valid in the process that wrote it (see `runner.cache.PchStore`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import queue
import re
import resource
import select
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from runner import finalize
from runner.cache import KernelCache, PchStore, cache_key, pch_key
from runner.compile_prelude import INSTANTIATE_FLAG, Preludes
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
    # "created": this compile wrote the process's precompiled header of its include block; "used": it read
    # one; None: neither (headers off or not worth it, no include block, a cache hit).
    pch: str | None = None


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


# ---- precompiled headers -------------------------------------------------------------------------------

PCH_ENV = "TL_PCH"  # "0" turns precompiled headers off, "1" on, unset: the process's default
# NVRTC's PCH heap must hold the front end's whole state at the end of the include block (NVRTC 13.5:
# 457 MB for the sm_80 block, whose header file is 449 MiB; the Hopper block's is 742 MiB), more than its
# 256 MiB default. A larger block gets the size NVRTC asks for (see `_Pch._create`).
PCH_HEAP_BYTES = 1 << 30
# Headers kept on disk for later processes (`use_precompiled_headers(on_disk=True)`): the heap is mapped
# once at this size, large enough for a prelude header (the heap cannot grow: that would move it), and at
# most this many headers (450 MiB to 1.2 GiB each) stay in the shared directory.
PCH_ON_DISK_HEAP_BYTES = 2 << 30
PCH_ON_DISK_KEEP = 6
# 639: "insufficient preallocated memory for generation of precompiled header file": the create status
# says the same and `_Pch._create` acts on it, so it need not reach the kernel's log.
_PCH_SUPPRESS = (639,)
# NVRTC could not use the header and parsed the include block itself (the compile is still correct):
# 626 invalid or another NVRTC's, 629 other options, 630 another include block, 20282 another heap
# (another process).
_PCH_UNUSABLE = re.compile(r"^Warning #(626|629|630|20282)-D: .*$\n?", re.MULTILINE)
_PCH_MISSING = "cannot open precompiled header file"
# NVRTC says so on every compile that writes or reads a header, verbose or not.
_PCH_NOTE = re.compile(r'^"[^"\n]*": (creating|using) precompiled header file ".*"$\n?', re.MULTILINE)
_REMARK = re.compile(r"^Remark: The warnings can be suppressed with .*$\n?", re.MULTILINE)

_pch_default = False
_INCLUDE = re.compile(r'^#\s*include\s*(<[^<>"]+>|"[^<>"]+")\s*(//.*)?$')
_SIMPLE_DIRECTIVE = re.compile(r"^#\s*(define|undef|pragma)\b")


def use_precompiled_headers(
    enabled: bool = True, *, keep: int | None = None, prelude: bool | None = None, on_disk: bool = False
) -> bool:
    """Let this process write and read precompiled headers (unless `$TL_PCH` is "0"), at most `keep`
    of them at once (default 2: a session may switch between two targets). With `prelude`, a header also
    holds the kernel's template instantiations (`runner.compile_prelude`): the second compile of a
    skeleton writes it (about twice as slow as a cold compile), the later ones are 3–4× faster.

    Worth it only in a process that compiles again: writing one costs the headers' parse and 450–750 MB
    of disk; reading it back skips the parse for the price of faulting the image in (see `_Pch`).

    `on_disk`: keep the headers (and the preludes' body copies) for later processes, at most
    `PCH_ON_DISK_KEEP` headers, where this process runs without address-space randomisation
    (`runner.pch_heap`; call this before the process does other work, since it maps NVRTC's heap now).
    Returns whether headers are kept on disk.
    """
    global _pch_default
    _pch_default = enabled
    if keep is not None:
        _PCH.keep = keep
    if prelude is not None:
        _PCH.prelude = prelude
    if on_disk and not _PCH.on_disk and enabled and pch_enabled():
        _PCH.keep_on_disk()
    return _PCH.on_disk


def pch_enabled() -> bool:
    env = os.environ.get(PCH_ENV, "").strip().lower()
    if env in ("0", "off", "false", "no"):
        return False
    if env in ("1", "on", "true", "yes"):
        return True
    return _pch_default


def header_prefix(source: str) -> str:
    """The include block a precompiled header covers: the directives before the first C++ token.

    NVRTC stops the header at the first token outside a preprocessing directive, and a header serves any
    source whose directives start with the same ones (comments in between do not matter). So the block is
    the key: one line per directive, comments dropped. "" (no header) when the block includes nothing or
    holds anything this reading cannot compare safely (conditionals, `#line`, block comments, continued
    lines): a wrong key would only cost NVRTC's warning 630 and a full parse, but an honest "" is clearer.
    """
    block: list[str] = []
    for raw in source.splitlines():
        line = raw.strip()
        if not line or line.startswith("//"):
            continue
        if not line.startswith("#"):
            break
        if line.endswith("\\") or "/*" in line:
            return ""
        m = _INCLUDE.match(line)
        if m is not None:
            block.append(f"#include {m.group(1)}")
        elif _SIMPLE_DIRECTIVE.match(line):
            block.append(re.sub(r"\s*//.*$", "", line))
        else:
            return ""
    return "\n".join(block) if any(d.startswith("#include") for d in block) else ""


# The translation unit a header is written from: the include block and one empty kernel, so the header
# holds exactly the block its key names, and writing it costs the block's parse (4.7 s of CPU for the
# sm_80 block on the 2-core VM of docs/performance.md) plus the write (1.4 s there).
_ANCHOR = "\n__global__ void tl_pch_anchor() {}\n"


def _pch_flags(mode: str, path: Path) -> list[bytes]:
    # The same suppressions on both sides: NVRTC refuses a header made under other options (629).
    return [f"--{mode}-pch={path}".encode()] + [f"--diag-suppress={n}".encode() for n in _PCH_SUPPRESS]


@dataclass(frozen=True)
class _PchPlan:
    key: str
    path: Path
    created: bool  # this compile's plan wrote the header (reported as "created", else "used")

    def flags(self) -> list[bytes]:
        return _pch_flags("use", self.path)


class _Pch:
    """Which precompiled header a compile reads, written first when this process has none for its block."""

    def __init__(self) -> None:
        self.store: PchStore | None = None
        self.keep = 2
        self.heap_bytes = PCH_HEAP_BYTES
        self.prelude = False  # headers with the kernels' instantiations (`runner.compile_prelude`)
        self.preludes = Preludes()
        self.on_disk = False  # headers shared with later processes (`keep_on_disk`)
        self._creating: set[str] = set()
        self._failed: set[str] = set()  # NVRTC could not write these: not tried again in this process
        # Reading a header costs page faults on its image (449 MiB for sm_80's block): 7 s of system time
        # a compile on the 2-core VM of docs/performance.md, more than the 4.4 s the block's parse costs
        # there, while the Hopper block's parse costs 22 s. So the first read of each header is weighed:
        # its system time against the CPU time of the parse (the compile that wrote the header), and a
        # header that costs more than it saves is dropped and not written again in this process.
        self._parse_s: dict[str, float] = {}
        self._declined: set[str] = set()
        self._weighed: set[str] = set()
        self._lock = threading.Lock()

    def keep_on_disk(self) -> None:
        """Share headers with later processes, if NVRTC's heap can sit at the same address in them."""
        from runner import pch_heap

        shareable = pch_heap.wanted() and pch_heap.randomization_off()
        if not shareable or not pch_heap.pin(PCH_ON_DISK_HEAP_BYTES):
            return
        layout = {"python": sys.version, "executable": sys.executable, "heap": PCH_ON_DISK_HEAP_BYTES}
        shared = hashlib.sha256(
            json.dumps({**layout, **toolchain().fingerprint()}, sort_keys=True).encode()
        ).hexdigest()[:16]
        with self._lock:
            if self.store is not None:
                self.store.close()
            self.store = PchStore(max_entries=PCH_ON_DISK_KEEP, shared=shared)
            self.heap_bytes = PCH_ON_DISK_HEAP_BYTES
            self.on_disk = True
        self.preludes.keep_in(self.store.root / f"preludes-{shared}")

    def plan(
        self,
        source: str,
        opts: Mapping[str, Any],
        flags: list[bytes],
        *,
        create: bool = True,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> _PchPlan | None:
        """The header to read for `source`, written now if need be (and `create`); None: compile
        without one."""
        if not pch_enabled():
            return None
        prefix = header_prefix(source)
        if not prefix:
            return None
        key = pch_key(prefix, dict(opts), toolchain().fingerprint(), opts["arch"])
        with self._lock:
            if self.store is None:
                self.store = PchStore(max_entries=self.keep)
            if key in self._failed or key in self._declined:
                return None
            path = self.store.get(key)
            if path is not None:
                return _PchPlan(key, path, created=False)
            if not create or key in self._creating:
                return None  # (the latter: another thread of this process is writing it)
            if self.store.verdict(key) is False:
                self._declined.add(key)  # weighed on this machine already: it costs more than it saves
                return None
            self._creating.add(key)
        try:
            return self._create(key, prefix, flags, headers)
        finally:
            with self._lock:
                self._creating.discard(key)

    def failed(self, source: str, opts: Mapping[str, Any]) -> bool:
        """Whether NVRTC could not write the header of `source`'s include block in this process."""
        prefix = header_prefix(source)
        key = pch_key(prefix, dict(opts), toolchain().fingerprint(), opts["arch"]) if prefix else None
        with self._lock:
            return key in self._failed

    def _create(
        self, key: str, prefix: str, flags: list[bytes], headers: tuple[tuple[str, str], ...] = ()
    ) -> _PchPlan | None:
        from cuda.bindings import nvrtc

        assert self.store is not None  # plan() made it
        path = self.store.path_for(key)
        for _ in range(2):  # a second time only after growing the heap to what NVRTC asked for
            _ensure_heap(self.heap_bytes)
            anchor = prefix + _ANCHOR
            before = _thread_cpu()
            prog, _log, _code = _nvrtc_once(
                anchor, "tl_pch.cu", flags + _pch_flags("create", path), None, headers
            )
            self._parse_s[key] = sum(_thread_cpu()) - sum(before)
            try:
                (status,) = nvrtc.nvrtcGetPCHCreateStatus(prog.prog)
                err, required = nvrtc.nvrtcGetPCHHeapSizeRequired(prog.prog)
            finally:
                prog.destroy()
            if status == nvrtc.nvrtcResult.NVRTC_SUCCESS and path.is_file():
                return _PchPlan(key, self.store.add(key, path), created=True)
            path.unlink(missing_ok=True)
            heap_full = status == nvrtc.nvrtcResult.NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED
            if not (heap_full and err == nvrtc.nvrtcResult.NVRTC_SUCCESS and required > self.heap_bytes):
                break
            if self.on_disk:
                break  # a grown heap would move, and the shared headers were written at this address
            # A new heap has another address: every header written so far becomes unusable.
            self.heap_bytes = _round_up(required + required // 4, 64 << 20)
            self.store.clear()
            with self._lock:
                self._weighed.clear()
        with self._lock:
            self._failed.add(key)
        return None

    def finish(self, plan: _PchPlan, log: str, system_s: float) -> str | None:
        """The outcome of a compile that read `plan`'s header, `system_s` its system CPU time: "created",
        "used", or None if NVRTC could not use it (then the header is dropped; NVRTC parsed the block
        itself, or never ran)."""
        assert self.store is not None
        if _PCH_UNUSABLE.search(log) or _PCH_MISSING in log:
            self.store.discard(plan.key)
            return None
        with self._lock:
            first_read = plan.key not in self._weighed
            self._weighed.add(plan.key)
            parse_s = self._parse_s.get(plan.key)
            declined = first_read and parse_s is not None and system_s >= parse_s
            if declined:
                self._declined.add(plan.key)
        if first_read and parse_s is not None:
            facts = {"parse_cpu_s": round(parse_s, 2), "read_system_s": round(system_s, 2)}
            self.store.set_verdict(plan.key, not declined, facts)
        if declined:
            self.store.discard(plan.key)
        return "created" if plan.created else "used"


_PCH = _Pch()


def _thread_cpu() -> tuple[float, float]:
    """(user, system) CPU seconds of this thread: NVRTC compiles on the calling thread, so this is the
    compile's own time even while other threads of the process compile too."""
    who = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)
    usage = resource.getrusage(who)
    return usage.ru_utime, usage.ru_stime


@contextlib.contextmanager
def _precompiled_headers_while(enabled: bool) -> Iterator[None]:
    """This process's default for the compiles inside the block (several in a row: worth a header)."""
    global _pch_default
    before = _pch_default
    _pch_default = before or enabled
    try:
        yield
    finally:
        _pch_default = before


def _round_up(n: int, step: int) -> int:
    return -(-n // step) * step


def _ensure_heap(size: int) -> None:
    """Grow NVRTC's PCH heap to `size` before a header is written (only then: resizing the heap later
    would make the headers written so far unusable)."""
    from cuda.bindings import nvrtc

    err, current = nvrtc.nvrtcGetPCHHeapSize()
    if err == nvrtc.nvrtcResult.NVRTC_SUCCESS and current >= size:
        return
    (err,) = nvrtc.nvrtcSetPCHHeapSize(size)
    _check(err, "nvrtcSetPCHHeapSize")


def _clean_pch_log(log: str) -> str:
    """The kernel's own diagnostics: NVRTC's notes about the precompiled header are not about the kernel."""
    cleaned = _PCH_NOTE.sub("", _PCH_UNUSABLE.sub("", log))
    bare = _REMARK.sub("", cleaned)
    if cleaned != log and not re.search(r"\bwarning\b", bare, re.IGNORECASE):
        cleaned = bare  # the remark was about the header's warning alone
    return cleaned.strip()


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
    new_header: bool = True,
) -> CompiledKernel:
    """Compile `source` for `arch` (running on `device_arch`, or build-only when None).

    `new_header`: whether this compile may write a precompiled header its process lacks (when the
    process uses them); False when no later compile of the process shares the include block.
    """
    store = cache if cache is not None else KernelCache()
    ptx = _compile_cached(
        source, arch, device_arch, name, options, source_map, tl_file, store, use_cache, new_header
    )
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
    new_header: bool = True,
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
    code, log, seconds, pch = _nvrtc(
        source, opts, kind, source_map=source_map, tl_file=tl_file, new_header=new_header
    )
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
        pch=pch,
    )


def _nvrtc(
    source: str,
    opts: dict[str, Any],
    kind: str,
    *,
    source_map: Mapping[int, int] | None,
    tl_file: str | None,
    new_header: bool = True,
) -> tuple[bytes, str, float, str | None]:
    """One NVRTC compile through cuda.bindings, with the flags cuda.core's `ProgramOptions` builds, and
    with this process's precompiled header when there is one (or with writing it when there is none).

    Not `Program.compile`: for PTX it asks the driver whether the PTX will load, which fails outright on
    a machine without a GPU driver (CI, laptops), and `tl build` must work there. The precompiled-header
    flags stay out of `opts`, hence out of the cache key: the binary is the same with or without them.
    """
    from cuda.core import ProgramOptions

    flags = ProgramOptions(**opts).as_bytes("nvrtc")
    start = time.perf_counter()
    # With preludes, the source NVRTC sees includes its prelude header; without a header it compiles as is.
    pre = _PCH.preludes.for_source(source, opts["name"]) if _PCH.prelude and pch_enabled() else None
    pre_flags = [*flags, INSTANTIATE_FLAG] if pre else flags
    headers = ((pre.name, pre.text),) if pre else ()
    plan = _PCH.plan(pre.source if pre else source, opts, pre_flags, create=new_header, headers=headers)
    if pre and plan is None:
        if _PCH.failed(pre.source, opts):  # NVRTC could not write it: the next good source's copy
            _PCH.preludes.forget(source)
        pre, headers = None, ()
    system_before = _thread_cpu()[1]
    result, log, code = (
        _nvrtc_once(pre.source, opts["name"], pre_flags + plan.flags(), kind, headers)
        if pre and plan
        else _nvrtc_once(source, opts["name"], flags + (plan.flags() if plan else []), kind)
    )
    result.destroy()
    pch = _PCH.finish(plan, log, _thread_cpu()[1] - system_before) if plan is not None else None
    if plan is not None and pch is None and _PCH_MISSING in log:
        # The header vanished under us (a cleaned cache directory): the compile never ran; run it plainly.
        result, log, code = _nvrtc_once(source, opts["name"], flags, kind)
        result.destroy()
    log = _clean_pch_log(log) if plan is not None else log
    if code is not None and _PCH.prelude and pre is None:
        _PCH.preludes.remember(source)  # the next compile of this skeleton writes its prelude header
    if code is None:
        records = map_records(parse_log(log), opts["name"], source_map, tl_file)
        first = next((r for r in records if r.is_error), None)
        where = f": {first}" if first else f" ({result.status})"
        raise CompileError(
            message=f"NVRTC failed to compile {opts['name']} for {opts['arch']}{where}",
            log=log,
            options=opts,
            records=records,
            source_name=opts["name"],
        )
    return code, log, time.perf_counter() - start, pch


@dataclass
class _Program:
    prog: Any
    status: str

    def destroy(self) -> None:
        from cuda.bindings import nvrtc

        if self.prog is not None:
            nvrtc.nvrtcDestroyProgram(self.prog)
            self.prog = None


def _nvrtc_once(
    source: str,
    name: str,
    flags: list[bytes],
    kind: str | None,
    headers: tuple[tuple[str, str], ...] = (),
) -> tuple[_Program, str, bytes | None]:
    """Compile once: (the program, alive until `destroy` for its PCH status, its log, the code or None on
    failure). `kind` None: no code is wanted (b"" on success). `headers`: (name, text) NVRTC includes
    from memory."""
    from cuda.bindings import nvrtc

    texts = [t.encode() for _, t in headers]
    names = [n.encode() for n, _ in headers]
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), len(headers), texts, names)
    _check(err, "nvrtcCreateProgram")
    handle = _Program(prog, "")
    try:
        (result,) = nvrtc.nvrtcCompileProgram(prog, len(flags), flags)
        handle.status = result.name
        log = _program_log(prog)
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return handle, log, None
        if kind is None:
            return handle, log, b""
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
    except BaseException:
        handle.destroy()
        raise
    return handle, log, buf


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
    new_header: bool = True  # see compile_source


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
            new_header=job.new_header,
        )
    except CompileError as err:
        return err


WORKER_TIMEOUT_S = 900  # one NVRTC compile; a CuTe attention kernel takes 20–60 s


def compile_many(
    jobs: Iterable[CompileJob], *, max_workers: int | None = None, isolated: bool = False
) -> list[CompiledKernel | CompileError]:
    """Compile every job, in parallel processes; results in job order, failures as `CompileError` values.

    Cache hits are answered in this process, so a warm rebuild starts no workers. The misses go to at most
    `max_workers` (default: every core) `python -m runner.compile_worker` processes, each running jobs
    one after another (threads would not help: NVRTC serialises them). Fresh interpreters rather than
    multiprocessing: forking a process that holds a CUDA context or torch's threads is unsafe, and spawn
    re-imports the caller's `__main__`, which breaks unguarded scripts. A worker that gets more than one
    job writes a precompiled header on its first and reads it on the others, so the misses are ordered by
    include block: jobs that share one follow each other.

    `isolated`: a single miss goes to a worker process too (otherwise it compiles here), for callers whose
    process must outlive an NVRTC crash, such as a torch program calling the op's backward.
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
    workers = min(len(pending), max_workers or os.cpu_count() or 1)
    # A job whose include block no other job shares would write a header nobody reads.
    blocks = {i: (header_prefix(jobs[i].source), jobs[i].arch, jobs[i].device_arch or "") for i in pending}
    shared = Counter(blocks.values())
    todo = {i: jobs[i] if shared[blocks[i]] > 1 else replace(jobs[i], new_header=False) for i in pending}
    if (len(pending) == 1 or workers == 1) and not isolated:
        with _precompiled_headers_while(len(pending) > 1):
            for i in pending:
                results[i] = _run_job(todo[i])
    elif pending:
        pending.sort(key=lambda i: blocks[i])
        for i, result in _run_in_workers([(i, todo[i]) for i in pending], workers):
            results[i] = result
    return [r for r in results if r is not None]


def _run_in_workers(
    items: list[tuple[int, CompileJob]], workers: int
) -> list[tuple[int, CompiledKernel | CompileError]]:
    """Each of `workers` threads drives one worker process through the shared queue of jobs."""
    todo: queue.SimpleQueue[tuple[int, CompileJob]] = queue.SimpleQueue()
    for item in items:
        todo.put(item)
    done: list[tuple[int, CompiledKernel | CompileError]] = []
    lock = threading.Lock()
    # With no more jobs than workers each worker compiles once: a precompiled header would never be read.
    reuse = len(items) > workers

    def drive() -> None:
        with CompileWorker(precompiled_headers=reuse) as worker:
            while True:
                try:
                    i, job = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    result = worker.run(job)
                except Exception as exc:  # e.g. the worker cannot be started: still one answer per job
                    result = _worker_failure(job, f"the compile worker failed: {exc!r}")
                with lock:
                    done.append((i, result))

    threads = [threading.Thread(target=drive, name=f"tl-compile-{n}", daemon=True) for n in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    answered = {i for i, _ in done}
    done += [(i, _worker_failure(job, "no worker ran this job")) for i, job in items if i not in answered]
    return done


class CompileWorker:
    """One `python -m runner.compile_worker` process that compiles jobs one after another.

    Jobs and results travel as length-prefixed pickles over its stdin and its own copy of stdout (the
    worker points fd 1 at stderr, so nothing a library prints can corrupt them); its stderr goes to a
    temporary file, quoted when it dies. A worker that dies or outlives `timeout` on a job is killed, that
    job answered with a `CompileError`, and the next job starts a fresh one.
    """

    def __init__(
        self,
        *,
        precompiled_headers: bool = True,
        timeout: float = WORKER_TIMEOUT_S,
        command: Sequence[str] | None = None,
    ) -> None:
        self.precompiled_headers = precompiled_headers
        self.timeout = timeout
        self.command = list(command or [sys.executable, "-m", "runner.compile_worker"])
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self.started = 0

    def __enter__(self) -> CompileWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> subprocess.Popen[bytes]:
        # The child must import this very `runner` package, however the parent found it (installed,
        # PYTHONPATH, or pytest's rootdir on sys.path).
        root = str(Path(__file__).resolve().parents[1])
        path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": path}
        if self.precompiled_headers and PCH_ENV not in os.environ:
            env[PCH_ENV] = "1"
        if self._stderr is not None:
            self._stderr.close()
        # Lives as long as the worker (closed in `close`): a context manager cannot span the calls.
        self._stderr = tempfile.TemporaryFile(prefix="tl-compile-worker-")  # noqa: SIM115
        self._proc = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
        )
        self.started += 1
        return self._proc

    def run(self, job: CompileJob) -> CompiledKernel | CompileError:
        proc = self._proc if self._proc is not None and self._proc.poll() is None else self._start()
        assert proc.stdin is not None and proc.stdout is not None  # created with PIPE
        try:
            write_frame(proc.stdin, pickle.dumps(job))
            payload = read_frame(proc.stdout, deadline=time.monotonic() + self.timeout)
        except TimeoutError:
            self._kill()
            return _worker_failure(job, f"the compile did not finish within {self.timeout:g} s")
        except (BrokenPipeError, EOFError, OSError):
            code = self._kill()
            return _worker_failure(job, f"the compile worker exited with {code}: {self._stderr_tail()}")
        try:
            result = pickle.loads(payload)
        except Exception as exc:  # a torn frame: the worker is not trustworthy any more
            self._kill()
            return _worker_failure(job, f"the compile worker answered garbage ({exc})")
        if not isinstance(result, (CompiledKernel, CompileError)):
            return _worker_failure(job, f"the compile worker answered {type(result).__name__}")
        return result

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-2000:]

    def _kill(self) -> int | None:
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
        return proc.wait()

    def close(self) -> None:
        """End the worker: EOF on its stdin, then a kill if it does not exit promptly."""
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                if proc.stdin is not None:
                    proc.stdin.close()
                proc.wait(timeout=30)
            except (subprocess.TimeoutExpired, OSError):
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


_FRAME = struct.Struct(">Q")


def write_frame(stream: IO[bytes], payload: bytes) -> None:
    stream.write(_FRAME.pack(len(payload)) + payload)
    stream.flush()


def read_frame(stream: IO[bytes], *, deadline: float | None = None) -> bytes:
    """One length-prefixed message; EOFError at a clean end of stream, TimeoutError past `deadline`."""
    header = _read_exact(stream, _FRAME.size, deadline)
    (size,) = _FRAME.unpack(header)
    return _read_exact(stream, size, deadline)


def _read_exact(stream: IO[bytes], size: int, deadline: float | None) -> bytes:
    fd = stream.fileno()
    chunks: list[bytes] = []
    left = size
    while left:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                raise TimeoutError
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _worker_failure(job: CompileJob, message: str) -> CompileError:
    return CompileError(
        message=f"{job.name}: {message}",
        log=message,
        options={"arch": job.arch},
        records=[],
        source_name=job.name,
    )
