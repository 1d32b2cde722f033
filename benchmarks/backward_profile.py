"""One prebuilt backward at one shape, launched a few times: the process to run under Nsight Compute.

    ncu -k regex:dq_dk_dv --launch-skip 1 -c 1 --section SpeedOfLight --section WarpStateStats \\
        python3 benchmarks/backward_profile.py --prebuilt .cache/bwd2 --tag mha_fwd_bf16_d128

`--tag fa4` (with `--causal` or not) launches FA4's backward instead (`flash_attn_func` through autograd, the
forward outside the timed launches), so the same ncu sections can be read beside ours: its main kernel's
name matches `regex:Backward`.

bf16 inputs (batch, seqlen, heads, d) = (16384 / seqlen, seqlen, 16, d) as in `benchmarks/backward.py`,
O and LSE from SDPA flash's forward; it prints the median time of the launches (CUDA events).
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    import torch

    from benchmarks.backward import HEADS, TOKENS, _autograd, _prebuilt_backward, _sdpa_lse, fa4_function
    from runner.backward import backward

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prebuilt", type=Path, required=True)
    ap.add_argument("--tag", default="mha_fwd_bf16_d128")
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--launches", type=int, default=3)
    ap.add_argument("--d", type=int, default=128, help="with --tag fa4 (a prebuilt tag knows its own)")
    ap.add_argument("--causal", action="store_true", help="with --tag fa4")
    args = ap.parse_args()
    if args.tag == "fa4":
        bwd = None
        d, causal = args.d, args.causal
    else:
        bwd = _prebuilt_backward(args.prebuilt, args.tag)
        d, causal = bwd.spec.head_dim, bwd.spec.mask == "causal"
    s = args.seqlen
    b = max(1, TOKENS // s)
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (
        torch.randn(b, s, HEADS, d, device="cuda", generator=g).to(torch.bfloat16) for _ in range(4)
    )
    scale = 1.0 / math.sqrt(d)
    if bwd is None:
        fa4 = fa4_function()
        if fa4 is None:
            return 1
        bwd_only, _ = _autograd("fa4", q, k, v, do, causal, scale, fa4)
        launch = functools.partial(bwd_only, 0)
    else:
        o, lse = _sdpa_lse(q, k, v, causal, scale)
        launch = functools.partial(backward, bwd, q, k, v, o, lse, do, softmax_scale=scale)
    times = []
    for _ in range(args.launches):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        launch()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    median = sorted(times)[len(times) // 2]
    print(f"{args.tag} causal={causal} B={b} S={s} H={HEADS} d={d}: median {median:.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
