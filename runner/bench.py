"""Time attention kernels and baselines with CUDA events.

Method: inputs rotate over several buffer sets whose total size is at least twice the L2 cache, so no run
reads the previous run's data from L2; warm-up runs until `warmup_s` seconds have passed (clocks ramp up,
the driver JIT and autotuners finish); then each run is timed by its own pair of CUDA events on the
current stream and we report the median with the 10th–90th percentile spread. All candidates of one
configuration are timed in the same process, one after another, on the same inputs.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runner.abi import LaunchSpec
from runner.flops import attention_flops, tflops
from runner.launch import LoadedKernel, launch, torch_dtype
from runner.verify import Shape


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p10_ms: float
    p90_ms: float
    runs: int

    @property
    def spread(self) -> float:
        """(p90 − p10) / median: how noisy the runs were."""
        return (self.p90_ms - self.p10_ms) / self.median_ms if self.median_ms > 0 else math.nan


def time_runs(fn: Callable[[int], Any], **kw: Any) -> Timing:
    """Time `fn(i)` (i = run index, for rotating inputs) with CUDA events; median of many runs
    (`timed_samples` takes the keywords: warm-up and target seconds, run-count bounds)."""
    return summarize(timed_samples(fn, **kw))


def summarize(times: list[float]) -> Timing:
    times = sorted(times)
    q = statistics.quantiles(times, n=10) if len(times) >= 2 else [times[0]] * 9
    return Timing(median_ms=statistics.median(times), p10_ms=q[0], p90_ms=q[-1], runs=len(times))


def balanced_orders(n: int) -> list[list[int]]:
    """A Williams design: orders of 0..n-1 in which every candidate comes right after every other one
    equally often (n orders for even n, 2n for odd n, where each order is followed by its reverse)."""
    if n <= 1:
        return [list(range(n))]
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:
        first.append(lo)
        lo += 1
        if len(first) < n:
            first.append(hi)
            hi -= 1
    orders = []
    for r in range(n):
        row = [(x + r) % n for x in first]
        orders.append(row)
        if n % 2:
            orders.append(row[::-1])
    return orders


def time_interleaved(
    fns: dict[str, Callable[[int], Any]],
    *,
    rounds: int | None = None,
    target_s: float = 1.0,
    orders: list[list[int]] | None = None,
    **kw: Any,
) -> dict[str, Timing | Exception]:
    """Time every candidate in `rounds` passes, one after another within each pass, and pool each one's runs.

    On the H200 the same kernel timed right after another one measured up to 5% apart from its twin timed
    later in the same process (clocks and power drift over a configuration's seconds of timing); spreading
    every candidate over the whole window turns that drift into spread instead of a bias. The H200 runs
    attention at its 700 W power cap, and a kernel timed right after a light one (a slow baseline) starts
    at boosted clocks: with one fixed order FA4, always timed after the light baselines, gained 3-5% on
    our kernel. So the passes follow `balanced_orders`, where every candidate follows every other one
    equally often; `rounds=None` runs one whole design (n passes for n candidates, 2n when n is odd).
    `orders` (indices into `fns`, cycled) replaces the design: `benchmarks/timing_bias.py` times the fixed
    order `[list(range(n))]` beside it."""
    names = list(fns)
    orders = orders or balanced_orders(len(names))
    rounds = rounds or len(orders)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    failed: dict[str, Exception] = {}
    for r in range(rounds):
        for name in (names[i] for i in orders[r % len(orders)]):
            if name in failed:
                continue
            try:
                samples[name] += timed_samples(fns[name], target_s=target_s / rounds, **kw)
            except Exception as exc:  # a candidate that cannot run is reported, the others go on
                failed[name] = exc
    return {name: failed.get(name) or summarize(samples[name]) for name in fns}


def timed_samples(
    fn: Callable[[int], Any],
    *,
    warmup_s: float = 0.25,
    target_s: float = 1.0,
    min_runs: int = 20,
    max_runs: int = 500,
) -> list[float]:
    """Milliseconds of each timed run of `fn(i)` after a warm-up by time."""
    import torch

    # Warm-up by time, and a first estimate of one run's cost.
    torch.cuda.synchronize()
    start, n = time.perf_counter(), 0
    while True:
        fn(n)
        n += 1
        if n % 4 == 0:
            torch.cuda.synchronize()
            if time.perf_counter() - start >= warmup_s:
                break
    per_run = (time.perf_counter() - start) / n
    runs = int(min(max_runs, max(min_runs, target_s / max(per_run, 1e-6))))
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(runs)
    ]
    for i, (a, b) in enumerate(events):
        a.record()
        fn(n + i)
        b.record()
    torch.cuda.synchronize()
    return [a.elapsed_time(b) for a, b in events]


def buffer_sets(set_bytes: int, *, l2_bytes: int | None = None, lo: int = 2, hi: int = 8) -> int:
    """How many input sets to rotate through so that together they exceed twice the L2 cache."""
    if l2_bytes is None:
        import torch

        l2_bytes = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    return max(lo, min(hi, math.ceil(2 * l2_bytes / max(set_bytes, 1))))


@dataclass
class Inputs:
    """Rotating (q, k, v, o, lse) sets in the (batch, seqlen, heads, dim) layout."""

    sets: list[tuple[Any, Any, Any, Any, Any]]

    def __getitem__(self, i: int) -> tuple[Any, Any, Any, Any, Any]:
        return self.sets[i % len(self.sets)]


def make_bench_inputs(shape: Shape, d_qk: int, d_v: int, dtype: str, *, seed: int = 0) -> Inputs:
    import torch

    dt = torch_dtype(dtype)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    elem = torch.empty((), dtype=dt).element_size()
    set_bytes = elem * (
        shape.batch
        * (shape.seqlen_q * shape.heads * (d_qk + d_v) + shape.seqlen_k * shape.heads_kv * (d_qk + d_v))
    )
    sets = []
    for _ in range(buffer_sets(set_bytes)):
        q = torch.randn(shape.batch, shape.seqlen_q, shape.heads, d_qk, device="cuda", generator=gen).to(dt)
        k = torch.randn(shape.batch, shape.seqlen_k, shape.heads_kv, d_qk, device="cuda", generator=gen).to(
            dt
        )
        v = torch.randn(shape.batch, shape.seqlen_k, shape.heads_kv, d_v, device="cuda", generator=gen).to(dt)
        o = torch.empty(shape.batch, shape.seqlen_q, shape.heads, d_v, device="cuda", dtype=dt)
        lse = torch.empty(shape.batch, shape.heads, shape.seqlen_q, device="cuda", dtype=torch.float32)
        sets.append((q, k, v, o, lse))
    return Inputs(sets)


@dataclass
class BenchResult:
    name: str
    tflops: float | None = None
    timing: Timing | None = None
    error: str | None = None  # why this candidate is n/a (unsupported config, failed verification, ...)

    @property
    def ok(self) -> bool:
        return self.tflops is not None


@dataclass
class BenchCase:
    shape: Shape
    head_dim_qk: int
    head_dim_v: int
    dtype: str
    mask: str
    results: dict[str, BenchResult] = field(default_factory=dict)

    @classmethod
    def for_spec(cls, spec: LaunchSpec, shape: Shape) -> BenchCase:
        """The case a kernel's launch description runs on `shape` (its head dims, dtype and mask)."""
        return cls(
            shape=shape,
            head_dim_qk=spec.head_dim_qk,
            head_dim_v=spec.head_dim_v,
            dtype=spec.dtype,
            mask=spec.mask,
        )

    @property
    def flops(self) -> float:
        s = self.shape
        return attention_flops(
            s.batch, s.heads, s.seqlen_q, s.seqlen_k, self.head_dim_qk, self.head_dim_v, mask=self.mask
        )

    def label(self) -> str:
        d = (
            f"{self.head_dim_qk}"
            if self.head_dim_qk == self.head_dim_v
            else f"{self.head_dim_qk}/{self.head_dim_v}"
        )
        return (
            f"{self.dtype} hd{d} {self.mask} B{self.shape.batch} H{self.shape.heads} S{self.shape.seqlen_q}"
        )


def bench_callable(case: BenchCase, name: str, fn: Callable[[int], Any], **timing_kw: Any) -> BenchResult:
    try:
        timing: Timing | Exception = time_runs(fn, **timing_kw)
    except Exception as exc:  # a baseline that cannot run this config is n/a, not a crash
        timing = exc
    return result_of(case, name, timing)


def result_of(case: BenchCase, name: str, timing: Timing | Exception) -> BenchResult:
    if isinstance(timing, Exception):
        return BenchResult(name=name, error=_short(timing))
    return BenchResult(name=name, tflops=tflops(case.flops, timing.median_ms / 1e3), timing=timing)


def kernel_run(loaded: LoadedKernel, inputs: Inputs) -> Callable[[int], None]:
    """`run(i)`: one launch of `loaded` on the i-th rotating input set."""

    def run(i: int) -> None:
        q, k, v, o, lse = inputs[i]
        launch(loaded, q, k, v, o, lse)

    return run


def bench_kernel(case: BenchCase, loaded: LoadedKernel, inputs: Inputs, **timing_kw: Any) -> BenchResult:
    return bench_callable(case, loaded.name, kernel_run(loaded, inputs), **timing_kw)


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return text[0][:160] if text else type(exc).__name__
