"""Snapshots of the generated .cu for every example, as `tl build` writes them (with #line directives).

A change to the translator shows up here as a readable diff of the kernel. Refresh on purpose with
`pytest tests/translator --update-snapshots` or `TL_UPDATE_SNAPSHOTS=1 pytest`.
"""

from __future__ import annotations

import contextlib
import difflib
import os
from pathlib import Path

import pytest
from translator_cases import FILLED, HOPPER, translate_example

SNAPSHOTS = Path(__file__).parent / "snapshots"


def updating(config: pytest.Config) -> bool:
    flag = False
    # The option is registered only when tests/translator is on the command line.
    with contextlib.suppress(ValueError):
        flag = bool(config.getoption("--update-snapshots"))
    return flag or os.environ.get("TL_UPDATE_SNAPSHOTS") == "1"


@pytest.mark.parametrize("name", FILLED + HOPPER)
def test_generated_source_matches_snapshot(name: str, request: pytest.FixtureRequest) -> None:
    source = translate_example(name).source
    path = SNAPSHOTS / f"{name}.cu"
    if updating(request.config) or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        if not updating(request.config):
            pytest.fail(f"wrote a new snapshot {path.name}; check it in")
        return
    expected = path.read_text()
    if source != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), source.splitlines(True),
                                            f"snapshots/{name}.cu", "generated", n=2))
        pytest.fail(f"generated source differs from the snapshot (refresh with --update-snapshots):\n"
                    f"{diff[:6000]}")


def test_generation_is_deterministic() -> None:
    assert translate_example("mla_fwd").source == translate_example("mla_fwd").source
