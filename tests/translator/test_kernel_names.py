"""TL054 covers the names the generated CUDA uses unqualified: every example's source, on each backend,
names no CuTe type or template at file scope that `tl_language.checks.kernel_name` does not reserve (a
kernel with such a name fails NVRTC: `Tensor` is ambiguous, `max` a second C overload, `for` a keyword)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.variants import variant
from tl_language import analyze
from tl_language.checks.kernel_name import CPP_KEYWORDS, GENERATED_NAMES, kernel_name_problem
from translator import translate

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.tl") if "?" not in p.read_text(encoding="utf-8"))
# A template used with arguments (`Int<…>`, `make_tensor<float>`), or a capitalised type a declaration
# starts with (`Tensor gQ = …`): what a global function of the same name makes ambiguous.
TEMPLATE = re.compile(r"(?<![\w:.>])([A-Za-z_]\w*)<(?![<=])")
TYPE = re.compile(r"^\s*(?:const\s+)?([A-Z]\w*)\s+[A-Za-z_]\w*\s*[=;({\[]", re.M)


def unqualified_names(source: str) -> set[str]:
    code = re.sub(r"//.*", "", source)
    code = re.sub(r'"[^"\n]*"', '""', code)
    return set(TEMPLATE.findall(code)) | set(TYPE.findall(code))


@pytest.mark.parametrize("target", [None, "sm_75", "sm_90"])
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_generated_sources_use_no_unreserved_cute_name(path: Path, target: str | None) -> None:
    text = path.read_text(encoding="utf-8")
    if target is not None:
        text = variant(text, target=target, dtype="fp16")
    analysis = analyze(text)
    if analysis.has_errors:
        pytest.skip(f"{path.name} does not check clean on {target}")
    names = unqualified_names(translate(analysis).source)
    assert names - GENERATED_NAMES - CPP_KEYWORDS == set()


@pytest.mark.parametrize("name", ["for", "cute", "max", "Tensor", "make_tensor", "__k", "_K"])
def test_names_nvrtc_refused_are_tl054(name: str) -> None:
    """`for`, `cute`, `max` and `Tensor` were compiled through NVRTC and refused; the rest by the rules."""
    assert kernel_name_problem(name) is not None
    text = (
        (ROOT / "examples" / "mha_fwd.tl")
        .read_text(encoding="utf-8")
        .replace("Kernel mha_fwd", f"Kernel {name}")
    )
    assert "TL054" in {d.code for d in analyze(text).diagnostics}


@pytest.mark.parametrize("name", ["mha_fwd", "gemm", "row", "attention_fwd", "my_kernel2"])
def test_ordinary_names_are_accepted(name: str) -> None:
    """`gemm` and `row` compiled through NVRTC (CuTe's `gemm` is called qualified; `row` is a local)."""
    assert kernel_name_problem(name) is None
