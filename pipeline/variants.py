"""TL variants: the same kernel text with headers or Params changed, for test matrices and sweeps.

Works on the text line by line (TL is line-oriented): `Kernel`, `Target`, `Dtype`, `Mask` headers are
replaced, `Param NAME = V` lines get their value replaced (trailing comments kept), and a Param the text
does not have is added after the last Param line. The result is ordinary TL, checked like any file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_HEADER = re.compile(r"^(?P<indent>\s*)(?P<kw>Kernel|Target|Dtype|Mask)\b[^#\n]*?(?P<comment>\s*#.*)?$")
_PARAM = re.compile(r"^(?P<indent>\s*)Param\s+(?P<name>\w+)\s*=\s*[^#\n]*?(?P<comment>\s*#.*)?$")


def variant(
    text: str,
    *,
    kernel: str | None = None,
    target: str | None = None,
    dtype: str | None = None,
    mask: str | None = None,
    params: dict[str, int] | None = None,
) -> str:
    """`text` with the given headers and Params set. `mask`: "none", "causal" or "window(L, R)"."""
    headers = {"Kernel": kernel, "Target": target, "Dtype": dtype, "Mask": mask}
    params = dict(params or {})
    seen_headers: set[str] = set()
    lines = text.splitlines()
    out: list[str] = []
    last_param = -1
    for line in lines:
        m = _HEADER.match(line)
        if m and headers.get(m.group("kw")) is not None:
            kw = m.group("kw")
            seen_headers.add(kw)
            out.append(f"{m.group('indent')}{kw} {headers[kw]}{m.group('comment') or ''}")
            continue
        p = _PARAM.match(line)
        if p:
            last_param = len(out)
            name = p.group("name")
            if name in params:
                out.append(f"{p.group('indent')}Param {name} = {params.pop(name)}{p.group('comment') or ''}")
                continue
        out.append(line)
    missing = [f"Param {name} = {value}" for name, value in params.items()]
    if missing:
        at = last_param + 1 if last_param >= 0 else _after_headers(out)
        out[at:at] = missing
    for kw, value in headers.items():
        if value is not None and kw not in seen_headers:
            out.insert(_after_headers(out), f"{kw} {value}")
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def _after_headers(lines: list[str]) -> int:
    """Index after the leading comment/header block (where a missing header or Param goes)."""
    i = 0
    while i < len(lines) and (
        not lines[i].strip()
        or lines[i].lstrip().startswith("#")
        or _HEADER.match(lines[i])
        or _PARAM.match(lines[i])
    ):
        i += 1
    return i


def head_dim_params(text: str, d_qk: int, d_v: int | None = None) -> dict[str, int]:
    """The Param assignments that set the head dims, for a TL file that names them `d` or `d_qk`/`d_v`."""
    d_v = d_qk if d_v is None else d_v
    names = {m.group("name") for line in text.splitlines() if (m := _PARAM.match(line))}
    if "d_qk" in names or "d_v" in names or d_qk != d_v:
        return {"d_qk": d_qk, "d_v": d_v}
    return {"d": d_qk}


# ---- the standard kernel configurations of the GPU test suite and the benchmark --------------------------

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

# Tiles per head dim, FlashAttention 2's choices for sm_80 (`flash_fwd_launch_template.h`): 4 warps up to
# head dim 128, 8 above; K/V double-buffered when shared memory allows. sm_75 has 64 KB of shared memory
# per block, so smaller query tiles and one buffer.
TILES: dict[str, dict[int, dict[str, int]]] = {
    "sm_80": {
        64: {"BM": 128, "BN": 128, "warps": 4, "stages": 2},
        96: {"BM": 128, "BN": 64, "warps": 4, "stages": 2},
        128: {"BM": 128, "BN": 64, "warps": 4, "stages": 2},
        192: {"BM": 128, "BN": 64, "warps": 8, "stages": 1},
        256: {"BM": 128, "BN": 64, "warps": 8, "stages": 1},
    },
    "sm_75": {
        64: {"BM": 64, "BN": 64, "warps": 4, "stages": 1},
        128: {"BM": 64, "BN": 64, "warps": 4, "stages": 1},
    },
}


@dataclass(frozen=True)
class KernelConfig:
    d_qk: int
    dtype: str  # "fp16" | "bf16"
    mask: str = "none"  # "none" | "causal" | "window(L, R)"
    target: str = "sm_80"
    d_v: int | None = None  # MLA-style when different from d_qk
    group: int = 0  # a GQA group fixed in the TL (0: from the launch shape)

    @property
    def head_dim_v(self) -> int:
        return self.d_qk if self.d_v is None else self.d_v

    @property
    def name(self) -> str:
        d = f"d{self.d_qk}" + (f"x{self.d_v}" if self.d_v not in (None, self.d_qk) else "")
        mask = re.sub(r"[^0-9a-z]+", "_", self.mask).strip("_")
        g = f"_g{self.group}" if self.group else ""
        return f"tl_{self.target}_{self.dtype}_{d}_{mask}{g}"

    def tl_text(self) -> str:
        mla = self.head_dim_v != self.d_qk
        base = (EXAMPLES / ("mla_fwd.tl" if mla else "mha_fwd.tl")).read_text()
        targets = TILES.get(self.target, TILES["sm_80"])
        tiles = targets.get(self.d_qk) or targets[max(targets)]
        params = {**tiles, **head_dim_params(base, self.d_qk, self.head_dim_v)}
        if self.group:
            params["group"] = self.group
        return variant(
            base, kernel=self.name, target=self.target, dtype=self.dtype, mask=self.mask, params=params
        )
