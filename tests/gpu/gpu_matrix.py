"""The GPU suite's matrix: TL kernel configurations, naive ABI kernel variants and the runtime shapes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.variants import SM90_TEST_CONFIGS, KernelConfig
from runner.verify import Shape

NAIVE_PATH = Path(__file__).resolve().parents[1] / "runner" / "data" / "naive_attention.cu"

# ---- the TL matrix (sm_80 path; sm_75 through PTX for compute_75; sm_90: the Hopper path) ------------

TL_CONFIGS: list[KernelConfig] = [
    *(
        KernelConfig(d, dt, m)
        for d in (64, 96, 128, 256)
        for dt in ("fp16", "bf16")
        for m in ("none", "causal")
    ),
    *(KernelConfig(128, dt, "window(64, 16)") for dt in ("fp16", "bf16")),
    *(KernelConfig(192, dt, m, d_v=128) for dt in ("fp16", "bf16") for m in ("none", "causal")),
    KernelConfig(128, "fp16", "none", group=8),
    KernelConfig(64, "bf16", "causal", group=4),
    *(KernelConfig(d, "fp16", m, target="sm_75") for d in (64, 128) for m in ("none", "causal")),
    *SM90_TEST_CONFIGS,  # the Hopper path (sm_90a cubins): needs an sm_90 device
]


# ---- the naive ABI kernel, by macro substitution ------------------------------------------------------


@dataclass(frozen=True)
class NaiveConfig:
    name: str
    dtype: str = "fp16"
    d_qk: int = 64
    d_v: int = 64
    mask: str = "none"
    window: tuple[int, int] = (-1, -1)
    arch: str = "sm_80"
    shared_bytes: int = 0
    edits: tuple[tuple[str, str], ...] = ()  # (old, new) text replacements: deliberately broken kernels

    def source(self) -> str:
        elem = {"fp16": "cute::half_t", "bf16": "cute::bfloat16_t"}[self.dtype]
        mask = {"none": 0, "causal": 1, "window": 2}[self.mask]
        src = NAIVE_PATH.read_text()
        for old, new in (
            ("#define TL_ELEMENT cute::half_t", f"#define TL_ELEMENT {elem}"),
            ("#define TL_HEAD_DIM_QK 64", f"#define TL_HEAD_DIM_QK {self.d_qk}"),
            ("#define TL_HEAD_DIM_V 64", f"#define TL_HEAD_DIM_V {self.d_v}"),
            ("#define TL_MASK 0", f"#define TL_MASK {mask}"),
            *self.edits,
        ):
            if old not in src:
                raise AssertionError(f"naive kernel edit does not apply: {old!r}")
            src = src.replace(old, new)
        return src

    def spec(self) -> Any:
        from runner.abi import LaunchSpec

        return LaunchSpec(
            kernel_name="naive_attention",
            block_m=128,
            threads=128,
            shared_bytes=self.shared_bytes,
            dtype=self.dtype,
            head_dim_qk=self.d_qk,
            head_dim_v=self.d_v,
            mask=self.mask,
            arch=self.arch,
            window=self.window,
        )


NAIVE_CONFIGS: list[NaiveConfig] = [
    NaiveConfig("naive_fp16_d64"),
    NaiveConfig("naive_bf16_d128_causal", dtype="bf16", d_qk=128, d_v=128, mask="causal"),
    NaiveConfig("naive_fp16_d64_window", mask="window", window=(64, 16)),
    NaiveConfig("naive_bf16_mla_causal", dtype="bf16", d_qk=192, d_v=128, mask="causal"),
    NaiveConfig("naive_sm75_fp16_d64", arch="sm_75"),
    NaiveConfig("naive_big_smem", shared_bytes=100 * 1024),  # needs the > 48 KB opt-in to launch at all
    NaiveConfig("naive_broken_scale", edits=(("1.4426950408889634f;  // exp(x)", "1.0f;  // exp(x)"),)),
    NaiveConfig(
        "naive_broken_last_row", edits=(("if (row >= seqlen_q) return;", "if (row >= seqlen_q - 1) return;"),)
    ),
]


# Runtime shapes (B, H, Hkv, Sq, Sk) and whether the inputs are strided views.
SHAPES: dict[str, tuple[Shape, bool]] = {
    "s1": (Shape(2, 4, 4, 1, 1), False),
    "s17": (Shape(2, 4, 4, 17, 17), False),
    "s1000": (Shape(1, 4, 4, 1000, 1000), False),
    "s4097": (Shape(1, 2, 2, 4097, 4097), False),
    "q17_k1000": (Shape(2, 4, 4, 17, 1000), False),
    "q1000_k300": (Shape(1, 4, 4, 1000, 300), False),  # causal: the first 700 rows see no key
    "gqa2": (Shape(1, 8, 4, 513, 513), False),
    "gqa4": (Shape(1, 8, 2, 513, 700), False),
    "gqa8": (Shape(1, 16, 2, 513, 513), False),
    "mqa": (Shape(1, 8, 1, 513, 513), False),
    "strided": (Shape(2, 4, 4, 300, 300), True),
    # Kernels with a GQA group fixed in the TL get shapes of that group.
    "g8": (Shape(2, 8, 1, 1000, 1000), False),
    "g8_strided": (Shape(1, 16, 2, 333, 555), True),
    "g4": (Shape(2, 8, 2, 1000, 1000), False),
    "g4_q17_k1000": (Shape(1, 4, 1, 17, 1000), False),
}
GENERAL_SHAPES = [
    "s1",
    "s17",
    "s1000",
    "s4097",
    "q17_k1000",
    "q1000_k300",
    "gqa2",
    "gqa4",
    "gqa8",
    "mqa",
    "strided",
]
GROUP_SHAPES = {8: ["g8", "g8_strided"], 4: ["g4", "g4_q17_k1000"]}


def shapes_for(group: int) -> list[str]:
    return GROUP_SHAPES[group] if group else GENERAL_SHAPES


TL_KERNELS = TL_CONFIGS
NAIVE_OK = [n.name for n in NAIVE_CONFIGS if not n.name.startswith("naive_broken")]
