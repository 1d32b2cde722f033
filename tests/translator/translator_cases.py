"""Shared fixtures of the translator tests: the bundled examples and TL variants of them."""

from __future__ import annotations

from pathlib import Path

from pipeline.variants import variant
from tl_language import analyze
from translator import Translation, translate

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
# Every example that is fully parameterised (the sketch still has `?` holes), by the backend its Target
# picks: FILLED are the mma.sync (sm_80-class) examples, HOPPER the `Target sm_90` ones.
_ALL = sorted(p.stem for p in EXAMPLES.glob("*.tl") if p.stem != "sketch_fwd")
HOPPER = [n for n in _ALL if "\nTarget sm_90" in (EXAMPLES / f"{n}.tl").read_text()]
FILLED = [n for n in _ALL if n not in HOPPER]


def example_text(name: str) -> str:
    return (EXAMPLES / f"{name}.tl").read_text()


def translate_text(text: str, tl_path: str | None = "kernel.tl", **kw: object) -> Translation:
    return translate(analyze(text), tl_path=tl_path, **kw)  # type: ignore[arg-type]


def translate_example(name: str, *, line_directives: bool = True, **changes: object) -> Translation:
    text = example_text(name)
    if changes:
        headers = {k: changes.pop(k) for k in ("target", "dtype", "mask") if k in changes}
        text = variant(text, params={k: int(v) for k, v in changes.items()}, **headers)  # type: ignore[arg-type]
    return translate_text(text, tl_path=f"examples/{name}.tl", line_directives=line_directives)
