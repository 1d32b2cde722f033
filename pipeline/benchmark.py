"""Benchmark configurations: our kernels and the baselines timed side by side; one table, one JSON.

Used by `tl bench FILE` and by `benchmarks/attention.py`. A kernel is timed on a configuration only after it
passed verification on that configuration's shape (a wrong kernel is reported FAIL and never timed).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from runner.baselines import BASELINES, Baseline
from runner.bench import BenchCase, BenchResult, kernel_run, make_bench_inputs, result_of, time_interleaved
from runner.launch import LoadedKernel
from runner.verify import Shape, VerifyResult

TOTAL_TOKENS = 16384
HIDDEN = 2048
# Timing per configuration (runner.bench.time_interleaved): a 0.1 s warm-up per pass and 0.4 s measured per
# candidate. With one balanced design of passes (2n for n candidates), this keeps `tl bench` and the
# editor's lens at a few seconds; `benchmarks/attention.py` takes it as its defaults.
BENCH_TIMING: dict[str, float] = {"warmup_s": 0.1, "target_s": 0.4}


def sweep_shape(
    seqlen: int, head_dim: int, *, total_tokens: int = TOTAL_TOKENS, hidden: int = HIDDEN
) -> Shape:
    """FlashAttention's benchmark shapes: batch × seqlen = 16k tokens, heads × head_dim = 2048."""
    batch = max(1, total_tokens // seqlen)
    heads = max(1, hidden // head_dim)
    return Shape(batch=batch, heads=heads, heads_kv=heads, seqlen_q=seqlen, seqlen_k=seqlen)


@dataclass
class KernelEntry:
    """A kernel to time on one configuration, and its verification on that configuration."""

    name: str
    loaded: LoadedKernel | None
    verified: VerifyResult | None = None
    error: str | None = None  # build or load failure


def run_case(
    case: BenchCase,
    kernels: Sequence[KernelEntry],
    *,
    baselines: Sequence[Baseline] = BASELINES,
    timing_kw: dict[str, Any] | None = None,
) -> BenchCase:
    """Time every passing kernel and every baseline on `case` (results land in case.results)."""
    import torch

    from runner.baselines import default_scale

    timing_kw = timing_kw or BENCH_TIMING
    inputs = make_bench_inputs(case.shape, case.head_dim_qk, case.head_dim_v, case.dtype)
    runs: dict[str, Callable[[int], Any]] = {}
    for entry in kernels:
        if entry.loaded is None:
            case.results[entry.name] = BenchResult(name=entry.name, error=entry.error or "not built")
        elif entry.verified is not None and not entry.verified.passed:
            case.results[entry.name] = BenchResult(
                name=entry.name, error="FAIL: verification failed, not timed"
            )
        else:
            runs[entry.name] = kernel_run(entry.loaded, inputs)
    baseline_runs, unavailable = prepare_baselines(
        baselines, inputs, case.mask, default_scale(case.head_dim_qk)
    )
    runs.update(baseline_runs)
    for name, reason in unavailable.items():
        case.results[name] = BenchResult(name=name, error=reason)
    for name, timing in time_interleaved(runs, **timing_kw).items():
        case.results[name] = result_of(case, name, timing)
    del inputs
    torch.cuda.empty_cache()
    return case


def prepare_baselines(
    baselines: Sequence[Baseline], inputs: Any, mask: str, scale: float
) -> tuple[dict[str, Callable[[int], Any]], dict[str, str]]:
    """(run(i) of each baseline that can run this configuration, the reason of each that cannot)."""
    runs, unavailable = {}, {}
    for b in baselines:
        try:
            runs[b.name] = b.prepare(inputs, mask, scale)
        except Exception as exc:  # unsupported configuration or missing package: n/a
            unavailable[b.name] = f"{type(exc).__name__}: {exc}"[:160]
    return runs, unavailable


def _fmt(x: float | None) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{x:.0f}"


# The references each standard variant is judged against (docs/performance.md): the sm_80 path against
# FlashAttention 2, the Hopper path against cuDNN and FA4 (and FA2, for its speed-up over the sm_80 class).
# Any other kernel (`tl bench FILE`, `--kernels`) gets a ratio to every baseline.
REFERENCES: dict[str, tuple[str, ...]] = {
    "tl-sm80": ("sdpa-flash",),
    "tl-sm90": ("sdpa-cudnn", "sdpa-flash", "fa4"),
}
# Short names for the ratio columns' headers: `sm90/FA4` reads better than `tl-sm90/fa4`.
SHORT_NAMES = {"sdpa-flash": "FA2", "sdpa-cudnn": "cuDNN", "sdpa-efficient": "mem-eff", "fa4": "FA4"}


def ratio_columns(
    cases: Sequence[BenchCase], kernel_names: Sequence[str], baseline_names: Sequence[str]
) -> list[tuple[str, str, str]]:
    """(header, kernel, baseline) of every ratio column, for the baselines timed in at least one row
    (an FA4 that is not installed adds no column of n/a; its reason is listed under the table)."""
    timed = {b for b in baseline_names if any(b in c.results and c.results[b].ok for c in cases)}
    cols = []
    for k in kernel_names:
        # `tl-sm90[persistent=1]` (attention.py --sm90-params) is the Hopper path: the same references.
        for b in REFERENCES.get(k.split("[", 1)[0], baseline_names):
            if b in baseline_names and b in timed:
                cols.append((f"{k.removeprefix('tl-')}/{SHORT_NAMES.get(b, b)}", k, b))
    return cols


def format_table(
    cases: Sequence[BenchCase], kernel_names: Sequence[str], baseline_names: Sequence[str], gpu: str
) -> str:
    """One table: TFLOPS of every kernel and baseline, then each kernel's ratio to its references."""
    cols = [*kernel_names, *baseline_names]
    ratio_cols = ratio_columns(cases, kernel_names, baseline_names)
    header = ["config", *cols, *(h for h, _, _ in ratio_cols)]
    rows = []
    for c in cases:
        row = [c.label()]
        for name in cols:
            r = c.results.get(name)
            row.append(
                "FAIL"
                if r is not None and r.error and r.error.startswith("FAIL")
                else _fmt(r.tflops if r else None)
            )
        for _, k, b in ratio_cols:
            rk, rb = c.results.get(k), c.results.get(b)
            ok = rk is not None and rb is not None and rk.ok and rb.ok and rb.tflops
            row.append(f"{rk.tflops / rb.tflops:.2f}" if ok else "n/a")  # type: ignore[union-attr,operator]
        rows.append(row)
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    lines = [f"TFLOPS on {gpu} (FlashAttention convention: 4·B·H·Sq·Sk·d, causal halved)"]
    lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)) for row in rows]
    notes = sorted({f"{r.name}: {r.error}" for c in cases for r in c.results.values() if r.error})
    if notes:
        lines.append("n/a and FAIL reasons:")
        lines += [f"  {n}" for n in notes[:30]]
    return "\n".join(lines)


def to_json(cases: Sequence[BenchCase], gpu: str, extra: dict[str, Any] | None = None) -> str:
    out = {"gpu": gpu, **(extra or {}), "cases": []}
    for c in cases:
        out["cases"].append(
            {
                "config": c.label(),
                "shape": asdict(c.shape),
                "dtype": c.dtype,
                "mask": c.mask,
                "head_dim_qk": c.head_dim_qk,
                "head_dim_v": c.head_dim_v,
                "flops": c.flops,
                "results": {
                    n: {
                        "tflops": r.tflops,
                        "error": r.error,
                        "timing": asdict(r.timing) if r.timing else None,
                    }
                    for n, r in c.results.items()
                },
            }
        )
    return json.dumps(out, indent=2)
