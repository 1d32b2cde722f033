"""Read the facts a kernel request states in words: variant, mask, head dims, dtype, target, GQA group.

Used by the offline generator (which builds TL from them) and by the LLM prompts (which state them so the
model does not have to guess). Anything the request does not say keeps a default and is reported as such.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tl_language import gpu

# Part names the GPU model knows, plus common marketing names, mapped to their architecture.
_PART_ALIASES = {
    "h200": "sm_90",
    "h100": "sm_90",
    "hopper": "sm_90",
    "a100": "sm_80",
    "ampere": "sm_80",
    "a10": "sm_86",
    "a6000": "sm_86",
    "3090": "sm_86",
    "3080": "sm_86",
    "l40s": "sm_89",
    "l4": "sm_89",
    "4090": "sm_89",
    "ada": "sm_89",
    "t4": "sm_75",
    "turing": "sm_75",
}


@dataclass(slots=True)
class Request:
    text: str
    variant: str = "mha"  # mha | gqa | mqa | mla
    mask: str = "none"  # none | causal | window(L, R)
    d_qk: int = 128
    d_v: int = 128
    dtype: str = "fp16"
    arch: str = gpu.DEFAULT_TARGET
    group: int = 8  # GQA only
    assumed: list[str] = field(default_factory=list)  # facts taken by default, for the user to see

    @property
    def kernel_name(self) -> str:
        prefix = "causal_" if self.mask == "causal" else "window_" if self.mask.startswith("window") else ""
        return f"{prefix}{self.variant}_fwd"


def _word(pattern: str, text: str) -> re.Match[str] | None:
    return re.search(rf"(?<![a-z0-9_]){pattern}(?![a-z0-9_])", text)


def parse_request(text: str, *, arch: str | None = None) -> Request:
    """Facts from the description; `arch` (a --target flag) wins over the text."""
    t = text.lower()
    r = Request(text=text)
    if _word(r"mla|multi-head latent", t):
        r.variant, r.d_qk, r.d_v = "mla", 192, 128
    elif _word(r"mqa|multi-query|multi query", t):
        r.variant = "mqa"
    elif _word(r"gqa|grouped[- ]query|grouped", t):
        r.variant = "gqa"
    if r.variant == "gqa":
        m = re.search(r"group(?:s| size)?\s*(?:of\s*|=\s*)?(\d+)", t) or re.search(
            r"(\d+)\s*(?:query heads|q heads)\s*(?:per|share)", t
        )
        if m:
            r.group = int(m.group(1))
        else:
            r.assumed.append(f"GQA group {r.group}")
    m = re.search(r"sliding[- ]window\s*(?:of\s*)?(\d+)|window\s*(?:of\s*)?(\d+)", t)
    if m:
        r.mask = f"window({m.group(1) or m.group(2)}, 0)"
    elif _word(r"causal", t):
        r.mask = "causal"
    m = re.search(r"(?:head[ _-]?dim(?:ension)?s?|hdim|hd|d)\s*(?:=|of|:)?\s*(\d+)(?:\s*/\s*(\d+))?", t)
    if m:
        r.d_qk = int(m.group(1))
        r.d_v = int(m.group(2)) if m.group(2) else (r.d_v if r.variant == "mla" else r.d_qk)
    elif r.variant != "mla":
        r.assumed.append("head dimension 128")
    if _word(r"bf16|bfloat16", t):
        r.dtype = "bf16"
    elif _word(r"fp8|e4m3|fp8_e4m3", t):
        r.dtype = "fp8_e4m3"
    elif _word(r"fp16|half|float16", t):
        r.dtype = "fp16"
    else:
        r.assumed.append("dtype fp16")
    found = arch
    if found is None:
        m = re.search(r"sm_?(\d{2})", t)
        if m and f"sm_{m.group(1)}" in gpu.TARGETS:
            found = f"sm_{m.group(1)}"
        else:
            found = next((a for name, a in _PART_ALIASES.items() if _word(name, t)), None)
    if found is None:
        r.assumed.append(f"target {gpu.DEFAULT_TARGET}")
    r.arch = found or gpu.DEFAULT_TARGET
    return r
