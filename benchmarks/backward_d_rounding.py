"""How far the backward's D = rowsum(dO ∘ O), taken from the forward's rounded O, moves dQ and dK from the
exact gradient on the verification's ALiBi draws (CPU, float64; no GPU).

    python3 benchmarks/backward_d_rounding.py [--seqlen 2049] [--draws 8] [--dtype bf16]

Every backward kernel here (and FlashAttention 2/3/4's) computes dS = P ∘ (dP − D) with D from the O the
forward wrote in the input dtype. Where a row's P sits on one key (causal ALiBi with a large positive slope:
the bias −slope · distance), dP − D cancels and D's rounding dominates dS. `runner.backward_verify` draws
slopes of either sign with magnitudes up to 8 (`runner.ir_reference.FLOAT_MAGNITUDES`), so some draws show
it. Per draw this prints the relative L2 change of dQ and dK from D's rounding alone, from dS's rounding to
the input dtype alone (what the GEMMs read), and from both, against the verification's bf16 tolerance
(3e-2) and fp16's (1e-2).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    import torch

    from kernel_ir.program import Forward
    from pipeline.build import translate_text
    from runner.ir_reference import make_side_tensors

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seqlen", type=int, default=2049)
    ap.add_argument("--draws", type=int, default=8)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    args = ap.parse_args(argv)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    path = ROOT / "examples" / "variants" / "alibi.tl"
    program = Forward.from_dict(translate_text(path.read_text(), path).spec.program)
    S, H, d = args.seqlen, args.heads, 128
    scale = 1 / math.sqrt(d)
    i, j = torch.arange(S).view(S, 1), torch.arange(S).view(1, S)
    print(f"ALiBi, causal, {H} heads, seqlen {S}, d {d}, {args.dtype} inputs; relative L2 change of dQ / dK")
    for seed in range(args.draws):
        g = torch.Generator().manual_seed(seed)
        q, k, v, do = (torch.randn(H, S, d, generator=g).to(dtype).double() for _ in range(4))
        side = make_side_tensors(program, 1, H, 1, S, S, generator=g, device="cpu")
        slopes = side["slopes"].double().view(H, 1, 1)
        x = (q @ k.transpose(1, 2) * scale + slopes * (j - i)).masked_fill(j > i, float("-inf"))
        p = torch.softmax(x, -1)
        o = p @ v
        dp = do @ v.transpose(1, 2)

        def grads(o_used, round_ds: bool, p=p, dp=dp, do=do, q=q, k=k):
            ds = p * (dp - (do * o_used).sum(-1, keepdim=True)) * scale
            if round_ds:
                ds = ds.to(dtype).double()
            return ds @ k, ds.transpose(1, 2) @ q

        exact = grads(o, False)
        o_rounded = o.to(dtype).double()

        def moved(g2, exact=exact) -> str:
            rel = [float((a - b).norm() / b.norm()) for a, b in zip(g2, exact, strict=True)]
            return f"{rel[0]:.2e} / {rel[1]:.2e}"

        print(
            f"draw {seed}: slopes {[round(float(s), 2) for s in slopes.flatten()]}: D from the rounded O "
            f"{moved(grads(o_rounded, False))}; dS rounded {moved(grads(o, True))}; "
            f"both {moved(grads(o_rounded, True))}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
