"""Verify every catalogue variant (examples/variants/*.tl) on the GPU, on both backends and both dtypes,
against the float32 evaluation of its own kernel IR, on odd shapes; print a table, write JSON.

    python3 benchmarks/verify_variants.py [--only NAME,...] [--json OUT.json] [--dtypes bf16,fp16]

Each example is rebuilt with its Target line set to sm_80 (mma.sync, run through PTX) and sm_90
(TMA + wgmma), and its Dtype line to each dtype; everything compiles in parallel first. Shapes cover
lengths 1, 17, 1000 and 4097, seqlen_q ≠ seqlen_k, GQA groups 2 and 7, and non-contiguous inputs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (B, H, Hkv, Sq, Sk, strided)
SHAPES = (
    (1, 2, 1, 1, 1, False),
    (2, 4, 2, 17, 17, False),
    (1, 7, 1, 1000, 1000, False),
    (1, 4, 2, 1000, 4097, False),
    (1, 2, 2, 4097, 4097, True),
)


def variant_text(text: str, target: str, dtype: str) -> str:
    text = re.sub(r"(?m)^Target .*$", f"Target {target}", text)
    return re.sub(r"(?m)^Dtype .*$", f"Dtype {dtype}", text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="comma-separated example names (default: all)")
    ap.add_argument("--json", default="", help="write the results here")
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--targets", default="sm_80,sm_90")
    args = ap.parse_args(argv)

    from pipeline.build import BuildError, translate_text
    from runner.compile import CompileError, CompileJob, compile_many
    from runner.launch import cuda_device_arch, load
    from runner.verify import Shape, verify

    device = cuda_device_arch()
    paths = sorted((ROOT / "examples" / "variants").glob("*.tl"))
    only = {n for n in args.only.split(",") if n}
    paths = [p for p in paths if not only or p.stem in only]
    built = []
    for p in paths:
        for target in args.targets.split(","):
            for dtype in args.dtypes.split(","):
                name = f"{p.stem}_{target}_{dtype}"
                try:
                    t = translate_text(variant_text(p.read_text(), target, dtype), Path(f"{name}.tl"))
                except BuildError as exc:
                    print(f"BUILD FAIL {name}: {exc.message} {[d.message for d in exc.diagnostics][:2]}")
                    built.append((p.stem, target, dtype, None, f"build: {exc.message}"))
                    continue
                built.append((p.stem, target, dtype, t, ""))
    jobs = [
        CompileJob(source=t.source, arch=t.spec.arch, name=f"{s}_{tg}_{dt}.cu", device_arch=device)
        for s, tg, dt, t, _ in built
        if t is not None
    ]
    start = time.perf_counter()
    compiled = iter(compile_many(jobs))
    print(f"compiled {len(jobs)} kernels in {time.perf_counter() - start:.0f} s", flush=True)
    rows = []
    for stem, target, dtype, t, why in built:
        if t is None:
            rows.append({"variant": stem, "target": target, "dtype": dtype, "passed": False, "error": why})
            continue
        c = next(compiled)
        if isinstance(c, CompileError):
            rows.append(
                {
                    "variant": stem,
                    "target": target,
                    "dtype": dtype,
                    "passed": False,
                    "error": f"compile: {str(c)[:300]}",
                }
            )
            print(f"COMPILE FAIL {stem} {target} {dtype}: {str(c)[:600]}", flush=True)
            continue
        loaded = load(c, t.spec)
        worst = {"rel_l2": 0.0, "max_abs": 0.0, "lse": 0.0}
        ok, failures = True, []
        for b, h, hkv, sq, sk, strided in SHAPES:
            try:
                r = verify(loaded, Shape(b, h, hkv, sq, sk), strided=strided, seed=sq + sk)
            except Exception as exc:  # a launch or reference error is a failed row, not a stopped sweep
                ok = False
                failures.append(f"{b},{h},{hkv},{sq},{sk}: {type(exc).__name__}: {exc}"[:300])
                continue
            for case in r.cases:
                worst["rel_l2"] = max(worst["rel_l2"], case.rel_l2)
                worst["max_abs"] = max(worst["max_abs"], case.max_abs)
                worst["lse"] = max(worst["lse"], case.lse_max_err)
            if not r.passed:
                ok = False
                failures.append(str(r)[:600])
        rows.append(
            {
                "variant": stem,
                "target": target,
                "dtype": dtype,
                "passed": ok,
                "worst": worst,
                "failures": failures,
                "shapes": [list(s) for s in SHAPES],
            }
        )
        print(
            f"{'PASS' if ok else 'FAIL'} {stem:28s} {target} {dtype} rel_l2<={worst['rel_l2']:.2e} "
            f"max_abs<={worst['max_abs']:.2e} lse<={worst['lse']:.2e}",
            flush=True,
        )
        for f in failures[:3]:
            print("   ", f.replace("\n", "\n    "), flush=True)
    import torch

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    passed = sum(r["passed"] for r in rows)
    print(
        f"\n{passed}/{len(rows)} variant builds verified on {gpu} ({len(SHAPES)} shapes each, normal and x8 "
        "inputs, NaN-poisoned outputs, every element)"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"gpu": gpu, "date": time.strftime("%Y-%m-%d"), "rows": rows}, indent=1)
        )
    return 0 if passed == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
