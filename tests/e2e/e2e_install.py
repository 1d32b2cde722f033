"""Installs what the real-editor tests need, idempotently, with caches inside the clone.

- Debian packages (`chromium`, `neovim`, `libkrb5-dev`, `ripgrep`) through apt-get, only when a program is
  missing and we are root (CI runs as root);
- the extension: `npm ci` (skipped while `node_modules` matches `package-lock.json`), build, `.vsix`;
- code-server 4.100.3 + playwright-core in `tests/e2e/code-server/` with the four fixes from
  `shared/CLIENTS.md` (libkrb5-dev, a cached ripgrep archive, `npm_config_yes`, `npm_config_unsafe_perm`).

Every function returns a reason string when the tool cannot be had (the tests skip with it) or raises
`InstallError` with the command's output when an install that should work fails.

Run by hand: `python tests/e2e/e2e_install.py [apt|vsix|code-server|all]`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXTENSION = ROOT / "editor-extension"
VSIX = EXTENSION / "tl-attention.vsix"
CODE_SERVER_DIR = Path(__file__).resolve().parent / "code-server"
CODE_SERVER_BIN = CODE_SERVER_DIR / "node_modules" / ".bin" / "code-server"

# program → Debian package that provides it
APT_PROGRAMS = {"chromium": "chromium", "nvim": "neovim", "rg": "ripgrep", "krb5-config": "libkrb5-dev"}

# @vscode/ripgrep's postinstall downloads rg from GitHub unless this archive is cached (code-server 4.100.3).
RIPGREP_PACKAGE_VERSION = "1.15.11"
RIPGREP_TAG = "v13.0.0-10"
NODE_MAJOR = 20


class InstallError(RuntimeError):
    pass


_apt_updated = False  # one `apt-get update` per test session is enough


def _log(message: str) -> None:
    print(f"[e2e-install] {message}", file=sys.stderr, flush=True)


def _run(
    cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 900
) -> None:
    started = time.monotonic()
    _log(f"$ {' '.join(cmd)}" + (f"  (in {cwd})" if cwd else ""))
    proc = subprocess.run(
        cmd,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )
    _log(f"  exit {proc.returncode} after {time.monotonic() - started:.1f} s")
    if proc.returncode != 0:
        raise InstallError(f"`{' '.join(cmd)}` failed with exit {proc.returncode}:\n{proc.stdout[-4000:]}")


def node_problem() -> str | None:
    """None when node and npm of the major version code-server 4.100.3 runs on are on PATH."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        return "node/npm not on PATH (the VS Code tests need Node 20)"
    version = subprocess.run(
        ["node", "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    if not version.startswith(f"v{NODE_MAJOR}."):
        return f"node {version} found; code-server 4.100.3 needs Node {NODE_MAJOR}"
    return None


def ensure_apt(programs: list[str]) -> str | None:
    """Installs the Debian packages for the missing programs; a reason string when that is not possible."""
    missing = [p for p in programs if shutil.which(p) is None]
    if not missing:
        return None
    packages = sorted({APT_PROGRAMS[p] for p in missing})
    if shutil.which("apt-get") is None:
        return f"{', '.join(missing)} missing and apt-get is not available to install {', '.join(packages)}"
    if os.geteuid() != 0:
        return f"{', '.join(missing)} missing; install as root: apt-get install -y {' '.join(packages)}"
    global _apt_updated
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if not _apt_updated:
        _run(["apt-get", "update", "-qq"], env=env)
        _apt_updated = True
    _run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages], env=env)
    still = [p for p in missing if shutil.which(p) is None]
    return f"apt-get installed {packages} but {still} still missing" if still else None


def _lock_stamp(folder: Path) -> tuple[Path, str]:
    digest = hashlib.sha256((folder / "package-lock.json").read_bytes()).hexdigest()
    return folder / "node_modules" / ".tl-e2e-stamp", digest


def _npm_ci(folder: Path, env: dict[str, str] | None = None) -> None:
    """`npm ci` unless node_modules was installed from this exact lockfile already (the clone's cache)."""
    stamp, digest = _lock_stamp(folder)
    if stamp.exists() and stamp.read_text() == digest:
        _log(f"{folder.relative_to(ROOT)}/node_modules is current")
        return
    _run(["npm", "ci", "--no-audit", "--no-fund"], cwd=folder, env=env)
    stamp.write_text(digest)


def ensure_vsix() -> Path:
    """Builds and packages the extension (npm ci when needed, then esbuild and vsce): the .vsix path."""
    _npm_ci(EXTENSION)
    _run(["npm", "run", "build", "--", "--production"], cwd=EXTENSION)
    _run(["npm", "run", "package"], cwd=EXTENSION)
    if not VSIX.exists():
        raise InstallError(f"vsce reported success but {VSIX} does not exist")
    return VSIX


def _ripgrep_cache() -> None:
    """The archive @vscode/ripgrep's postinstall looks for before downloading, built from Debian's rg."""
    cache = Path(tempfile.gettempdir()) / f"vscode-ripgrep-cache-{RIPGREP_PACKAGE_VERSION}"
    archive = cache / f"ripgrep-{RIPGREP_TAG}-x86_64-unknown-linux-musl.tar.gz"
    if archive.exists():
        return
    rg = shutil.which("rg")
    if rg is None:
        raise InstallError("ripgrep (`rg`) is needed to seed @vscode/ripgrep's cache")
    cache.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(rg, arcname="rg")


def ensure_code_server() -> Path:
    """code-server 4.100.3 and playwright-core installed from tests/e2e/code-server's lockfile."""
    _ripgrep_cache()
    env = {**os.environ, "npm_config_yes": "true", "npm_config_unsafe_perm": "true"}
    _npm_ci(CODE_SERVER_DIR, env=env)
    if not CODE_SERVER_BIN.exists():
        raise InstallError(f"npm ci succeeded but {CODE_SERVER_BIN} is missing")
    return CODE_SERVER_BIN


def main(argv: list[str]) -> int:
    what = argv[1] if len(argv) > 1 else "all"
    if what in ("apt", "all"):
        reason = ensure_apt(list(APT_PROGRAMS))
        if reason:
            _log(reason)
            return 1
    if what in ("vsix", "all"):
        ensure_vsix()
    if what in ("code-server", "all"):
        ensure_code_server()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
