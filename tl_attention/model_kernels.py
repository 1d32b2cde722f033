"""The TL kernel for a decoder layer's attention: causal or not, logit softcap, sliding window.

A plain causal (or full) layer gets the standard kernel of `pipeline.variants.KernelConfig`, the one the
benchmarks tune and the GPU suite verifies. A softcap or a sliding window adds the score statements of
`examples/variants/softcap.tl` and `examples/variants/sliding_window.tl` to the same loop; both are runtime
Scalars (`cap`, `window_size`), so one kernel serves every cap and window size of a kind.

Kernels are named by a key (`hf:<dtype>:<head dim>:<causal>:<softcap>:<window>`) that is all the traced
Python side of a model computes; `tl_attention.ops.resolve` builds the kernel from the key on first use.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.build import translate_text
from pipeline.variants import KernelConfig, tiles
from tl_attention.kernel import Kernel, current_arch, device_family
from tl_attention.ops import register_factory

PREFIX = "hf"


@dataclass(frozen=True)
class LayerKind:
    dtype: str  # "bf16" | "fp16"
    head_dim: int
    causal: bool = True
    softcap: bool = False
    window: bool = False

    @property
    def key(self) -> str:
        return (
            f"{PREFIX}:{self.dtype}:{self.head_dim}:{int(self.causal)}:{int(self.softcap)}:{int(self.window)}"
        )

    @staticmethod
    def from_key(key: str) -> LayerKind:
        prefix, dtype, d, causal, softcap, window = key.split(":")
        if prefix != PREFIX:
            raise KeyError(f"{key!r} is not a model-layer kernel key")
        return LayerKind(dtype, int(d), causal == "1", softcap == "1", window == "1")

    @property
    def scalars(self) -> tuple[str, ...]:
        """The runtime Scalars of the kernel, in the order the op takes them."""
        return (("cap",) if self.softcap else ()) + (("window_size",) if self.window else ())

    def name(self, target: str) -> str:
        parts = ["causal" if self.causal else "full"]
        parts += ["softcap"] * self.softcap + ["window"] * self.window
        return f"tl_{target}_{self.dtype}_d{self.head_dim}_{'_'.join(parts)}"


def tl_text(kind: LayerKind, target: str) -> str:
    mask = "causal" if kind.causal else "none"
    if not (kind.softcap or kind.window):
        config = KernelConfig(d_qk=kind.head_dim, dtype=kind.dtype, mask=mask, target=target)
        return config.tl_text().replace(f"Kernel {config.name}", f"Kernel {kind.name(target)}", 1)
    params = dict(tiles(target, kind.head_dim, mask))
    if target == "sm_90" and params["BN"] == kind.head_dim:
        params["BN"] = 96  # as sliding_window.tl: a wgmma N unlike d keeps the two GEMMs apart
    header = [
        f"# {kind.name(target)}: a decoder layer's attention (tl_attention.model_kernels)",
        f"Kernel {kind.name(target)}",
        f"Target {target}",
        f"Dtype {kind.dtype}",
        *(f"Param {name} = {value}" for name, value in params.items()),
        f"Param d = {kind.head_dim}",
    ]
    if kind.softcap:
        header.append(
            "Scalar cap = 50.0          # Gemma 2's attn_logit_softcapping; the launch passes the config's"
        )
    if kind.window:
        header.append(
            "Scalar window_size = 4096  # keys per query, itself included; the launch passes the config's"
        )
    header.append(f"Mask {mask}")
    score = ["    Compute Multiply S, scale and get new S"]
    if kind.softcap:
        score += [
            "    Compute Divide S, cap and get new S",
            "    Compute Tanh S and get new S",
            "    Compute Multiply S, cap and get new S       # S = cap · tanh(S · scale / cap)",
        ]
    if kind.causal:
        score.append("    Compute Mask S")
    if kind.window:
        score.append("    Compute Mask S, q_idx + seqlen_k - seqlen_q - kv_idx < window_size")
    body = [
        "",
        "Allocate Q in global (seqlen_q, d) with offset q_offset",
        "Allocate K in global (seqlen_k, d) with offset kv_offset",
        "Allocate V in global (seqlen_k, d) with offset kv_offset",
        "Allocate O in global (seqlen_q, d) with offset o_offset",
        "",
        "Copy Q (BM, d) in coordinate [L = block_m] from global to shared",
        "Copy Q from shared to register",
        "Allocate S in register (BM, BN)",
        "Allocate acc_o in register (BM, d)",
        "for j = 0: seqlen_k / BN",
        "    Copy K (BN, d) in coordinate [L = j] from global to shared",
        "    Copy K from shared to register",
        "    Compute GEMM Q, K and get S",
        *score,
        "    Compute Softmax S",
        "    Reshape S from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_N_new)",
        "    Copy V (BN, d) in coordinate [L = j] from global to shared",
        "    Copy V from shared to register",
        "    Compute GEMM S, V and accumulate acc_o",
        "end",
        "Compute Divide acc_o, rowsum and get new acc_o",
        "Copy acc_o (BM, d) in coordinate [L = block_m] from register to global as O",
    ]
    return "\n".join(header + body) + "\n"


def kernel_for(kind: LayerKind, target: str | None = None) -> Kernel:
    """The (translated, not yet compiled) kernel of `kind` for `target` (default: the current device's
    family, sm_90 without a device)."""
    if target is None:
        arch = current_arch()
        target = device_family(arch) if arch else "sm_90"
    text = tl_text(kind, target)
    translated = translate_text(text, Path(f"{kind.name(target)}.tl"))
    got = tuple(name for name, _, _ in (translated.spec.program or {}).get("scalars", ()))
    if got != kind.scalars:
        raise RuntimeError(
            f"{kind.name(target)}: the translated kernel takes Scalars {got}, not {kind.scalars}"
        )
    return Kernel(translated=translated, origin=f"{kind.key} ({target})", key=kind.key)


def _build(key: str) -> Kernel:
    return kernel_for(LayerKind.from_key(key))


register_factory(PREFIX, _build)
