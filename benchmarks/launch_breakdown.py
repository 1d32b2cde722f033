"""Where one catalogue variant's launch spends its time on the GPU: each kernel of the launch (the
attention kernel, a launch-time block-mask kernel) timed by the PyTorch profiler, beside the launch's
time between CUDA events, on `benchmarks/variants.py`'s inputs and side tensors (the same draws).

    python3 benchmarks/launch_breakdown.py document_mask --hdim 64 --seqlen 16384 [--launches 50]

Prints one line per kernel (mean µs a launch) and the events' median µs a launch; a gap between the two
is host time the GPU waited for.
"""

from __future__ import annotations

import argparse
import sys
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.variant_cases import for_shape, side_tensors, tl_path  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("variant")
    ap.add_argument("--hdim", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=16384)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--launches", type=int, default=50)
    args = ap.parse_args(argv)

    import torch
    from torch.profiler import ProfilerActivity, profile

    from kernel_ir.program import Forward
    from pipeline.build import compile_all, translate_text
    from runner.launch import launch, load, require_device

    t = translate_text(for_shape(tl_path(args.variant).read_text(), "bf16", args.hdim), Path("x_bench.tl"))
    built = compile_all([t], device_arch=require_device())[0]
    lk = load(built.compiled, t.spec)
    S, H, D = args.seqlen, args.heads, args.hdim
    B = max(1, args.tokens // S)
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(B, S, H, D, device="cuda", generator=g).to(torch.bfloat16)
    k, v = (torch.randn(B, S, H, D, device="cuda", generator=g).to(torch.bfloat16) for _ in range(2))
    gv = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"{args.variant}:{S}".encode()))
    program = Forward.from_dict(t.spec.program) if t.spec.program else None
    side = side_tensors(program, B, H, H, S, gv)
    o, lse = torch.empty_like(q), torch.empty(B, H, S, device="cuda", dtype=torch.float32)
    for _ in range(5):
        launch(lk, q, k, v, o, lse, extras=side)
    torch.cuda.synchronize()
    times = []
    for _ in range(args.launches):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        launch(lk, q, k, v, o, lse, extras=side)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    queued = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    queued[0].record()
    for _ in range(args.launches):
        launch(lk, q, k, v, o, lse, extras=side)
    queued[1].record()
    queued[1].synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.launches):
            launch(lk, q, k, v, o, lse, extras=side)
        torch.cuda.synchronize()
    gpu = torch.cuda.get_device_name()
    print(f"{args.variant} bf16 d{D} B{B} H{H} S{S}, {gpu}, {args.launches} launches")
    def device_us(e: object) -> float:
        return float(getattr(e, "device_time_total", 0) or getattr(e, "cuda_time_total", 0))

    for e in sorted(prof.key_averages(), key=lambda e: -device_us(e)):
        if device_us(e) > 0:
            mean = device_us(e) / args.launches
            print(f"  {e.key[:60]:60s} {mean:9.1f} µs a launch ({e.count} calls)")
    times.sort()
    print(f"  one launch between events (synchronised each): median {times[len(times) // 2]:.1f} µs")
    print(f"  back to back: {queued[0].elapsed_time(queued[1]) * 1e3 / args.launches:.1f} µs a launch")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
