"""A/B of the sm_90 forward's launch tile order for masks that read side tensors: one kernel, its block
classes built once, the order after them rewritten (`runner.launch.longest_first`): `exact` (non-empty key
blocks, descending; the default), `q/N` (counted in quanta of an SM's share of all blocks / N, ties in
index order, so a head's tiles stay together), `index` ((batch, head, query block) ascending: no
reordering). Every order's output is checked bit-equal to `exact`'s, then all are timed in one interleaved
run (`runner.bench.time_interleaved`). TFLOPS on the pairs the masks keep.

    python3 benchmarks/tile_order_ab.py [--only document_mask,global_sliding] [--hdims 128,64]
                                        [--seqlens 4096,16384] [--tokens 16384] [--json OUT]
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.variant_cases import for_shape, kept_pairs, side_tensors  # noqa: E402

PARTS = (8, 2)  # the quanta tried: an SM's share / N


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="document_mask,global_sliding,prefix_softcap_document")
    ap.add_argument("--hdims", default="128,64")
    ap.add_argument("--seqlens", default="4096,16384")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--target-s", type=float, default=0.5)
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    import torch

    from kernel_ir.program import Forward
    from pipeline.build import translate_text
    from runner.abi import TILE_ORDER_ALIGN
    from runner.bench import time_interleaved
    from runner.compile import CompileJob, compile_many
    from runner.launch import block_classes, cuda_device_arch, launch, load, longest_first, sm_count

    names = [n for n in args.only.split(",") if n]
    dims = [int(x) for x in args.hdims.split(",")]
    built = {
        (n, d): translate_text(
            for_shape((ROOT / "examples" / "variants" / f"{n}.tl").read_text(), "bf16", d), Path(f"{n}_ab.tl")
        )
        for n in names
        for d in dims
    }
    device = cuda_device_arch()
    jobs = [
        CompileJob(source=b.source, arch=b.spec.arch, name=f"{n}_{d}.cu", device_arch=device)
        for (n, d), b in built.items()
    ]
    loaded = {key: load(c, b.spec) for (key, b), c in zip(built.items(), compile_many(jobs), strict=True)}
    H, rows = args.heads, []
    for (n, d), lk in loaded.items():
        program = Forward.from_dict(lk.spec.program)
        for S in (int(s) for s in args.seqlens.split(",")):
            B = args.tokens // S
            g = torch.Generator(device="cuda").manual_seed(0)
            q, k, v = (
                torch.randn(B, S, H, d, device="cuda", generator=g).to(torch.bfloat16) for _ in range(3)
            )
            gv = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"{n}:{S}".encode()))
            side = side_tensors(program, B, H, H, S, gv)
            flops = 4 * kept_pairs(program, q, k, side) * d
            exact = block_classes(lk, q, k, v, extras=side)
            m_blocks = math.ceil(S / lk.spec.block_m)
            planes = H if program.block_mask == "per_head" else 1
            shape = (B, planes, m_blocks, math.ceil(S / lk.spec.block_n))
            offset = -(-math.prod(shape) // TILE_ORDER_ALIGN) * TILE_ORDER_ALIGN
            classes = exact[: math.prod(shape)].view(shape)
            total = int((classes != 0).sum()) * (H // planes)
            share = total / sm_count(q.device.index)
            orders = {"exact": exact}
            for label, quantum in [
                *((f"q/{p}", max(1, round(share / p))) for p in PARTS),
                ("index", 1 << 30),
            ]:
                buf = exact.clone()
                buf[offset:].view(torch.int32).copy_(longest_first(classes, H, quantum))
                orders[label] = buf
            outs = {}
            for label, buf in orders.items():
                outs[label] = (torch.empty_like(q), torch.empty(B, H, S, device="cuda"))
                launch(lk, q, k, v, *outs[label], extras=side, block_classes=buf)
            agree = all(torch.equal(outs[lab][0], outs["exact"][0]) for lab in orders)

            def call(
                i: int, buf: Any, out: tuple[Any, Any], lk: Any = lk, qkv: tuple = (q, k, v), side: Any = side
            ) -> None:
                launch(lk, *qkv, *out, extras=side, block_classes=buf)

            fns = {lab: functools.partial(call, buf=buf, out=outs[lab]) for lab, buf in orders.items()}
            times = time_interleaved(fns, target_s=args.target_s, warmup_s=0.1)
            row = {"variant": n, "d": d, "batch": B, "seqlen": S, "share": round(share, 1), "agree": agree}
            for lab, t in times.items():
                row[lab] = (
                    round(flops / (t.median_ms / 1e3) / 1e12, 1) if not isinstance(t, Exception) else str(t)
                )
            rows.append(row)
            print(json.dumps(row), flush=True)
    labels = ["exact", *(f"q/{p}" for p in PARTS), "index"]
    gpu = torch.cuda.get_device_name()
    print(f"\nTFLOPS on kept pairs by tile order, bf16, H {H}, {args.tokens} tokens, {gpu}")
    print(f"{'variant':26s} {'d':>4s} {'B×S':>7s} " + " ".join(f"{c:>7s}" for c in labels) + "  equal")
    for r in rows:
        vals = " ".join(f"{r.get(c, float('nan')):7.1f}" for c in labels)
        print(f"{r['variant']:26s} {r['d']:4d} {r['batch']}×{r['seqlen'] // 1024}k {vals}  {r['agree']}")
    if args.json:
        Path(args.json).write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
