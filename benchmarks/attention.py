"""Sweep attention configurations: generated TL kernels against PyTorch SDPA backends, FlexAttention, FA4.

    python benchmarks/attention.py                        # bf16+fp16, hd 64/128/256, causal on/off, 512…16k
    python benchmarks/attention.py --dtype bf16 --hdim 128 --seqlens 4096,16384 --causal off
    python benchmarks/attention.py --kernels examples/mha_fwd.tl my_variant.tl --json out.json

Shapes follow FlashAttention's benchmark: 16k tokens per configuration (batch = 16384 / seqlen) and a
2048-wide model (heads = 2048 / head_dim). Every kernel is compiled first (in parallel), then verified
on each configuration's own shape before it is timed: a wrong kernel is reported FAIL, never timed.
Without --kernels, the kernels are the standard TL variants (`pipeline.variants.KernelConfig`) of
examples/mha_fwd.tl per (dtype, head dim, mask): `tl-sm80` (the mma.sync path) and, on an sm_90 device,
`tl-sm90` (the TMA + wgmma path). Prints one table and writes JSON.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.benchmark import BENCH_TIMING

EXIT_NO_DEVICE = 3


@dataclass(frozen=True)
class Config:
    dtype: str
    head_dim: int
    mask: str
    seqlen: int


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", default="bf16,fp16", help="comma-separated: bf16,fp16")
    p.add_argument("--hdim", default="128,64,256", help="comma-separated head dims")
    p.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    p.add_argument("--causal", choices=("both", "on", "off"), default="both")
    p.add_argument(
        "--kernels", nargs="*", type=Path, default=None, help="TL files (default: standard variants)"
    )
    p.add_argument("--baselines", default="sdpa-flash,sdpa-cudnn,sdpa-efficient,flex,fa4")
    p.add_argument(
        "--flex-seqlens",
        default="8192",
        help="seqlens at which FlexAttention runs (each shape is a fresh torch.compile, tens of seconds)",
    )
    p.add_argument("--json", type=Path, default=Path("attention-bench.json"))
    p.add_argument(
        "--budget-s", type=float, default=0.0, help="stop starting configurations after this (0: none)"
    )
    p.add_argument("--warmup-s", type=float, default=BENCH_TIMING["warmup_s"], help="warm-up per pass")
    p.add_argument(
        "--target-s",
        type=float,
        default=BENCH_TIMING["target_s"],
        help="measured time per candidate and configuration",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="interleaved passes per configuration (default: one balanced design, runner.bench)",
    )
    p.add_argument("--jobs", type=int, default=None, help="parallel compiles (default: all cores)")
    p.add_argument(
        "--sm90-params",
        action="append",
        default=[],
        metavar="NAME=V,...",
        help="also time the sm_90 kernel with these Params set (repeatable), e.g. persistent=1; a prefix "
        "hdN: applies it to head dim N only (hd128:persistent=1,BN=128)",
    )
    return p.parse_args(argv)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _sm90_params(args: argparse.Namespace, head_dim: int) -> tuple[dict[str, int], ...]:
    out = []
    for spec in args.sm90_params:
        if spec.startswith("hd"):
            only, spec = spec[2:].split(":", 1)
            if int(only) != head_dim:
                continue
        pairs = (item.split("=", 1) for item in spec.split(",") if item.strip())
        out.append({k.strip(): int(v) for k, v in pairs})
    return tuple(out)


def configs(args: argparse.Namespace) -> list[Config]:
    masks = {"both": ["none", "causal"], "on": ["causal"], "off": ["none"]}[args.causal]
    return [
        Config(dt, d, m, s)
        for dt in args.dtype.split(",")
        for d in _ints(args.hdim)
        for m in masks
        for s in _ints(args.seqlens)
    ]


def build_kernels(args: argparse.Namespace, cfgs: list[Config], device_arch: str) -> dict[tuple, list[Any]]:
    """(dtype, head dim, mask) → [(label, Built | BuildError)], all compiled in one parallel batch."""
    from pipeline.build import BuildError, compile_all, prepare
    from pipeline.variants import bench_kernels

    groups = sorted({(c.dtype, c.head_dim, c.mask) for c in cfgs})
    items, keys, failed = [], [], []
    if args.kernels:
        for path in args.kernels:
            try:
                t = prepare(path, write=False)
            except BuildError as exc:
                failed.append((path.stem, exc))
                continue
            key = (t.spec.dtype, t.spec.head_dim_qk, t.spec.mask)
            if key in groups:
                items.append(t)
                keys.append((key, path.stem))
    else:
        for dtype, d, mask in groups:
            # tl-sm80 (mma.sync path) always; tl-sm90 (TMA + wgmma) on an sm_90 device
            for label, kc in bench_kernels(d, dtype, mask, device_arch, _sm90_params(args, d)):
                try:  # a bare NAME.tl path: the same source (and compile cache entry) as the GPU tests'
                    items.append(kc.translate())
                    keys.append(((dtype, d, mask), label))
                except BuildError as exc:
                    failed.append((label, exc))
    start = time.perf_counter()
    results = compile_all(items, device_arch=device_arch, max_workers=args.jobs)
    cached = sum(getattr(getattr(r, "compiled", None), "cached", False) for r in results)
    print(f"compiled {len(items)} kernels in {time.perf_counter() - start:.1f} s ({cached} from the cache)")
    out: dict[tuple, list[Any]] = {g: [] for g in groups}
    for (key, label), result in zip(keys, results, strict=True):
        out[key].append((label, result))
    for label, exc in failed:
        print(f"build failed: {label}: {exc.message}")
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from runner.launch import NoDeviceError, require_device

    try:
        device_arch = require_device()
    except NoDeviceError as exc:
        print(f"{exc}: the benchmark needs a GPU")
        return EXIT_NO_DEVICE
    import torch

    from pipeline.benchmark import KernelEntry, format_table, run_case, sweep_shape, to_json
    from pipeline.build import BuildError
    from pipeline.report import format_build_error
    from runner.baselines import BASELINES, Baseline
    from runner.bench import BenchCase, BenchResult
    from runner.launch import load
    from runner.verify import verify

    cfgs = configs(args)
    kernels = build_kernels(args, cfgs, device_arch)
    wanted = set(args.baselines.split(","))
    baselines = [b for b in BASELINES if b.name in wanted]
    flex_seqlens = set(_ints(args.flex_seqlens))
    gpu = torch.cuda.get_device_name()
    timing = {"warmup_s": args.warmup_s, "target_s": args.target_s, "rounds": args.rounds}
    loaded_cache: dict[int, Any] = {}
    meta = {"device_arch": device_arch, "torch": torch.__version__}
    cases, start, status = [], time.perf_counter(), 0
    for cfg in cfgs:
        shape = sweep_shape(cfg.seqlen, cfg.head_dim)
        case = BenchCase(
            shape=shape, head_dim_qk=cfg.head_dim, head_dim_v=cfg.head_dim, dtype=cfg.dtype, mask=cfg.mask
        )
        if args.budget_s and time.perf_counter() - start > args.budget_s:
            for label, _ in kernels[(cfg.dtype, cfg.head_dim, cfg.mask)]:
                case.results[label] = BenchResult(name=label, error="skipped: time budget")
            cases.append(case)
            continue
        entries = []
        for label, built in kernels[(cfg.dtype, cfg.head_dim, cfg.mask)]:
            if isinstance(built, BuildError):
                print(format_build_error(built))
                entries.append(KernelEntry(name=label, loaded=None, error=f"build failed ({built.stage})"))
                status = 1
                continue
            try:
                if id(built) not in loaded_cache:
                    loaded_cache[id(built)] = load(built.compiled, built.spec)
                loaded = loaded_cache[id(built)]
                result = verify(loaded, shape)
            except Exception as exc:  # a kernel that cannot load or launch is a FAIL of this row
                entries.append(KernelEntry(name=label, loaded=None, error=f"FAIL: {exc}"[:160]))
                status = 1
                continue
            if not result.passed:
                print(result)
                status = 1
            entries.append(KernelEntry(name=label, loaded=loaded, verified=result))
        bl: list[Baseline] = [b for b in baselines if b.name != "flex" or cfg.seqlen in flex_seqlens]
        run_case(case, entries, baselines=bl, timing_kw=timing)
        for b in baselines:
            case.results.setdefault(b.name, BenchResult(name=b.name, error="not run at this seqlen"))
        cases.append(case)
        # Written after every configuration, so a run cut short by a timeout still leaves its numbers.
        args.json.write_text(to_json(cases, gpu, meta))
        line = "  ".join(f"{n}={r.tflops:.0f}" if r.ok else f"{n}=n/a" for n, r in case.results.items())
        print(f"{case.label()}: {line}", flush=True)
    labels = sorted({label for group in kernels.values() for label, _ in group})
    table = format_table(cases, labels, [b.name for b in baselines], gpu)
    args.json.write_text(to_json(cases, gpu, meta))
    print()
    print(table)
    print(f"JSON: {args.json}")
    return status


if __name__ == "__main__":
    sys.exit(main())
