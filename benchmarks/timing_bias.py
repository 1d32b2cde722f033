"""How the benchmark's timing order and the GPU's power cap move the ratio to FA4 (GPU machine).

    python benchmarks/timing_bias.py order [--cases hd128,hd64,hd64-causal] [--seqlen 8192] [--reps 4]
    python benchmarks/timing_bias.py soak  [--cases ...] [--seqlen 8192] [--soak-s 2]

`order`: every candidate of `benchmarks/attention.py` (both TL paths, the SDPA backends, flex, FA4) on
one configuration, timed `--reps` times in two ways, alternately: `fixed`, three passes in one order (the
benchmark's timing before the balanced design), and `balanced`, `runner.bench.time_interleaved`'s
default. Prints tl-sm90/FA4 and tl-sm90/cuDNN per repetition with their mean and deviation.

`soak`: our sm_90 kernel and FA4 each run back to back for `--soak-s` seconds, twice, alternately, while
`nvidia-smi` samples the SM clock and board power every 20 ms. A kernel held at the power cap runs at the
clock the cap allows, so TFLOPS per GHz separates cycles from clocks. `--json` keeps the numbers.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

EXIT_NO_DEVICE = 3
CASE = re.compile(r"^hd(\d+)(-causal)?$")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=("order", "soak"))
    p.add_argument("--cases", default="hd128,hd64,hd64-causal", help="hdN or hdN-causal, comma-separated")
    p.add_argument("--seqlen", type=int, default=8192)
    p.add_argument("--reps", type=int, default=4, help="order: repetitions of each timing order")
    p.add_argument("--soak-s", type=float, default=2.0, help="soak: seconds per kernel and turn")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    args.case_list = []
    for name in args.cases.split(","):
        m = CASE.match(name.strip())
        if not m:
            p.error(f"--cases: {name!r} is not hdN or hdN-causal")
        args.case_list.append((int(m.group(1)), "causal" if m.group(2) else "none"))
    return args


def window_mean(lines: list[str], t0: float, t1: float) -> tuple[float, float]:
    """Mean (SM MHz, watts) of `nvidia-smi --format=csv,noheader,nounits` lines (timestamp, clocks.sm,
    power.draw; the timestamp in the machine's local time) stamped within [t0, t1]; NaN if none."""
    inside = []
    for line in lines:
        parts = [x.strip() for x in line.split(",")]
        try:
            stamp = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").astimezone(UTC).timestamp()
            if t0 <= stamp <= t1:
                inside.append((float(parts[1]), float(parts[2])))
        except (ValueError, IndexError):
            continue  # a header, a "[N/A]" or a line cut short by the kill
    if not inside:
        return float("nan"), float("nan")
    return statistics.mean(c for c, _ in inside), statistics.mean(w for _, w in inside)


class ClockLog:
    """`nvidia-smi` sampling the SM clock and board power into a file until `close`."""

    def __init__(self) -> None:
        self._file = tempfile.NamedTemporaryFile("w+", suffix=".csv")  # noqa: SIM115 (lives with the log)
        query = "timestamp,clocks.sm,power.draw"
        cmd = ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", "-lms", "20"]
        self._proc = subprocess.Popen(cmd, stdout=self._file, stderr=subprocess.DEVNULL)

    def close(self) -> list[str]:
        """Stop sampling; every line it wrote."""
        self._proc.terminate()
        self._proc.wait()
        lines = Path(self._file.name).read_text().splitlines()
        self._file.close()
        return lines


@contextmanager
def configuration(d: int, mask: str, seqlen: int, baselines: tuple[str, ...] | None):
    """(runs by name, FLOPs of one run) for one bf16 configuration: our verified kernels, then baselines."""
    import torch

    from pipeline.benchmark import prepare_baselines, sweep_shape
    from pipeline.build import BuildError, compile_all
    from pipeline.variants import bench_kernels
    from runner.baselines import BASELINES, default_scale
    from runner.bench import kernel_run, make_bench_inputs
    from runner.flops import attention_flops
    from runner.launch import load
    from runner.verify import verify

    shape = sweep_shape(seqlen, d)
    labelled = bench_kernels(d, "bf16", mask, "sm_90")
    built = compile_all([kc.translate() for _, kc in labelled], device_arch="sm_90")
    inputs = make_bench_inputs(shape, d, d, "bf16")
    runs: dict[str, Any] = {}
    for (label, _), b in zip(labelled, built, strict=True):
        if isinstance(b, BuildError):
            raise SystemExit(f"{label}: build failed ({b.stage}): {b.message}")
        loaded = load(b.compiled, b.spec)
        result = verify(loaded, shape)
        print(result, flush=True)
        if not result.passed:
            raise SystemExit(f"{label} failed verification: not timed")
        runs[label] = kernel_run(loaded, inputs)
    wanted = [b for b in BASELINES if baselines is None or b.name in baselines]
    baseline_runs, unavailable = prepare_baselines(wanted, inputs, mask, default_scale(d))
    runs.update(baseline_runs)
    for name, reason in unavailable.items():  # not installed or no such mask: said, and left out
        print(f"{name}: n/a ({reason})", flush=True)
    if "fa4" not in runs:
        raise SystemExit("timing_bias compares against FA4, which did not load (see above)")
    flops = attention_flops(shape.batch, shape.heads, seqlen, seqlen, d, d, mask=mask)
    try:
        yield runs, flops
    finally:
        del inputs, runs
        torch.cuda.empty_cache()


def order_mode(args: argparse.Namespace) -> dict[str, Any]:
    from pipeline.benchmark import BENCH_TIMING
    from runner.bench import time_interleaved

    out: dict[str, Any] = {}
    for d, mask in args.case_list:
        with configuration(d, mask, args.seqlen, None) as (runs, _):
            # the benchmark's timing before the balanced design: three passes in one order
            methods: dict[str, dict[str, Any]] = {
                "fixed": {"rounds": 3, "orders": [list(range(len(runs)))]},
                "balanced": {},
            }
            for rep in range(args.reps):
                for method, kw in methods.items():
                    timings = time_interleaved(runs, **BENCH_TIMING, **kw)
                    med = {n: t.median_ms for n, t in timings.items() if not isinstance(t, Exception)}
                    if "tl-sm90" not in med:
                        raise SystemExit(f"tl-sm90 could not be timed: {timings['tl-sm90']}")
                    ratios = {ref: med[ref] / med["tl-sm90"] for ref in ("fa4", "sdpa-cudnn") if ref in med}
                    out.setdefault(f"hd{d}-{mask}", {}).setdefault(method, []).append(ratios)
                    print(f"hd{d} {mask} rep {rep} {method}: {ratios}", flush=True)
    return out


def soak_mode(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Sustained runs; the clock and power of each window are read after the sampler stops (a running
    nvidia-smi may still hold its last lines)."""
    import torch

    clocks = ClockLog()
    windows: list[tuple[float, float]] = []

    rows = []
    for d, mask in args.case_list:
        with configuration(d, mask, args.seqlen, ("fa4",)) as (runs, flops):
            for turn in range(2):
                for name in ("tl-sm90", "fa4"):
                    fn, n = runs[name], 0
                    torch.cuda.synchronize()
                    t0 = time.time()
                    while time.time() - t0 < args.soak_s:
                        for _ in range(20):
                            fn(n)
                            n += 1
                        torch.cuda.synchronize()
                    t1 = time.time()
                    # the first 0.3 s are the clock's fall from idle boost to the cap
                    windows.append((t0 + 0.3, t1))
                    tf = flops * n / (t1 - t0) / 1e12
                    rows.append(
                        {
                            "case": f"hd{d}-{mask}",
                            "kernel": name,
                            "turn": turn,
                            "ms": (t1 - t0) / n * 1e3,
                            "tflops": tf,
                        }
                    )
                    print(rows[-1], flush=True)
    lines = clocks.close()
    for row, (t0, t1) in zip(rows, windows, strict=True):
        row["sm_mhz"], row["watts"] = window_mean(lines, t0, t1)
        row["tflops_per_ghz"] = row["tflops"] / row["sm_mhz"] * 1e3
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from runner.launch import NoDeviceError, require_device

    try:
        if require_device() != "sm_90":
            print("timing_bias: needs an sm_90 GPU (the Hopper kernel and FA4)")
            return EXIT_NO_DEVICE
    except NoDeviceError as exc:
        print(f"{exc}: timing_bias needs a GPU")
        return EXIT_NO_DEVICE
    import torch

    gpu = torch.cuda.get_device_name()
    head = f"{gpu}, bf16, seqlen {args.seqlen}, 16k tokens"
    if args.mode == "order":
        result: Any = order_mode(args)
        print(f"\n{head}: tl-sm90 / baseline per repetition")
        for case, by in result.items():
            for method, reps in by.items():
                for ref in ("fa4", "sdpa-cudnn"):
                    xs = [r[ref] for r in reps if ref in r]
                    if len(xs) >= 2:
                        print(
                            f"{case:14s} {method:9s} /{ref:10s} {' '.join(f'{x:.3f}' for x in xs)}  "
                            f"mean {statistics.mean(xs):.3f} sd {statistics.stdev(xs):.3f}"
                        )
    else:
        result = soak_mode(args)
        print(f"\n{head}: sustained runs")
        print(
            f"{'case':14s} {'kernel':8s} {'turn':>4s} {'ms':>7s} {'TFLOPS':>7s} {'SM MHz':>7s} {'W':>5s} "
            f"{'TFLOPS/GHz':>10s}"
        )
        for r in result:
            print(
                f"{r['case']:14s} {r['kernel']:8s} {r['turn']:4d} {r['ms']:7.3f} {r['tflops']:7.0f} "
                f"{r['sm_mhz']:7.0f} {r['watts']:5.0f} {r['tflops_per_ghz']:10.0f}"
            )
    if args.json:
        args.json.write_text(
            json.dumps({"gpu": gpu, "mode": args.mode, "seqlen": args.seqlen, "result": result})
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
