"""End-to-end time of a Llama-like transformers model with TL attention against SDPA (cuDNN and flash
backends) and flex_attention: the forward, and the training step (forward + backward) once TL has a
backward for the model's kernel. One model, one process, one run; the candidates switch the model's
attention implementation and are timed in `runner.bench.time_interleaved`'s balanced order. Each one is
checked first: its logits against SDPA-cuDNN's.

    python3 benchmarks/model_step.py [--batch 2 --seqlen 4096 --layers 4] [--out FILE.json]

Needs a GPU, transformers and the CuTe headers (see benchmarks/run_on_device.sh).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner.bench import Timing, time_interleaved  # noqa: E402
from tl_attention import hf  # noqa: E402
from tl_attention.backward import find_backward  # noqa: E402


def sdpa_backend(name: str | None) -> Callable[[], contextlib.AbstractContextManager[None]]:
    def ctx() -> contextlib.AbstractContextManager[None]:
        if name is None:
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel([getattr(SDPBackend, name)])

    return ctx


# candidate → (attn_implementation, context of each call)
CANDIDATES: dict[str, tuple[str, Callable[[], contextlib.AbstractContextManager[None]]]] = {
    "tl": ("tl", sdpa_backend(None)),
    "sdpa-cudnn": ("sdpa", sdpa_backend("CUDNN_ATTENTION")),
    "sdpa-flash": ("sdpa", sdpa_backend("FLASH_ATTENTION")),
    "flex_attention": ("flex_attention", sdpa_backend(None)),
}


def build_model(args: argparse.Namespace) -> Any:
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=args.heads * args.head_dim,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        head_dim=args.head_dim,
        max_position_embeddings=max(8192, args.seqlen),
    )
    torch.manual_seed(0)
    with torch.device("cuda"):
        return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=torch.bfloat16)


@contextlib.contextmanager
def attention(model: Any, name: str) -> Iterator[None]:
    impl, ctx = CANDIDATES[name]
    model.set_attn_implementation(impl)
    with ctx():
        yield


def forward_fn(model: Any, ids: Any, name: str) -> Callable[[int], Any]:
    def run(_i: int) -> Any:
        with attention(model, name), torch.no_grad():
            return model(ids, use_cache=False).logits

    return run


def step_fn(model: Any, ids: Any, name: str) -> Callable[[int], Any]:
    def run(_i: int) -> Any:
        with attention(model, name):
            loss = model(ids, labels=ids, use_cache=False).loss
            loss.backward()
        model.zero_grad(set_to_none=True)
        return loss

    return run


def row(name: str, t: Timing | Exception, tl_ms: float | None, diff: float | str) -> str:
    """A table row; the ratio is the candidate's time over TL's (above 1: TL is faster)."""
    if isinstance(t, Exception):
        return f"| {name} | failed: {type(t).__name__}: {str(t).splitlines()[0][:80]} | | | |"
    ratio = f"{t.median_ms / tl_ms:.2f}x" if tl_ms and name != "tl" else ""
    d = diff if isinstance(diff, str) else f"{diff:.3g}"
    return f"| {name} | {t.median_ms:.3f} | {t.p10_ms:.3f}–{t.p90_ms:.3f} | {ratio} | {d} |"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seqlen", type=int, default=4096)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--intermediate", type=int, default=5632)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--target-s", type=float, default=2.0, help="timed seconds per candidate and mode")
    p.add_argument(
        "--step",
        choices=["auto", "on", "off"],
        default="auto",
        help="time the training step too (auto: once TL has a backward for the kernel)",
    )
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)

    hf.register()
    model = build_model(args)
    start = time.perf_counter()
    (kernel,) = hf.prepare(model.config, torch.bfloat16)
    print(f"TL kernel {kernel.name} ready in {time.perf_counter() - start:.1f} s")
    ids = torch.randint(0, args.vocab, (args.batch, args.seqlen), device="cuda")

    # Check each candidate first (and warm it: flex_attention compiles on its first call).
    logits: dict[str, Any] = {}
    usable: list[str] = []
    for name in CANDIDATES:
        start = time.perf_counter()
        try:
            logits[name] = forward_fn(model, ids, name)(0).float()
            torch.cuda.synchronize()
            usable.append(name)
            print(f"{name}: first forward (checked, warm) in {time.perf_counter() - start:.1f} s")
        except Exception as exc:
            print(f"{name}: cannot run: {type(exc).__name__}: {exc}")
    ref = logits.get("sdpa-cudnn")
    diffs = {n: ((logits[n] - ref).abs().max().item() if ref is not None else "n/a") for n in usable}
    del logits

    has_tl_backward = find_backward(kernel) is not None
    do_step = args.step == "on" or (args.step == "auto" and has_tl_backward)
    results: dict[str, dict[str, Timing | Exception]] = {
        "forward": time_interleaved({n: forward_fn(model, ids, n) for n in usable}, target_s=args.target_s)
    }
    if do_step:
        model.train()
        results["step"] = time_interleaved(
            {n: step_fn(model, ids, n) for n in usable}, target_s=args.target_s
        )

    props = torch.cuda.get_device_properties(0)
    shape = (
        f"Llama-like: {args.layers} layers, hidden {args.heads * args.head_dim}, heads "
        f"{args.heads}/{args.kv_heads} (GQA), head dim {args.head_dim}, causal; "
        f"batch {args.batch} x seqlen {args.seqlen}, bf16"
    )
    print(f"\n{props.name}, torch {torch.__version__}; {shape}")
    for mode, timings in results.items():
        tl = timings.get("tl")
        tl_ms = tl.median_ms if isinstance(tl, Timing) else None
        print(f"\n{mode}:")
        print("| candidate | median ms | p10–p90 ms | its time / TL's | max abs logit diff vs sdpa-cudnn |")
        print("|---|---|---|---|---|")
        for name, t in timings.items():
            print(row(name, t, tl_ms, diffs.get(name, "")))
    if not do_step:
        why = "--step off" if args.step == "off" else f"TL has no backward for {kernel.name} yet"
        print(f"\nstep: not timed ({why})")
    if args.out:
        data = {
            "device": props.name,
            "torch": torch.__version__,
            "shape": shape,
            "kernel": kernel.name,
            "diffs": diffs,
            "timings": {
                mode: {n: (str(t) if isinstance(t, Exception) else t.__dict__) for n, t in ts.items()}
                for mode, ts in results.items()
            },
        }
        args.out.write_text(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
