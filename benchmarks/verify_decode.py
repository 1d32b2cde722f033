"""Verify the inference examples (examples/inference/*.tl) and variants of them on the GPU against the
reference evaluated from their own kernel IR; print a table, write JSON.

    python3 benchmarks/verify_decode.py [--targets sm_80,sm_90] [--dtypes bf16,fp16] [--json OUT.json]

Each kernel is rebuilt with its Target set to sm_80 (run through PTX) and sm_90, and its Dtype to each
dtype; everything compiles in parallel first. Beside the three examples: the paged decode with 16- and
256-token pages, with ALiBi (one query head per tile, `pack_gqa = 0`, a per-head side tensor) and the
varlen prefill with BN 128 (the tile benchmarks/varlen.py times on sm_90) and with an extra
sliding-window mask expression, so the variants' regions run in the inference skeletons (on sm_90 the
packed prefill is the TMA + wgmma kernel). Cases: ragged batches with empty sequences, lengths around
the page and block sizes, pages in random order, NaN everywhere the kernel must not read, NaN-poisoned
outputs, GQA groups 4 and 7, automatic and forced split counts, normal and ×8 inputs, every element.
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

ALIBI = (
    "Allocate slopes in global (heads)   # ALiBi slope per query head\n",
    "    Compute Add S, slopes[head_idx] * (kv_idx - q_idx) and get new S\n",
)


def derived(name: str, text: str) -> str:
    if name.startswith("paged_decode_page"):
        return re.sub(r"(?m)^Param page_size = \d+", f"Param page_size = {name.rsplit('page', 1)[1]}", text)
    if name == "paged_decode_alibi":
        text = re.sub(r"(?m)^Param pack_gqa = 1", "Param pack_gqa = 0", text)
        text = text.replace("\nCopy Q (BM, d)", "\n" + ALIBI[0] + "\nCopy Q (BM, d)", 1)
        return text.replace("    Compute Softmax S", ALIBI[1] + "    Compute Softmax S", 1)
    if name == "varlen_prefill_bn128":  # the tile benchmarks/varlen.py times on sm_90
        return re.sub(r"(?m)^Param BN = \d+", "Param BN = 128", text)
    if name == "varlen_prefill_window":
        return text.replace(
            "    Compute Softmax S", "    Compute Mask S, kv_idx >= q_idx - 200\n    Compute Softmax S", 1
        )
    return text


KERNELS = {  # name → the example it derives from
    "paged_decode": "paged_decode",
    "paged_decode_page16": "paged_decode",
    "paged_decode_page256": "paged_decode",
    "paged_decode_alibi": "paged_decode",
    "spec_decode": "spec_decode",
    "varlen_prefill": "varlen_prefill",
    "varlen_prefill_bn128": "varlen_prefill",
    "varlen_prefill_window": "varlen_prefill",
}


def cases(name: str) -> list:
    from runner.decode_verify import InferenceCase as C

    ragged = (0, 1, 63, 64, 65, 1000, 4097)
    if name.startswith("paged_decode"):
        out = [
            C(32, 8, ragged),
            C(32, 8, ragged, num_splits=1),
            C(32, 8, ragged, num_splits=7),
            C(7, 1, (17, 300, 0)),
            C(32, 8, (130, 2000), seqlen_q=(3,)),
            C(32, 8, (131072,)),  # the benchmark's long cache: dozens of splits
        ]
        return out if name != "paged_decode_alibi" else out[:2] + out[3:5]
    if name == "spec_decode":
        return [
            C(32, 8, (24, 100, 2049, 5000), seqlen_q=(1,)),
            C(32, 8, (24, 100, 2049, 5000), seqlen_q=(5,), num_splits=3),
            C(32, 8, (3, 0, 700), seqlen_q=(5,)),  # rows that see no key: O = 0, LSE = +inf
            C(14, 2, (40, 4097), seqlen_q=(24,)),
        ]
    lens = (1, 0, 17, 300, 1000, 129)
    return [
        C(4, 2, lens, seqlen_q=lens),
        C(7, 1, (129, 64, 4097), seqlen_q=(129, 64, 4097)),
        C(8, 2, (300, 5, 1000, 77), seqlen_q=(100, 5, 999, 0)),  # fewer queries than keys (bottom-right)
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="comma-separated kernel names (default: all)")
    ap.add_argument("--targets", default="sm_80,sm_90")
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)

    import torch

    from pipeline.build import translate_text
    from runner.compile import CompileError, CompileJob, compile_many
    from runner.decode_verify import verify_inference
    from runner.launch import cuda_device_arch, load

    device = cuda_device_arch()
    only = {n for n in args.only.split(",") if n}
    builds = []
    for name, example in KERNELS.items():
        if only and name not in only:
            continue
        base = derived(name, (ROOT / "examples" / "inference" / f"{example}.tl").read_text())
        for target in args.targets.split(","):
            for dtype in args.dtypes.split(","):
                text = re.sub(r"(?m)^Target .*$", f"Target {target}", base)
                text = re.sub(r"(?m)^Dtype .*$", f"Dtype {dtype}", text)
                builds.append(
                    (name, target, dtype, translate_text(text, Path(f"{name}_{target}_{dtype}.tl")))
                )
    start = time.perf_counter()
    jobs = [CompileJob(source=t.source, arch=t.spec.arch, name=f"{n}_{tg}_{dt}.cu", device_arch=device)
            for n, tg, dt, t in builds]  # fmt: skip
    compiled = compile_many(jobs)
    print(f"compiled {len(jobs)} kernels in {time.perf_counter() - start:.0f} s", flush=True)
    rows = []
    for (name, target, dtype, t), c in zip(builds, compiled, strict=True):
        row = {"kernel": name, "target": target, "dtype": dtype, "passed": False, "failures": []}
        rows.append(row)
        if isinstance(c, CompileError):
            row["failures"].append(f"compile: {str(c)[:600]}")
            print(f"COMPILE FAIL {name} {target} {dtype}: {str(c)[:600]}", flush=True)
            continue
        loaded = load(c, t.spec)
        worst = {"rel_l2": 0.0, "max_abs": 0.0, "lse": 0.0}
        for i, case in enumerate(cases(name)):
            try:
                r = verify_inference(loaded, case, seed=i + 1)
            except Exception as exc:  # a launch or reference error is a failed row, not a stopped sweep
                row["failures"].append(f"{case}: {type(exc).__name__}: {exc}"[:400])
                continue
            for cr in r.cases:
                worst["rel_l2"] = max(worst["rel_l2"], cr.rel_l2)
                worst["max_abs"] = max(worst["max_abs"], cr.max_abs)
                worst["lse"] = max(worst["lse"], cr.lse_max_err)
            if not r.passed:
                row["failures"].append(str(r)[:700])
        row["passed"] = not row["failures"]
        row["worst"] = worst
        row["cases"] = [str(c) for c in cases(name)]
        print(
            f"{'PASS' if row['passed'] else 'FAIL'} {name:24s} {target} {dtype} "
            f"rel_l2<={worst['rel_l2']:.2e} max_abs<={worst['max_abs']:.2e} lse<={worst['lse']:.2e}",
            flush=True,
        )
        for f in row["failures"][:2]:
            print("   ", f.replace("\n", "\n    "), flush=True)
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    passed = sum(r["passed"] for r in rows)
    print(f"\n{passed}/{len(rows)} inference builds verified on {gpu}")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"gpu": gpu, "date": time.strftime("%Y-%m-%d"), "rows": rows}, indent=1)
        )
    return 0 if passed == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
