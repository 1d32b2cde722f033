"""Content-hash cache of compiled kernels on disk.

Key: sha256 over the source, the NVRTC options, the NVRTC/CUTLASS/CCCL versions, the target arch and the
output kind (FlashAttention's fingerprint idea): anything that changes the binary changes the key, so an
entry is never stale and never needs invalidation. Writes are atomic (a temporary file in the same
directory, then `os.replace`), so parallel compiles of the same kernel and interrupted runs never leave
a half-written entry. Directory: `$TL_CACHE_DIR`, else `~/.cache/tl/kernels`.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
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
