"""TL variants: the same kernel text with headers or Params changed, for test matrices and sweeps.

Works on the text line by line (TL is line-oriented): `Kernel`, `Target`, `Dtype`, `Mask` headers are
replaced, `Param NAME = V` lines get their value replaced (trailing comments kept), and a Param the text
does not have is added after the last Param line. The result is ordinary TL, checked like any file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tl_language.resources import hopper_tile

if TYPE_CHECKING:
    from pipeline.build import Translated

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

# sm_80-path tiles per head dim: FlashAttention 2's choices (`flash_fwd_launch_template.h`), revised by the
# H200 measurements in docs/translation.md: head dim 128 keeps one K/V buffer without a mask and two with the
# causal mask; head dim 256 runs best on 64 × 64 tiles with 4 warps. sm_75 has 64 KB of shared memory per
# block, so smaller query tiles and one buffer. `MASK_TILES` overrides an entry for one mask.
TILES: dict[str, dict[int, dict[str, int]]] = {
    "sm_80": {
        64: {"BM": 128, "BN": 128, "warps": 4, "stages": 2},
        96: {"BM": 128, "BN": 64, "warps": 4, "stages": 2},
        128: {"BM": 128, "BN": 64, "warps": 4, "stages": 1},
        192: {"BM": 128, "BN": 64, "warps": 8, "stages": 1},
        256: {"BM": 64, "BN": 64, "warps": 4, "stages": 1},
    },
    "sm_75": {
        64: {"BM": 64, "BN": 64, "warps": 4, "stages": 1},
        128: {"BM": 64, "BN": 64, "warps": 4, "stages": 1},
    },
}
MASK_TILES: dict[tuple[str, int, str], dict[str, int]] = {
    ("sm_80", 128, "causal"): {"stages": 2},
}
# Head dims the sm_90 (TMA + wgmma) kernel takes: whole 64-column TMA boxes.
SM90_HEAD_DIMS = (64, 128, 192, 256)


def tiles(target: str, d_qk: int, mask: str = "none") -> dict[str, int]:
    """The tile Params of the standard kernel for `target`, head dim `d_qk` and `mask`. sm_90: the Hopper
    defaults (`tl_language.resources.hopper_tile`: tile, consumer warp groups, ping-pong, stages)."""
    kind = mask.split("(", 1)[0]
    if target == "sm_90":
        return hopper_tile(d_qk, kind)
    table = TILES.get(target, TILES["sm_80"])
    d = d_qk if d_qk in table else min((x for x in table if x >= d_qk), default=max(table))
    return {**table[d], **MASK_TILES.get((target if target in TILES else "sm_80", d, kind), {})}


@dataclass(frozen=True)
class KernelConfig:
    d_qk: int
    dtype: str  # "fp16" | "bf16"
    mask: str = "none"  # "none" | "causal" | "window(L, R)"
    target: str = "sm_80"
    d_v: int | None = None  # MLA-style when different from d_qk
    group: int = 0  # a GQA group fixed in the TL (0: from the launch shape)
    # Params set over the standard tiles, e.g. (("persistent", 1),): schedule experiments on one config.
    params: tuple[tuple[str, int], ...] = ()

    @property
    def head_dim_v(self) -> int:
        return self.d_qk if self.d_v is None else self.d_v

    @property
    def name(self) -> str:
        d = f"d{self.d_qk}" + (f"x{self.d_v}" if self.d_v not in (None, self.d_qk) else "")
        mask = re.sub(r"[^0-9a-z]+", "_", self.mask).strip("_")
        g = f"_g{self.group}" if self.group else ""
        extra = "".join(f"_{k}{v}" for k, v in self.params)
        return f"tl_{self.target}_{self.dtype}_{d}_{mask}{g}{extra}"

    def tl_text(self) -> str:
        mla = self.head_dim_v != self.d_qk
        base = (EXAMPLES / ("mla_fwd.tl" if mla else "mha_fwd.tl")).read_text()
        params = {
            **tiles(self.target, self.d_qk, self.mask),
            **head_dim_params(base, self.d_qk, self.head_dim_v),
        }
        if self.group:
            params["group"] = self.group
        params.update(self.params)
        return variant(
            base, kernel=self.name, target=self.target, dtype=self.dtype, mask=self.mask, params=params
        )

    def translate(self) -> Translated:
        """`tl_text()` checked and translated under a bare `NAME.tl` path, so the GPU suite, the benchmark
        and the profilers build the same source and share its compile-cache entry. Raises BuildError."""
        from pipeline.build import translate_text

        return translate_text(self.tl_text(), Path(f"{self.name}.tl"))


# ---- the kernels the GPU suite verifies and the benchmark times ----------------------------------------

# Benchmark label → target: every configuration is timed on the sm_80 code path (mma.sync + cp.async,
# run on newer GPUs as PTX) and, on an sm_90 device, on the Hopper path (TMA + wgmma, an sm_90a cubin).
BENCH_TARGETS: dict[str, str] = {"tl-sm80": "sm_80", "tl-sm90": "sm_90"}


def bench_kernels(
    d: int,
    dtype: str,
    mask: str,
    device_arch: str | None,
    sm90_params: tuple[dict[str, int], ...] = (),
) -> list[tuple[str, KernelConfig]]:
    """(label, config) of the standard kernels for one benchmark configuration on `device_arch`: sm_90
    kernels only on an sm_90 device and for the head dims the Hopper kernel takes. Each `sm90_params`
    entry adds an sm_90 kernel with those Params set, labelled `tl-sm90[name=value,…]`."""
    out = []
    for label, target in BENCH_TARGETS.items():
        if target == "sm_90" and (device_arch != "sm_90" or d not in SM90_HEAD_DIMS):
            continue
        out.append((label, KernelConfig(d, dtype, mask, target=target)))
        if target == "sm_90":
            for params in sm90_params:
                tag = ",".join(f"{k}={v}" for k, v in params.items())
                kc = KernelConfig(d, dtype, mask, target=target, params=tuple(params.items()))
                out.append((f"{label}[{tag}]", kc))
    return out


# The sm_90 part of the GPU test matrix: head dims 64/128/256 × fp16/bf16 × no mask/causal, a window, MLA
# 192/128, a fixed GQA group and MQA-shaped launches (the shapes come from tests/gpu).
SM90_TEST_CONFIGS: tuple[KernelConfig, ...] = (
    *(
        KernelConfig(d, dt, m, target="sm_90")
        for d in (64, 128, 256)
        for dt in ("fp16", "bf16")
        for m in ("none", "causal")
    ),
    KernelConfig(128, "bf16", "window(64, 16)", target="sm_90"),
    *(KernelConfig(192, "bf16", m, d_v=128, target="sm_90") for m in ("none", "causal")),
    KernelConfig(128, "bf16", "none", group=8, target="sm_90"),
    # The persistent grid (`Param persistent`): O in its own buffer (128 × 160, head dim 64 on 3 consumer
    # groups, a GQA group) and in Q's (BN 176), a causal mask (longest tiles first) and a window whose
    # tiles can have no key block at all.
    *(
        KernelConfig(d, dt, m, target="sm_90", group=g, params=(("persistent", 1), *extra))
        for d, dt, m, g, extra in (
            (128, "bf16", "none", 0, ()),
            (64, "bf16", "none", 0, ()),
            (128, "fp16", "none", 0, (("BN", 176),)),
            (128, "bf16", "none", 8, (("BN", 128),)),
            (128, "bf16", "causal", 0, ()),
            (128, "bf16", "window(64, 16)", 0, ()),
        )
    ),
)
