"""`tl check` clean ⇒ `tl build` succeeds, on every example, every test fixture and a generated family.

"Clean" is what `tl build` would start from: no error and not a sketch (a sketch is refused as such, with
its hints). The build is the translator (check → plan → backend source; it raises TranslateError on
every refusal), which needs no NVRTC; a few documents of the family are also compiled through NVRTC
(marked `nvrtc`). A disagreement means a restriction of the translator the checker does not state: it
belongs in `tl_language.resources.kernel_limits` (or the attention pattern), not in a weaker test.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.variants import variant
from tl_language import analyze
from tl_language.analysis import Analysis
from tl_language.diagnostics import Severity
from translator import TranslateError, translate

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "tl_language"))
from tl_expect import split_documents  # noqa: E402  (the fixtures' reader, shared with their tests)

# Cases where check and build may disagree, with the reason. The checker runs the attention pattern on
# every document that is not a sketch (fragments and header-only documents included) but says nothing
# about an empty one: a new file is not an error while nothing is typed, and there is nothing to build.
XFAIL: dict[str, str] = {
    "fixtures/TL452.tl#2": "an empty document: no diagnostic while nothing is typed, nothing to build",
}


def clean(analysis: Analysis) -> bool:
    return not analysis.has_errors and not analysis.model.is_sketch


def build_refusal(analysis: Analysis) -> list[str]:
    """What the translator refuses (empty: it builds), as `line:col CODE message`."""
    try:
        translate(analysis, tl_path="agreement.tl")
    except TranslateError as err:
        return [
            f"{d.range.start.line + 1}:{d.range.start.character + 1} {d.code} {d.message}"
            for d in err.diagnostics
        ]
    return []


def assert_agrees(text: str) -> None:
    analysis = analyze(text)
    if not clean(analysis):
        return
    refused = build_refusal(analysis)
    assert not refused, "tl check is clean but tl build refuses:\n" + "\n".join(refused) + "\n---\n" + text


# ---- the corpus: examples and fixtures -------------------------------------------------------------------


def _corpus() -> Iterator[tuple[str, str]]:
    for p in sorted((ROOT / "examples").rglob("*.tl")):
        yield str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")
    for p in sorted((ROOT / "tests").rglob("*.tl")):
        rel = (
            p.relative_to(ROOT / "tests" / "tl_language") if "tl_language" in p.parts else p.relative_to(ROOT)
        )
        for i, doc in enumerate(split_documents(p.read_text(encoding="utf-8"))):
            yield f"{rel}#{i}", doc


def _cases() -> list[object]:
    out: list[object] = []
    for name, text in _corpus():
        marks = [pytest.mark.xfail(strict=True, reason=XFAIL[name])] if name in XFAIL else []
        out.append(pytest.param(text, id=name, marks=marks))
    return out


@pytest.mark.parametrize("text", _cases())
def test_examples_and_fixtures_agree(text: str) -> None:
    assert_agrees(text)


def test_the_xfail_list_names_existing_cases() -> None:
    names = {name for name, _ in _corpus()}
    assert set(XFAIL) <= names, set(XFAIL) - names


# ---- the generated family ------------------------------------------------------------------------------

BASES = ("mha_fwd", "hopper_mha_fwd", "mla_fwd", "gqa_fwd", "mqa_fwd", "causal_mha_fwd")
CHOICES: dict[str, tuple[int, ...]] = {
    "BM": (16, 32, 48, 64, 96, 128, 192, 256, 320),
    "BN": (8, 16, 24, 32, 48, 64, 80, 96, 128, 160, 176, 256, 272),
    "warps": (1, 2, 4, 8, 16),
    "stages": (1, 2, 3, 4, 5),
    "consumers": (1, 2, 3),
    "overlap": (0, 1),
    "pingpong": (0, 1),
    "persistent": (0, 1),
    "group": (1, 2, 4),
    "heads_kv": (1, 2),
}
HEAD_DIMS = (32, 64, 80, 96, 128, 160, 192, 256)
# Structural edits of the statements (tiles written as numbers or runtime values, tiles that disagree,
# missing steps), each applied where its text occurs.
EDITS = (
    ("Copy Q (BM, d)", "Copy Q (128, d)"),
    ("Copy Q (BM, d)", "Copy Q (seqlen_q, d)"),
    ("Copy K (BN, d)", "Copy K (BN, 64)"),
    ("Copy V (BN, d)", "Copy V (32, d)"),
    ("Copy acc_o (BM, d)", "Copy acc_o (64, d)"),
    ("Copy acc_o (BM, d)", "Copy acc_o (BM, 64)"),
    ("Copy acc_o (BM, d)", "Copy acc_o"),
    ("Allocate S in register (BM, BN)\n", ""),
    ("Copy Q from shared to register\n", ""),
    ("    Copy K from shared to register\n", ""),
    ("Mask none", "Mask window(64, 0)"),
    ("Mask none", "Mask causal"),
)


@dataclass(frozen=True)
class Member:
    base: str
    target: str | None
    dtype: str | None
    params: tuple[tuple[str, int], ...]
    edits: tuple[int, ...]

    def text(self) -> str:
        text = (ROOT / "examples" / f"{self.base}.tl").read_text(encoding="utf-8")
        for i in self.edits:
            text = text.replace(*EDITS[i], 1)
        return variant(text, target=self.target, dtype=self.dtype, params=dict(self.params))


def family(seed: int, n: int) -> list[Member]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        base = rng.choice(BASES)
        params = {k: rng.choice(v) for k, v in CHOICES.items() if rng.random() < 0.35}
        if base == "mla_fwd":
            for name in ("d_qk", "d_v"):
                if rng.random() < 0.5:
                    params[name] = rng.choice(HEAD_DIMS)
        elif rng.random() < 0.5:
            params["d"] = rng.choice(HEAD_DIMS)
        target = rng.choice(("sm_75", "sm_80", "sm_86", "sm_89", "sm_90")) if rng.random() < 0.5 else None
        dtype = rng.choice(("fp16", "bf16", "fp8_e4m3")) if rng.random() < 0.3 else None
        edits = tuple(i for i in range(len(EDITS)) if rng.random() < 0.06)
        out.append(Member(base, target, dtype, tuple(sorted(params.items())), edits))
    return out


# TL_AGREEMENT_SAMPLES raises the family's size (the default keeps the suite quick; a run of 10,000 found
# nothing the default misses).
SAMPLES = int(os.environ.get("TL_AGREEMENT_SAMPLES", "600"))
FAMILY = family(15, SAMPLES)


def test_the_generated_family_agrees() -> None:
    disagreements = []
    checked = 0
    for member in FAMILY:
        text = member.text()
        analysis = analyze(text)
        if not clean(analysis):
            continue
        checked += 1
        refused = build_refusal(analysis)
        if refused:
            disagreements.append(f"{member}: {refused[0]}")
    assert not disagreements, "\n".join(disagreements[:20])
    assert checked >= SAMPLES // 8, (
        f"only {checked} clean documents: the family no longer exercises the build"
    )


def test_the_family_reaches_every_kernel_limit() -> None:
    """The family is only a test of the limits if it breaks them: each code the kernel limits give occurs."""
    seen: set[str] = set()
    for member in FAMILY:
        seen |= {d.code for d in analyze(member.text()).diagnostics if d.severity == Severity.ERROR}
    assert {"TL301", "TL302", "TL303", "TL305", "TL306", "TL307", "TL308", "TL309", "TL203"} <= seen, seen


# Sketches in the paper's form, with parts left out, completed by stage 2 (`tl complete`) for a target.
PAPER = (ROOT / "examples" / "sketches" / "sketch_paper.tl").read_text(encoding="utf-8")
DROPS = (
    "    Reshape S from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_N_new)\n",
    "Copy Q from shared to register\n",
    "    Copy K from shared to register\n",
    "    Copy V from shared to register\n",
    "    Compute Multiply S, scale and get new S\n",
    "Compute Divide O, rowsum and get new O\n",
)


def sketch_family(seed: int, n: int) -> list[tuple[str, dict[str, object]]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        text = PAPER
        for drop in DROPS:
            if rng.random() < 0.3:
                text = text.replace(drop, "", 1)
        if rng.random() < 0.3:
            text = text.replace("accumulate O", "get O", 1)
        options: dict[str, object] = {
            "target": rng.choice(("sm_75", "sm_80", "sm_86", "sm_89", "sm_90")),
            "dtype": rng.choice(("fp16", "bf16")),
            "head_dim": rng.choice((64, 128, 256)),
        }
        if rng.random() < 0.3:
            text = "Mask causal\n" + text
        out.append((text, options))
    return out


def test_completed_sketches_agree() -> None:
    from translator.planner.sketch import complete_sketch

    built = 0
    for text, options in sketch_family(15, max(40, SAMPLES // 10)):
        completed = complete_sketch(text, **options).text  # type: ignore[arg-type]
        assert_agrees(completed)
        built += clean(analyze(completed))
    assert built >= 20, built  # most completions are TL code (bf16 on sm_75 and fit failures are not)


# ---- through NVRTC: a small sample ---------------------------------------------------------------------


def _nvrtc_sample() -> list[tuple[str, str]]:
    """Two clean members of the family per backend family, chosen deterministically, plus their names."""
    picked: dict[bool, list[tuple[str, str]]] = {False: [], True: []}
    for member in FAMILY:
        text = member.text()
        analysis = analyze(text)
        hopper = analysis.model.target.wgmma
        if clean(analysis) and len(picked[hopper]) < 1 and analysis.model.dtype in ("fp16", "bf16"):
            picked[hopper].append((f"{member.base}_{len(picked[hopper])}", text))
    return picked[False] + picked[True]


@pytest.mark.nvrtc
@pytest.mark.slow
def test_a_sample_of_the_clean_family_compiles_through_nvrtc() -> None:
    try:
        from runner.compile import CompileJob, compile_many
        from runner.toolchain import ToolchainError, toolchain

        toolchain()
    except (ImportError, ToolchainError) as exc:
        pytest.skip(f"no NVRTC toolchain: {exc}")
    jobs = []
    for name, text in _nvrtc_sample():
        t = translate(analyze(text), tl_path=f"{name}.tl")
        jobs.append(
            CompileJob(
                source=t.source,
                arch=t.launch.arch,
                name=f"{name}.cu",
                source_map=t.source_map,
                tl_file=t.launch.tl_file,
            )
        )
    assert len(jobs) == 2
    results = compile_many(jobs, max_workers=os.cpu_count() or 2)
    failed = [r for r in results if isinstance(r, Exception)]
    assert not failed, failed


def test_sm90_ignores_warps_for_its_query_rows() -> None:
    """`Param warps` is the mma.sync kernels' knob: a catalogue file that sets it (for its sm_80 build) takes
    sm_90's 192-row tile on three consumer warp groups, which 8 warps × 16 rows does not divide."""
    text = (ROOT / "examples" / "variants" / "sliding_window.tl").read_text(encoding="utf-8")
    text = variant(text, params={"d": 64, "BM": 192, "consumers": 3})
    analysis = analyze(text)
    assert "Param warps = 8" in text and not analysis.has_errors, [d.message for d in analysis.diagnostics]
    assert build_refusal(analysis) == []
    bad = analyze(variant(text, params={"consumers": 2}))
    assert [d.code for d in bad.diagnostics if d.severity == Severity.ERROR] == ["TL301"]
