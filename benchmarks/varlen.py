"""Variable-length prefill on the GPU: TFLOPS on the useful (query, key) pairs of a packed batch of mixed
lengths, TL's varlen kernel beside the same tiles on the padded batch and FlexAttention with a document
mask on the packed batch, in one process and in the balanced order of `runner.bench.time_interleaved`.

    python3 benchmarks/varlen.py [--tokens 32768] [--seed 0] [--flex] [--json OUT.json]

Causal within each sequence, GQA 32/8, head dim 128, bf16; lengths log-uniform in [64, 8192] until about
`--tokens` tokens. Candidates:
- tl-varlen: examples/inference/varlen_prefill.tl built for sm_90 (the TMA + wgmma skeleton with the
  inference ABI) with BN 128; `tl-varlen BN=n` the same with the key tile of `--block-n` (an A/B);
- tl-varlen-sm80: the file as written (Target sm_80: the inference backend's cp.async + mma.sync kernel,
  run through PTX);
- tl-padded: examples/causal_mha_fwd.tl (the same BM 128, BN 64, 4 warps, 2 stages) on the batch padded
  to its longest sequence, built for sm_80 (the same mma.sync code, run through PTX);
- tl-padded-sm90: the same file built for sm_90 (TMA + wgmma), for scale;
- flex (--flex): FlexAttention with a causal document mask over the packed batch (block mask built once,
  outside the timing).
Useful FLOPs: 4 · d · heads · Σ s (s + 1) / 2. Each candidate's output on the sequences is compared with
tl-varlen's before it is timed (the kernels themselves are verified against the TL reference by
benchmarks/verify_decode.py).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HEADS, HEADS_KV, D = 32, 8, 128


def lengths(tokens: int, seed: int) -> list[int]:
    import random

    rng = random.Random(seed)
    out: list[int] = []
    while sum(out) < tokens:
        out.append(int(math.exp(rng.uniform(math.log(64), math.log(8192)))))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=32768)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--flex", action="store_true")
    ap.add_argument("--target-s", type=float, default=1.0)
    ap.add_argument("--block-n", default="64,160", help="key tiles of the sm_90 varlen A/B, comma-separated")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)

    import torch

    from benchmarks.variant_cases import with_param
    from pipeline.build import translate_text
    from runner.bench import time_interleaved
    from runner.compile import CompileError, CompileJob, compile_many
    from runner.decode import decode_attention
    from runner.launch import attention, cuda_device_arch, load

    lens = lengths(args.tokens, args.seed)
    batch, total, longest = len(lens), sum(lens), max(lens)
    useful = 4 * D * HEADS * sum(s * (s + 1) / 2 for s in lens)
    causal = (ROOT / "examples" / "causal_mha_fwd.tl").read_text()
    packed = (ROOT / "examples/inference/varlen_prefill.tl").read_text()
    packed_sm90 = re.sub(r"(?m)^Target .*$", "Target sm_90", packed)
    texts = {"tl-varlen": with_param(packed_sm90, "BN", "128")}
    for bn in filter(None, args.block_n.split(",")):
        texts[f"tl-varlen BN={bn}"] = with_param(packed_sm90, "BN", bn)
    texts |= {
        "tl-varlen-sm80": packed,
        "tl-padded": causal,
        "tl-padded-sm90": re.sub(r"(?m)^Target .*$", "Target sm_90", causal),
    }
    built = {name: translate_text(text, Path(f"{name}.tl")) for name, text in texts.items()}
    device = cuda_device_arch()
    jobs = [
        CompileJob(source=t.source, arch=t.spec.arch, name=f"{n}.cu", device_arch=device)
        for n, t in built.items()
    ]
    loaded = {}
    for (name, t), c in zip(built.items(), compile_many(jobs), strict=True):
        if isinstance(c, CompileError):
            print(f"COMPILE FAIL {name}: {str(c)[:400]}", flush=True)
            continue
        loaded[name] = load(c, t.spec)

    dev, dt = "cuda", torch.bfloat16
    gen = torch.Generator(device=dev).manual_seed(args.seed)
    q = torch.randn(total, HEADS, D, device=dev, dtype=dt, generator=gen)
    k = torch.randn(total, HEADS_KV, D, device=dev, dtype=dt, generator=gen)
    v = torch.randn(total, HEADS_KV, D, device=dev, dtype=dt, generator=gen)
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=dev)
    starts = cu[:-1].tolist()

    def padded(x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(batch, longest, x.shape[1], D, device=dev, dtype=dt)
        for b, (s, n) in enumerate(zip(starts, lens, strict=True)):
            out[b, :n] = x[s : s + n]
        return out

    qp, kp, vp = padded(q), padded(k), padded(v)
    fns = {}
    for name, kernel in loaded.items():
        if name.startswith("tl-varlen"):
            fns[name] = lambda i, L=kernel: decode_attention(
                L, q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=longest, max_seqlen_k=longest
            )[0]
    for name in ("tl-padded", "tl-padded-sm90"):
        if name in loaded:
            fns[name] = lambda i, L=loaded[name]: attention(L, qp, kp, vp)[0]
    if args.flex:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        doc = torch.repeat_interleave(torch.arange(batch, device=dev), torch.tensor(lens, device=dev))

        def document_causal(b, h, q_idx, kv_idx):
            return (doc[q_idx] == doc[kv_idx]) & (kv_idx <= q_idx)

        mask = create_block_mask(document_causal, 1, 1, total, total, device=dev)
        flex = torch.compile(flex_attention, dynamic=False)
        qf, kf, vf = (x.transpose(0, 1).unsqueeze(0).contiguous() for x in (q, k, v))
        fns["flex"] = lambda i: flex(qf, kf, vf, block_mask=mask, enable_gqa=True)[0].transpose(0, 1)

    def on_sequences(out: torch.Tensor, name: str) -> torch.Tensor:
        if name.startswith("tl-padded"):
            return torch.cat([out[b, :n] for b, n in enumerate(lens)])
        return out

    ref = None
    for name, fn in list(fns.items()):
        try:
            out = on_sequences(fn(0), name).float()
            ref = out if ref is None else ref
            err = float((out - ref).abs().max())
            if not err < 3e-2:
                print(f"  {name}: differs from tl-varlen by {err:.3e}; not timed", flush=True)
                del fns[name]
        except Exception as exc:  # a candidate that cannot run is reported, not fatal
            print(f"  {name}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            del fns[name]
    times = time_interleaved(fns, target_s=args.target_s, warmup_s=0.05)
    gpu = torch.cuda.get_device_name()
    print(f"\nVarlen prefill, {batch} sequences ({total} tokens, longest {longest}), causal, "
          f"GQA {HEADS}/{HEADS_KV}, d {D}, bf16, {gpu}, {time.strftime('%Y-%m-%d')}")  # fmt: skip
    rows = []
    base = times.get("tl-padded")
    flex_t = times.get("flex")
    for name, t in times.items():
        if isinstance(t, Exception):
            print(f"  {name}: {type(t).__name__}: {t}")
            continue
        ratio = (
            base.median_ms / t.median_ms if base is not None and not isinstance(base, Exception) else math.nan
        )
        vs_flex = (
            flex_t.median_ms / t.median_ms
            if flex_t is not None and not isinstance(flex_t, Exception)
            else math.nan
        )
        rows.append({"candidate": name, "ms": t.median_ms, "useful_TFLOPS": useful / t.median_ms / 1e9,
                     "vs_tl_padded": ratio, "vs_flex": vs_flex, "spread": t.spread})  # fmt: skip
        print(f"{name:18s} {t.median_ms:8.3f} ms {useful / t.median_ms / 1e9:7.1f} TFLOPS (useful) "
              f"{ratio:6.3f}x tl-padded {vs_flex:6.3f}x flex  spread {t.spread:.3f}")  # fmt: skip
    if args.json:
        result = {"gpu": gpu, "date": time.strftime("%Y-%m-%d"), "lengths": lens, "rows": rows}
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
