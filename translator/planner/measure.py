"""Build, verify and time planner candidates on the GPU (for `tl tune` and the planner benchmark).

Uses the runner (NVRTC compile, load, verify, CUDA-event timing) and the translator; imports them only when
called, so the planner itself stays GPU-free. `device_status()` says plainly what is missing.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tl_language import analyze
from translator.planner.candidates import Candidate
from translator.planner.cost import Shape
from translator.planner.fill import apply_candidate


@dataclass(slots=True)
class Measurement:
    candidate: Candidate
    text: str  # the TL with this candidate written in
    tflops: float | None = None
    median_ms: float | None = None
    verified: bool | None = None  # None: not run
    error: str | None = None  # why there is no number (translate, compile, verify failure)


def device_status() -> str | None:
    """None when a CUDA device, the runner and the pipeline are usable; else the reason, for the user."""
    try:
        from runner.launch import NoDeviceError, require_device
    except ImportError as e:
        return f"the runner is not available ({e})"
    try:
        import pipeline.build  # noqa: F401
    except ImportError as e:
        return f"the pipeline is not available ({e})"
    try:
        require_device()
    except NoDeviceError as e:
        return str(e) or "no CUDA device"
    except Exception as e:  # a broken driver reads like no device to the user
        return f"no usable CUDA device ({type(e).__name__}: {e})"
    return None


def measure(
    text: str,
    candidates: list[Candidate],
    shape: Shape,
    *,
    heads_kv: int | None = None,
    verify: bool = True,
    log: Callable[[str], None] | None = None,
) -> list[Measurement]:
    """Translate and compile every candidate (in parallel), then verify and time each on `shape`."""
    from pipeline.build import BuildError, Built, Translated, compile_all
    from runner.bench import BenchCase, bench_kernel, make_bench_inputs
    from runner.launch import load, require_device
    from runner.verify import Shape as RunShape
    from runner.verify import verify as run_verify
    from translator import TranslateError, translate

    log = log or (lambda _m: None)
    device_arch = require_device()
    out = [Measurement(c, apply_candidate(text, c)[0]) for c in candidates]
    ready: list[tuple[Measurement, Translated]] = []
    with tempfile.TemporaryDirectory(prefix="tl-tune-") as tmp:
        for i, m in enumerate(out):
            path = Path(tmp) / f"candidate_{i + 1}.tl"
            path.write_text(m.text, encoding="utf-8")
            try:
                t = translate(analyze(m.text), tl_path=str(path))
            except TranslateError as e:
                m.error = f"translate: {e}"
                continue
            ready.append(
                (
                    m,
                    Translated(
                        path=path,
                        cu_path=path.with_suffix(".cu"),
                        source=t.source,
                        spec=t.launch,
                        source_map=dict(t.source_map),
                        text=m.text,
                    ),
                )
            )
        log(f"compiling {len(ready)} candidate(s) through NVRTC ...")
        built = compile_all([t for _, t in ready], device_arch=device_arch)
    for (m, _), b in zip(ready, built, strict=True):
        if isinstance(b, BuildError):
            m.error = f"compile: {b.message}"
            continue
        assert isinstance(b, Built)
        loaded = load(b.compiled, b.spec)
        spec = b.spec
        kv = heads_kv or (max(1, shape.heads // spec.group) if spec.group else shape.heads)
        run_shape = RunShape(shape.batch, shape.heads, kv, shape.seqlen_q, shape.seqlen_k)
        if verify:
            # A ragged length (513) exercises the tail masking every tiling must get right.
            result = run_verify(loaded, RunShape(1, run_shape.heads, kv, 513, 513))
            m.verified = result.passed
            if not result.passed:
                m.error = (
                    "verification failed: " + "; ".join(f for c in result.cases for f in c.failures)[:200]
                )
                continue
        case = BenchCase.for_spec(spec, run_shape)
        inputs = make_bench_inputs(run_shape, spec.head_dim_qk, spec.head_dim_v, spec.dtype)
        r = bench_kernel(case, loaded, inputs)
        m.tflops = r.tflops
        m.median_ms = r.timing.median_ms if r.timing else None
        if r.error:
            m.error = f"bench: {r.error}"
        log(
            f"  #{m.candidate.rank}: {m.candidate.tiling.block_m}x{m.candidate.tiling.block_n} "
            f"→ {m.tflops if m.tflops is None else round(m.tflops, 1)} TFLOPS"
        )
    return out


def ranks(values: list[float]) -> list[float]:
    """1-based ranks, largest first; ties share their mean rank."""
    order = sorted(range(len(values)), key=lambda i: -values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: list[float], b: list[float]) -> float | None:
    """Spearman's rank correlation of two equally long samples (None with fewer than 2 or no spread)."""
    if len(a) != len(b) or len(a) < 2:
        return None
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    va = sum((x - ma) ** 2 for x in ra)
    vb = sum((y - mb) ** 2 for y in rb)
    if va == 0 or vb == 0:
        return None
    return cov / (va * vb) ** 0.5
