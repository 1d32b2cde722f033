"""One device run of the Hopper backend: compile every variant, check the SASS, verify, time, print a table.

    python3 -m benchmarks.sm90_device_check [--only NAME,...] [--no-bench] [--seqlens 4096,16384]

(from the repository root; `bash benchmarks/run_on_device.sh sweep ARGS` runs it on the GPU machine). The
variants are the A/B catalogue of `benchmarks/sm90_variants.py`.

Writes everything under $OUT (default ./sm90-out): each variant's .cu, its ptxas report, the SASS of the
first kernel, `results.json`, and prints the table last. Compiles run in parallel processes (NVRTC is
single-threaded). Verification and timing run in a worker process that the parent restarts when a kernel
hangs (a bad mbarrier phase waits forever) or faults (which poisons the CUDA context), so one broken
variant costs only itself. Verification follows the runner's: NaN-poisoned outputs, every element compared
with a float32 reference (runner.verify.compare, the per-dtype thresholds in runner.verify.TOLERANCES).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.sm90_variants import VARIANTS, Variant, tl_text

# (batch, heads, heads_kv, seqlen_q, seqlen_k, strided): tails, Sq ≠ Sk both ways, GQA 4, MQA, one token.
VERIFY_SHAPES: tuple[tuple[int, int, int, int, int, bool], ...] = (
    (2, 4, 4, 1000, 1000, False),
    (1, 4, 4, 1, 1, False),
    (2, 8, 2, 17, 4097, False),
    (1, 8, 1, 4097, 300, False),
    (2, 4, 4, 384, 384, True),
)
BENCH_SEQLENS = (4096, 16384)
TOKENS = 16384
HANG_SECONDS = 60.0


def _out_dir() -> Path:
    out = Path(os.environ.get("OUT") or "sm90-out")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _cubin_dir() -> Path:
    """Cubins stay out of $OUT (a few MB each); only the SASS of one comes back."""
    path = Path(os.environ.get("TMPDIR", "/tmp")) / "sm90-cubins"
    path.mkdir(parents=True, exist_ok=True)
    return path


def translate(v: Variant) -> tuple[str, Any, Any]:
    from tl_language import analyze
    from translator.backends.sm90 import emit_sm90
    from translator.plan import make_plan

    text = tl_text(v)
    analysis = analyze(text)
    plan = make_plan(analysis.model, text)
    source, launch, _ = emit_sm90(
        plan,
        tl_file=f"{v.name}.tl",
        line_directives=not v.patches,
        overlap=v.overlap,
        pingpong=v.pingpong,
        persistent=v.persistent,
    )
    for pattern, replacement in v.patches:
        source, n = re.subn(pattern, replacement, source)
        if not n:
            raise ValueError(f"{v.name}: patch does not apply: {pattern!r}")
    return source, launch, plan


def _compile(name: str, source: str) -> tuple[str, bytes | None, str, float]:
    from runner.compile import CompileError, compile_source

    start = time.perf_counter()
    try:
        ck = compile_source(
            source, arch="sm_90a", name=f"{name}.cu", options={"ptxas_options": ["-v"]}, use_cache=False
        )
        return name, ck.code, ck.log, time.perf_counter() - start
    except CompileError as exc:
        return name, None, exc.log, time.perf_counter() - start


def _sass_report(cubin: Path, out: Path) -> dict[str, Any]:
    from runner.sass import SassError, count, disassemble

    code = cubin.read_bytes()
    try:
        sass = disassemble(code)
        usage = disassemble(code, resource_usage=True)
    except SassError as exc:
        return {"error": str(exc)}
    (out / f"{cubin.stem}.sass").write_text(sass)
    ops = ("HGMMA", "UTMALDG", "UTMASTG", "USETMAXREG", "STSM", "LDL", "STL", "HMMA", "SYNCS")
    return {"counts": count(sass, ops), "resource_usage": usage.strip()}


# ---- the worker: verification and timing on the GPU ------------------------------------------------------


def _load(name: str, cubin: bytes, spec_json: str) -> Any:
    from runner.abi import LaunchSpec
    from runner.compile import CompiledKernel
    from runner.launch import load

    spec = LaunchSpec.from_json(spec_json)
    ck = CompiledKernel(
        code=cubin,
        kind="cubin",
        target="sm_90a",
        arch="sm_90a",
        name=f"{name}.cu",
        log="",
        seconds=0.0,
        cached=False,
        key=name,
    )
    return load(ck, spec)


def _verify(loaded: Any, block_n: int, window: tuple[int, int]) -> list[dict[str, Any]]:
    import math

    import torch

    from runner.launch import launch, torch_dtype
    from runner.reference import attention_reference
    from runner.tma import attention_tensor_maps
    from runner.verify import INPUT_SCALES, TOLERANCES, Shape, compare, make_inputs

    spec = loaded.spec
    dtype = torch_dtype(spec.dtype)
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev)
    gen.manual_seed(0)
    rows = []
    for b, h, hkv, sq, sk, strided in VERIFY_SHAPES:
        shape = Shape(batch=b, heads=h, heads_kv=hkv, seqlen_q=sq, seqlen_k=sk)
        for label, factor in INPUT_SCALES:
            q, k, v = make_inputs(
                shape, spec.head_dim_qk, spec.head_dim_v, dtype, dev, strided=strided, generator=gen
            )
            if factor != 1.0:
                if strided:  # scale in place: keep the strided views
                    q.mul_(factor)
                    k.mul_(factor)
                else:
                    q, k = (q * factor).to(dtype), (k * factor).to(dtype)
            o = torch.full((b, sq, h, spec.head_dim_v), math.nan, dtype=dtype, device=dev)
            lse = torch.full((b, h, sq), math.nan, dtype=torch.float32, device=dev)
            maps = attention_tensor_maps(q, k, v, o, block_m=spec.block_m, block_n=block_n)
            launch(loaded, q, k, v, o, lse, window=window, tensor_maps=maps)
            torch.cuda.synchronize()
            ref_o, ref_lse = attention_reference(q, k, v, mask=spec.mask, window=window)
            c = compare(o, lse, ref_o, ref_lse, TOLERANCES[spec.dtype], label)
            rows.append(
                {
                    "shape": f"{b}x{h}/{hkv}x{sq}x{sk}{' strided' if strided else ''}",
                    "inputs": label,
                    "rel_l2": c.rel_l2,
                    "max_abs": c.max_abs,
                    "nonfinite": c.nonfinite,
                    "lse_bad": c.lse_bad,
                    "passed": c.passed,
                    "failures": c.failures,
                }
            )
    return rows


def _bench(loaded: Any, block_n: int, seqlen: int, baselines: bool) -> dict[str, float | None]:
    from runner.baselines import BASELINES, default_scale
    from runner.bench import BenchCase, bench_callable, make_bench_inputs
    from runner.launch import launch
    from runner.tma import attention_tensor_maps
    from runner.verify import Shape

    spec = loaded.spec
    heads = 2048 // spec.head_dim_qk
    shape = Shape(batch=TOKENS // seqlen, heads=heads, heads_kv=heads, seqlen_q=seqlen, seqlen_k=seqlen)
    inputs = make_bench_inputs(shape, spec.head_dim_qk, spec.head_dim_v, spec.dtype)
    case = BenchCase.for_spec(spec, shape)
    maps = [
        attention_tensor_maps(q, k, v, o, block_m=spec.block_m, block_n=block_n)
        for q, k, v, o, _ in inputs.sets
    ]

    def ours(i: int) -> None:
        q, k, v, o, lse = inputs[i]
        launch(loaded, q, k, v, o, lse, tensor_maps=maps[i % len(maps)])

    timing = {"warmup_s": 0.1, "target_s": 0.3, "min_runs": 10}
    out: dict[str, float | None] = {"ours": bench_callable(case, "ours", ours, **timing).tflops}
    if baselines:
        scale = default_scale(spec.head_dim_qk)
        for b in BASELINES:
            if b.name not in ("sdpa-cudnn", "sdpa-flash", "fa4"):
                continue
            try:
                run = b.prepare(inputs, spec.mask, scale)
            except Exception:  # not installed (fa4) or the backend rejects the configuration
                out[b.name] = None
                continue
            out[b.name] = bench_callable(case, b.name, run, **timing).tflops
    return out


def _worker(tasks: Any, results: Any) -> None:
    """Runs (kind, name, payload) tasks in order and reports each; exits on the first CUDA error."""
    while True:
        task = tasks.get()
        if task is None:
            return
        kind, name, payload = task
        results.put(("start", name, kind))
        try:
            loaded = _load(name, payload["cubin"], payload["spec"])
            if kind == "verify":
                res: Any = _verify(loaded, payload["block_n"], tuple(payload["window"]))
            else:
                res = _bench(loaded, payload["block_n"], payload["seqlen"], payload["baselines"])
            results.put(("done", name, (kind, payload.get("seqlen"), res)))
        except Exception as exc:  # a fault poisons the context: report and let the parent restart us
            results.put(("error", name, (kind, payload.get("seqlen"), f"{type(exc).__name__}: {exc}")))
            return


def _run_tasks(tasks: list[tuple[str, str, dict[str, Any]]], log: Any) -> list[tuple[str, Any]]:
    """Run tasks in a worker process, restarting it after a hang or an error; returns (name, outcome)."""
    ctx = mp.get_context("spawn")
    pending = list(tasks)
    outcomes: list[tuple[str, Any]] = []
    while pending:
        tq, rq = ctx.Queue(), ctx.Queue()
        proc = ctx.Process(target=_worker, args=(tq, rq), daemon=True)
        proc.start()
        for t in pending:
            tq.put(t)
        tq.put(None)
        started: str | None = None
        done = 0
        while done < len(pending):
            try:
                status, name, payload = rq.get(timeout=HANG_SECONDS)
            except queue.Empty:
                outcomes.append((started or "?", ("hang", f"no progress in {HANG_SECONDS:.0f} s")))
                log(f"  {started}: HANG")
                done += 1
                break
            if status == "start":
                started = name
                continue
            outcomes.append((name, (status, payload)))
            log(f"  {name}: {status} {str(payload)[:300]}")
            done += 1
            if status == "error":
                break
        proc.kill()
        proc.join(5)
        pending = pending[done:]
    return outcomes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", default="", help="comma-separated variant names")
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--seqlens", default=",".join(map(str, BENCH_SEQLENS)), help="benchmark seqlens")
    args = ap.parse_args(argv)
    out = _out_dir()
    with open(out / "log.txt", "a") as logf:

        def log(msg: str) -> None:
            sys.stdout.write(msg + "\n")
            sys.stdout.flush()
            logf.write(msg + "\n")
            logf.flush()

        return _main(args, out, log)


def _main(args: argparse.Namespace, out: Path, log: Any) -> int:

    variants = [v for v in VARIANTS if not args.only or v.name in args.only.split(",")]
    built: dict[str, tuple[str, Any, Any]] = {}
    for v in variants:
        try:
            built[v.name] = translate(v)
            (out / f"{v.name}.cu").write_text(built[v.name][0])
        except Exception as exc:
            log(f"translate {v.name}: {exc}")
    t0 = time.perf_counter()
    cubins: dict[str, bytes] = {}
    report: dict[str, Any] = {"compile": {}, "verify": {}, "bench": {}, "sass": {}}
    with ProcessPoolExecutor(max_workers=min(16, os.cpu_count() or 2)) as pool:
        for name, code, clog, secs in pool.map(_compile, built, [b[0] for b in built.values()]):
            (out / f"{name}.ptxas.txt").write_text(clog)
            regs = re.search(r"Used (\d+) registers", clog)
            spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", clog)
            report["compile"][name] = {
                "ok": code is not None,
                "seconds": round(secs, 1),
                "registers": int(regs.group(1)) if regs else None,
                "spills": spill.group(0) if spill else None,
                "warnings": [ln for ln in clog.splitlines() if "warning" in ln.lower()][:5],
            }
            log(
                f"compile {name}: {'ok' if code else 'FAILED'} {secs:.0f}s "
                f"{report['compile'][name]['registers']} regs {report['compile'][name]['spills']}"
            )
            if code is None:
                log(clog[:3000])
            else:
                cubins[name] = code
                (_cubin_dir() / f"{name}.cubin").write_bytes(code)
    log(f"compiled {len(cubins)}/{len(built)} in {time.perf_counter() - t0:.0f}s")
    first = next(iter(cubins), None)
    if first:
        report["sass"][first] = _sass_report(_cubin_dir() / f"{first}.cubin", out)
        log(f"SASS {first}: {report['sass'][first].get('counts')}")

    by_name = {v.name: v for v in variants}

    def payload(name: str, **extra: Any) -> dict[str, Any]:
        _, launch, plan = built[name]
        return {
            "cubin": cubins[name],
            "spec": launch.to_json(),
            "block_n": plan.block_n,
            "window": list(plan.window),
            **extra,
        }

    vt = [("verify", n, payload(n)) for n in cubins]
    for name, (status, res) in _run_tasks(vt, log):
        if status == "done":
            rows = res[2]
            report["verify"][name] = {
                "passed": all(r["passed"] for r in rows),
                "worst_rel_l2": max(r["rel_l2"] for r in rows),
                "rows": rows,
            }
        else:
            report["verify"][name] = {"passed": False, "error": res if isinstance(res, str) else res[2]}
    (out / "results.json").write_text(json.dumps(report, indent=1, default=str))

    if not args.no_bench:
        # One row per (config, seqlen): every passing variant of the config, baselines once per row.
        bt = []
        seen: set[tuple[int, str, str, int]] = set()
        for name in cubins:
            if not report["verify"].get(name, {}).get("passed") or by_name[name].mask_kind == "window":
                continue
            v = by_name[name]
            for s in (int(x) for x in args.seqlens.split(",")):
                key = (v.d_qk, v.mask, v.dtype, s)
                bt.append(("bench", name, payload(name, seqlen=s, baselines=key not in seen)))
                seen.add(key)
        for name, (status, res) in _run_tasks(bt, log):
            if status == "done":
                report["bench"].setdefault(name, {})[str(res[1])] = res[2]
            else:
                report["bench"].setdefault(name, {})["error"] = str(res)
        (out / "results.json").write_text(json.dumps(report, indent=1, default=str))
    _table(report, by_name, log)
    return 0


def _table(report: dict[str, Any], by_name: dict[str, Variant], log: Any) -> None:
    base: dict[tuple[int, str, str, str], dict[str, Any]] = {}
    for name, per in report["bench"].items():
        v = by_name[name]
        for s, r in per.items():
            if isinstance(r, dict):
                for k in ("sdpa-cudnn", "sdpa-flash", "fa4"):
                    if r.get(k) is not None:
                        base.setdefault((v.d_qk, v.mask, v.dtype, s), {})[k] = r[k]
    log("")
    log(
        f"{'variant':22s} {'verify':6s} {'worst relL2':>11s} {'regs':>4s} {'seqlen':>6s} {'TFLOPS':>7s} "
        f"{'cuDNN':>6s} {'FA2':>6s} {'FA4':>6s} {'/cuDNN':>6s} {'/FA2':>5s} {'/FA4':>5s}"
    )
    for name, v in by_name.items():
        ver = report["verify"].get(name, {})
        comp = report["compile"].get(name, {})
        ok = "pass" if ver.get("passed") else ("FAIL" if ver else ("nocomp" if not comp.get("ok") else "-"))
        rel = ver.get("worst_rel_l2")
        per = report["bench"].get(name, {}) or {"": {}}
        for s, r in per.items():
            r = r if isinstance(r, dict) else {}
            b = base.get((v.d_qk, v.mask, v.dtype, s), {})
            t, cd, fa, f4 = r.get("ours"), b.get("sdpa-cudnn"), b.get("sdpa-flash"), b.get("fa4")

            def f(x: float | None, fmt: str = "6.0f") -> str:
                return format(x, fmt) if isinstance(x, float) else "-"

            log(
                f"{name:22s} {ok:6s} {f(rel, '11.2e')} {comp.get('registers') or '-':>4} {s:>6s} "
                f"{f(t, '7.0f')} "
                f"{f(cd)} {f(fa)} {f(f4)} {f(t / cd if t and cd else None, '6.2f')} "
                f"{f(t / fa if t and fa else None, '5.2f')} {f(t / f4 if t and f4 else None, '5.2f')}"
            )


if __name__ == "__main__":
    sys.exit(main())
