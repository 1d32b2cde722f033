"""`--update-snapshots` rewrites tests/translator/snapshots/*.cu (also TL_UPDATE_SNAPSHOTS=1).

pytest reads this option only when this folder is on the command line: `pytest tests/translator
--update-snapshots`; from anywhere else use the environment variable.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-snapshots", action="store_true", default=False,
                     help="rewrite the generated-CUDA snapshots of the translator tests")
