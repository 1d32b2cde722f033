"""The kernel's prelude as part of a precompiled header, so that a later compile of the same skeleton reads
the body's template instantiations instead of redoing them.

A generated source is: its include block, then definitions (the traits struct, the `tl::` helpers), then
the `extern "C"` kernels. An edit of a score expression changes the kernels only. The prelude is an
in-memory header holding the definitions and an uncalled `static __device__` copy of each kernel; the
source to compile includes it at the end of its include block, so NVRTC's precompiled header (written with
`--instantiate-templates-in-pch`) holds every CuTe instantiation the kernels make. One header serves
every edit of the kernels: its body copy is that of the first source of the skeleton that compiled, and a
stale copy still instantiates the skeleton's calls (docs/performance.md, "Compile latency": `mha_fwd`'s warm
compile 17.7 s of CPU instead of ~62 on the 2-core VM, the same SASS).

Writing such a header costs more than a cold compile, so only a process that compiles the same skeleton
again asks for it (the language server's worker: its second save of a skeleton writes the header, the
third and later read it). CUDA text only: nothing here knows TL.
"""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from runner.cache import atomic_write

KERNEL = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\(')
# NVRTC's flag for it; on both sides of a header (NVRTC refuses a header made under other flags, 629)
INSTANTIATE_FLAG = b"--instantiate-templates-in-pch=true"


@dataclass(frozen=True)
class Prelude:
    name: str  # the in-memory header, `tl_prelude_<hash>.cuh`
    text: str
    source: str  # the source to compile: the include block, then `#include "<name>"`, then the kernels


def split(source: str) -> tuple[str, str, str] | None:
    """(include block, definitions, kernels) of a generated source; None without both."""
    lines = source.splitlines(keepends=True)
    at = 0
    for i, raw in enumerate(lines):
        line = raw.strip()
        if line and not line.startswith("//") and not line.startswith("#"):
            at = i
            break
    else:
        return None
    includes, rest = "".join(lines[:at]), "".join(lines[at:])
    first = rest.find('extern "C" __global__')
    if first <= 0 or "#include" not in includes:
        return None
    return includes, rest[:first], rest[first:]


class Preludes:
    """This process's preludes, one per includes and definitions. The body copy is that of the first
    source of the skeleton that compiled (`remember`): a copy that does not compile would make writing the
    header fail, at the price of a whole front end, on every save of a kernel being fixed. The header is
    named after its whole text, so a new copy is a new header."""

    def __init__(self) -> None:
        self._texts: dict[str, str] = {}
        self._lock = threading.Lock()
        # Where body copies outlive the process (beside headers that do, `runner.pch_heap`): a later
        # process's first compile of a skeleton then names the same prelude and reads its header.
        self.directory: Path | None = None

    def keep_in(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory

    def _text(self, skeleton: str) -> str | None:
        with self._lock:
            text = self._texts.get(skeleton)
        if text is None and self.directory is not None:
            try:
                text = (self.directory / f"{skeleton}.cuh").read_text()
            except OSError:
                return None
            with self._lock:
                text = self._texts.setdefault(skeleton, text)
        return text

    def for_source(self, source: str, source_name: str) -> Prelude | None:
        """The prelude of `source` (named `source_name` in NVRTC's messages); None before a source of its
        skeleton compiled."""
        parts = split(source)
        if parts is None:
            return None
        includes, definitions, kernels = parts
        text = self._text(_skeleton(includes, definitions))
        if text is None:
            return None
        name = f"tl_prelude_{hashlib.sha256(text.encode()).hexdigest()[:16]}.cuh"
        # The kernels keep their line numbers (NVRTC's messages and the source map count the whole source)
        # through a `#line` after the header's stop point, the first token: a directive before it would
        # be part of the header's key.
        first = (includes + definitions).count("\n") + 1
        resume = f'namespace tl_prelude {{}}\n#line {first} "{source_name}"\n'
        return Prelude(name, text, f'{includes}#include "{name}"\n{resume}{kernels}')

    def remember(self, source: str) -> None:
        """`source` compiled: its kernels become its skeleton's body copy, unless it has one."""
        parts = split(source)
        if parts is None:
            return
        skeleton = _skeleton(parts[0], parts[1])
        if self._text(skeleton) is not None:
            return
        with self._lock:
            text = self._texts.setdefault(skeleton, _header(*parts))
        if self.directory is not None:
            atomic_write(self.directory / f"{skeleton}.cuh", text.encode())

    def forget(self, source: str) -> None:
        """Drop the body copy of `source`'s skeleton (its header could not be written)."""
        parts = split(source)
        if parts is not None:
            skeleton = _skeleton(parts[0], parts[1])
            with self._lock:
                self._texts.pop(skeleton, None)
            if self.directory is not None:
                (self.directory / f"{skeleton}.cuh").unlink(missing_ok=True)


def _skeleton(includes: str, definitions: str) -> str:
    return hashlib.sha256((includes + definitions).encode()).hexdigest()


def _header(includes: str, definitions: str, kernels: str) -> str:
    copy = KERNEL.sub(lambda m: f"static __device__ void {m.group(1)}_prelude(", kernels)
    copy = copy.replace("__grid_constant__ ", "")  # an attribute of kernel parameters only
    note = "// Never called: instantiates the kernels' templates.\n"
    return f"#pragma once\n{includes}{definitions}\n{note}{copy}"
