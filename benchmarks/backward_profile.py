"""One prebuilt backward at one shape, launched a few times: the process to run under Nsight Compute.

    ncu -k regex:dq_dk_dv --launch-skip 1 -c 1 --section SpeedOfLight --section WarpStateStats \\
        python3 benchmarks/backward_profile.py --prebuilt .cache/bwd2 --tag mha_fwd_bf16_d128

`--tag fa4` (with `--causal` or not) launches FA4's backward instead (`flash_attn_func` through autograd, the
forward outside the timed launches), so the same ncu sections can be read beside ours: its main kernel's
name matches `regex:Backward`.

bf16 inputs (batch, seqlen, heads, d) = (16384 / seqlen, seqlen, 16, d) as in `benchmarks/backward.py`,
O and LSE from SDPA flash's forward (causal where the build's mask is; a masked variant's LSE is then not
its own, which leaves the work per launch as it is); it prints the median time of the launches (CUDA
events). Several tags (`--tag a,b --rounds 6`) are timed in turn, the order alternating between rounds as
`runner.bench` balances it, and a table gives each one's median over the rounds against the first's:

    python3 benchmarks/backward_profile.py --prebuilt DIR --tag sliding_window_bf16_d128_sm90,\
        sliding_window_bf16_d128_sm90o --seqlen 16384 --launches 15 --rounds 6
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _launcher(args: argparse.Namespace, tag: str) -> tuple[Callable[[], Any], str]:
    """One backward launch of `tag` (a prebuilt tag, or fa4) on its inputs, and its description."""
    import torch

    from benchmarks.backward import HEADS, TOKENS, _autograd, _prebuilt_backward, _sdpa_lse, fa4_function
    from runner.backward import backward

    if tag == "fa4":
        bwd = None
        d, causal = args.d, args.causal
    else:
        bwd = _prebuilt_backward(args.prebuilt, tag)
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
            raise SystemExit(1)
        bwd_only, _ = _autograd("fa4", q, k, v, do, causal, scale, fa4)
        launch = functools.partial(bwd_only, 0)
    else:
        o, lse = _sdpa_lse(q, k, v, causal, scale)
        launch = functools.partial(backward, bwd, q, k, v, o, lse, do, softmax_scale=scale)
    return launch, f"causal={causal} B={b} S={s} H={HEADS} d={d}"


def _median_ms(launch: Callable[[], Any], launches: int) -> float:
    import torch

    times = []
    for _ in range(launches):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        launch()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prebuilt", type=Path, required=True)
    ap.add_argument("--tag", default="mha_fwd_bf16_d128", help="comma-separated: several are timed in turn")
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--launches", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1, help="rounds over the tags, alternating their order")
    ap.add_argument("--d", type=int, default=128, help="with --tag fa4 (a prebuilt tag knows its own)")
    ap.add_argument("--causal", action="store_true", help="with --tag fa4")
    args = ap.parse_args()
    tags = [t for t in args.tag.split(",") if t]
    launchers = {t: _launcher(args, t) for t in tags}
    medians: dict[str, list[float]] = {t: [] for t in tags}
    for i in range(args.rounds):
        for t in tags if i % 2 == 0 else tags[::-1]:
            launch, what = launchers[t]
            medians[t].append(_median_ms(launch, args.launches))
            print(f"{t} {what}: median {medians[t][-1]:.3f} ms")
    if len(tags) > 1:
        first = sorted(medians[tags[0]])[len(medians[tags[0]]) // 2]
        print(f"\n{'tag':44s} {'median ms':>10s} {'/ first':>8s}  (median over {args.rounds} rounds)")
        for t in tags:
            m = sorted(medians[t])[len(medians[t]) // 2]
            print(f"{t:44s} {m:10.3f} {first / m:8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
