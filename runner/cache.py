"""Content-hash cache of compiled kernels on disk.

Key: sha256 over the source, the NVRTC options, the NVRTC/CUTLASS/CCCL versions, the target arch and the
output kind (FlashAttention's fingerprint idea): anything that changes the binary changes the key, so an
entry is never stale and never needs invalidation. Writes are atomic (a temporary file in the same
directory, then `os.replace`), so parallel compiles of the same kernel and interrupted runs never leave
a half-written entry. Directory: `$TL_CACHE_DIR`, else `~/.cache/tl/kernels`.

`PchStore` keeps NVRTC precompiled headers beside it (`pch/` in the same directory), one directory per
process: see its docstring for why a precompiled header outlives its process only where the NVRTC heap
sits at one address in every process (`shared`, `runner.pch_heap`). Whether a header pays for itself on
this machine outlives it, in `pch/verdicts/` (delete them to weigh again).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def cache_dir() -> Path:
    env = os.environ.get("TL_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "tl" / "kernels"


def cache_key(
    source: str, options: dict[str, Any], fingerprint: dict[str, str], target: str, kind: str
) -> str:
    payload = json.dumps(
        {"source": source, "options": options, "versions": fingerprint, "target": target, "kind": kind},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


@dataclass(frozen=True)
class CacheEntry:
    code: bytes
    meta: dict[str, Any]


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` so readers see the old file or the new one, never a half-written one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class KernelCache:
    def __init__(self, root: Path | None = None) -> None:
        self.root = root if root is not None else cache_dir()

    def _paths(self, key: str) -> tuple[Path, Path]:
        d = self.root / key[:2]
        return d / f"{key}.bin", d / f"{key}.json"

    def get(self, key: str) -> CacheEntry | None:
        code_path, meta_path = self._paths(key)
        try:
            meta = json.loads(meta_path.read_text())
            code = code_path.read_bytes()
        except (OSError, ValueError):
            return None
        if meta.get("sha256") != hashlib.sha256(code).hexdigest():
            return None  # torn or tampered entry: recompile
        return CacheEntry(code=code, meta=meta)

    def put(self, key: str, code: bytes, meta: dict[str, Any]) -> None:
        code_path, meta_path = self._paths(key)
        # Code first, metadata last: an entry exists only once its metadata (with the code's hash) does.
        atomic_write(code_path, code)
        atomic_write(meta_path, json.dumps({**meta, "sha256": hashlib.sha256(code).hexdigest()}).encode())


# ---- precompiled headers --------------------------------------------------------------------------------


def pch_key(prefix: str, options: dict[str, Any], fingerprint: dict[str, str], target: str) -> str:
    """Key of the precompiled header of an include block: the block, the NVRTC options but the source name
    (one header serves every kernel that starts with the block), the toolchain versions and the target."""
    opts = {k: v for k, v in options.items() if k != "name"}
    payload = json.dumps(
        {"pch": prefix, "options": opts, "versions": fingerprint, "target": target},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


class PchStore:
    """This process's precompiled headers, at most `max_entries` of them, least recently used dropped first.

    NVRTC writes a precompiled header as an image of its PCH heap and can read it back only at the heap's
    address. Under address-space randomisation every process gets another address, so a header made by
    one process is refused by every other (NVRTC warning 20282, then it parses the headers again). Hence
    one directory per process, `<kernel cache>/pch/<pid>-<random>/`, removed at exit; the directory of a
    process that died without cleaning up is removed by the next store that finds its pid gone. A header
    is about 450 MB for `cute/tensor.hpp`, which is what `max_entries` bounds.

    `shared` (a name for the processes' common heap layout, `runner.pch_heap`): the headers live in
    `<kernel cache>/pch/shared-<shared>/` instead and outlive the process; `get` finds one another process
    wrote, a new one is written under a temporary name and renamed into place, and `max_entries` bounds
    the directory's headers (the least recently used file goes first).
    """

    def __init__(self, root: Path | None = None, *, max_entries: int = 2, shared: str | None = None) -> None:
        self.root = (root if root is not None else cache_dir()) / "pch"
        self.max_entries = max(1, max_entries)
        self.shared = shared
        self._dir: Path | None = None
        self._entries: OrderedDict[str, Path] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def directory(self) -> Path:
        """This process's directory (or the shared one), created (and stale ones removed) on first use."""
        with self._lock:
            if self._dir is None:
                self.root.mkdir(parents=True, exist_ok=True)
                _remove_dead_dirs(self.root)
                if self.shared is not None:
                    self._dir = self.root / f"shared-{self.shared}"
                    self._dir.mkdir(exist_ok=True)
                else:
                    self._dir = Path(tempfile.mkdtemp(dir=self.root, prefix=f"{os.getpid()}-"))
                    atexit.register(self.close)
            return self._dir

    def path_for(self, key: str) -> Path:
        """Where NVRTC writes the header of `key` (a temporary name in a shared directory: `add` renames
        it, so another process never maps a half-written file)."""
        if self.shared is not None:
            return self.directory / f"{key}.{os.getpid()}.{threading.get_ident()}.tmp"
        return self.directory / f"{key}.pch"

    def get(self, key: str) -> Path | None:
        shared_dir = self.directory if self.shared is not None else None
        with self._lock:
            path = self._entries.get(key)
            if path is None and shared_dir is not None:
                found = shared_dir / f"{key}.pch"
                if found.is_file():  # another process wrote it
                    path = self._entries[key] = found
            if path is None:
                return None
            if not path.is_file():
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
        if self.shared is not None:
            with contextlib.suppress(OSError):
                os.utime(path)  # recently used: evicted last
        return path

    def add(self, key: str, path: Path) -> Path:
        """Register a header NVRTC has just written at `path` (from `path_for`); evicts the oldest.
        Returns where it now lives."""
        if self.shared is not None:
            final = path.with_name(f"{key}.pch")
            os.replace(path, final)
            path = final
        with self._lock:
            self._entries[key] = path
            self._entries.move_to_end(key)
            if self.shared is not None:
                self._evict_shared(keep=path)
                return path
            while len(self._entries) > self.max_entries:
                _, old = self._entries.popitem(last=False)
                old.unlink(missing_ok=True)
        return path

    def _evict_shared(self, keep: Path) -> None:
        """The shared directory's oldest headers past `max_entries` (by last use), whoever wrote them."""
        assert self._dir is not None

        def mtime(p: Path) -> float:
            try:
                return p.stat().st_mtime
            except OSError:
                return 0.0

        files = sorted((p for p in self._dir.glob("*.pch") if p != keep), key=mtime)
        for old in files[: max(0, len(files) + 1 - self.max_entries)]:
            old.unlink(missing_ok=True)
            self._entries.pop(old.stem, None)

    def discard(self, key: str) -> None:
        with self._lock:
            path = self._entries.pop(key, None)
        if path is not None:
            path.unlink(missing_ok=True)

    def clear(self) -> None:
        with self._lock:
            paths = list(self._entries.values())
            self._entries.clear()
        for path in paths:
            path.unlink(missing_ok=True)

    def __len__(self) -> int:
        return len(self._entries)

    # Whether a header paid for itself is a fact about the machine and the toolchain (both in the key),
    # not about one process: every process reads what the first one to weigh the header found.
    def verdict(self, key: str) -> bool | None:
        """True/False when some process on this machine found a header for `key` worth keeping or not."""
        try:
            data = json.loads(self._verdict_path(key).read_text())
        except (OSError, ValueError):
            return None
        keep = data.get("keep") if isinstance(data, dict) else None
        return keep if isinstance(keep, bool) else None

    def set_verdict(self, key: str, keep: bool, facts: dict[str, Any]) -> None:
        atomic_write(self._verdict_path(key), json.dumps({"keep": keep, **facts}, sort_keys=True).encode())

    def _verdict_path(self, key: str) -> Path:
        return self.root / "verdicts" / f"{key}.json"

    def close(self) -> None:
        """Forget every header and remove this process's directory (a shared one stays)."""
        if self.shared is not None:
            with self._lock:
                self._entries.clear()
            return
        self.clear()
        with self._lock:
            directory, self._dir = self._dir, None
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


def _remove_dead_dirs(root: Path) -> None:
    for child in root.iterdir():
        if child.name.startswith("shared-"):
            for tmp in child.glob("*.tmp"):  # a header a dead process was writing
                pid_text = tmp.name.split(".")[1]
                if pid_text.isdigit() and not _alive(int(pid_text)):
                    tmp.unlink(missing_ok=True)
            continue
        pid_text = child.name.split("-", 1)[0]
        if not child.is_dir() or not pid_text.isdigit():
            continue
        if not _alive(int(pid_text)):
            shutil.rmtree(child, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True
