"""Importing the server (and building it) loads no torch and no CUDA bindings, and prints nothing."""

from __future__ import annotations

import subprocess
import sys


def test_server_import_is_light_and_silent() -> None:
    code = (
        "import sys\n"
        "from server.app import create_server\n"
        "create_server()\n"
        "heavy = [m for m in sys.modules if m == 'torch' or m.startswith('cuda')]\n"
        "sys.stderr.write(repr(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout == ""  # stdout is the protocol
    assert out.stderr.strip().endswith("[]")
