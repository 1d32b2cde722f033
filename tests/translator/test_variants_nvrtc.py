"""Every catalogue variant (examples/variants/*.tl) checks clean, translates and compiles through NVRTC
for sm_80 and sm_90a, its Target line rewritten; the CUDA of a variant carries its regions and its
launch spec carries the program the reference evaluates. (On the GPU, `benchmarks/verify_variants.py`
verifies them: docs/results/2026-12-01-h200-variants-verify.json.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.build import translate_text

VARIANTS = sorted((Path(__file__).resolve().parents[2] / "examples" / "variants").glob("*.tl"))
TARGETS = ("sm_80", "sm_90")


def _translate(path: Path, target: str):
    text = re.sub(r"(?m)^Target .*$", f"Target {target}", path.read_text())
    return translate_text(text, Path(f"{path.stem}_{target}.tl"))


def test_the_catalogue_is_there() -> None:
    names = {p.stem for p in VARIANTS}
    for want in (
        "softcap",
        "alibi",
        "relative_bias",
        "sliding_window",
        "dilated_window",
        "global_sliding",
        "prefix_lm",
        "document_mask",
        "sink_tokens_window",
        "learnable_sink",
        "sigmoid_attention",
        "prefix_softcap_document",
    ):
        assert want in names


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("path", VARIANTS, ids=[p.stem for p in VARIANTS])
def test_variant_translates_with_its_program(path: Path, target: str) -> None:
    t = _translate(path, target)
    assert t.spec.program is not None  # a variant: the reference comes from its IR
    assert "apply_score" in t.source
    if t.spec.program["block_mask"]:  # per-token side tensors in a mask: classified at launch
        assert f"{t.spec.kernel_name}_block_mask(" in t.source
    n_extra = len(t.spec.program["scalars"]) + len(t.spec.program["tensors"])
    n_extra += 1 if t.spec.program["block_mask"] else 0  # the launch-time block classes
    assert len(t.spec.params) == (29 if target == "sm_90" else 25) + n_extra


@pytest.mark.nvrtc
@pytest.mark.slow
def test_every_variant_compiles_for_both_backends() -> None:
    from runner.compile import CompileError, CompileJob, compile_many

    jobs, names = [], []
    for path in VARIANTS:
        for target in TARGETS:
            t = _translate(path, target)
            jobs.append(
                CompileJob(
                    source=t.source,
                    arch=t.spec.arch,
                    name=f"{path.stem}_{target}.cu",
                    source_map=t.source_map,
                    tl_file=t.spec.tl_file,
                )
            )
            names.append(f"{path.stem} {target}")
    failed = [
        f"{n}: {r}"[:800]
        for n, r in zip(names, compile_many(jobs), strict=True)
        if isinstance(r, CompileError)
    ]
    assert not failed, "\n".join(failed)


@pytest.mark.parametrize("path", VARIANTS, ids=[p.stem for p in VARIANTS])
def test_formatting_a_variant_keeps_its_program(path: Path) -> None:
    """`tl fmt` rewrites layout only: the formatted file lowers to the same kernel IR (side-tensor
    dtypes, Scalars and every expression included), and formatting again changes nothing."""
    from tl_language.formatter import format_text

    text = path.read_text()
    formatted = format_text(text)
    assert format_text(formatted) == formatted
    before, after = (
        _translate(path, "sm_90"),
        translate_text(re.sub(r"(?m)^Target .*$", "Target sm_90", formatted), Path(f"{path.stem}_sm_90.tl")),
    )
    assert after.spec.program == before.spec.program
