"""What `Param fma_exps` (or another Param) costs in instructions: the static SASS of a catalogue variant
built with several values, counted by opcode (no GPU needed: NVRTC and nvdisasm from the `sass` extra).

    python3 benchmarks/sass_exp_split.py [--variant softcap] [--values 0,2,8]
    python3 benchmarks/sass_exp_split.py --param fast_tanh --values 0,1

Each moved exp2 trades one MUFU for the polynomial's instructions: the table's last column is that
trade, (total(v) − total(0)) / (MUFU(0) − MUFU(v)), the number `translator/planner/cost.py` calls
EXP2_FMA_ISSUE; instructions per MUFU-counted score at 0 check its LOOP_ISSUE.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OPS = ("MUFU", "FFMA", "FMUL", "FADD", "FMNMX", "FSEL", "FSETP", "LEA", "F2FP", "HGMMA")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variant", default="softcap")
    ap.add_argument("--values", default="0,2,8")
    ap.add_argument("--param", default="fma_exps")
    args = ap.parse_args(argv)

    from benchmarks.variant_cases import with_param
    from pipeline.build import translate_text
    from runner.compile import CompileError, CompileJob, compile_many
    from runner.sass import base_opcode, disassemble, opcodes

    tl = (ROOT / "examples" / "variants" / f"{args.variant}.tl").read_text()
    values = [v for v in args.values.split(",") if v]
    jobs = []
    for v in values:
        b = translate_text(with_param(tl, args.param, v), Path(f"{args.variant}_{v}.tl"))
        jobs.append(CompileJob(source=b.source, arch=b.spec.arch, name=f"{args.variant}_{v}.cu"))
    counts: dict[str, collections.Counter[str]] = {}
    for v, r in zip(values, compile_many(jobs), strict=True):
        if isinstance(r, CompileError):
            print(f"{args.param}={v}: compile failed: {str(r)[:300]}")
            continue
        counts[v] = collections.Counter(base_opcode(o) for o in opcodes(disassemble(r.code)))
    print(f"static SASS of {args.variant} (sm_90a) by {args.param}")
    print(f"{args.param:>8s} {'total':>6s} " + " ".join(f"{o:>6s}" for o in OPS) + "  instr/moved exp2")
    base = counts.get(values[0])
    for v, c in counts.items():
        total = sum(c.values())
        trade = ""
        if base is not None and v != values[0] and base["MUFU"] > c["MUFU"]:
            trade = f"{(total - sum(base.values())) / (base['MUFU'] - c['MUFU']):.1f}"
        print(f"{v:>8s} {total:6d} " + " ".join(f"{c.get(o, 0):6d}" for o in OPS) + f"  {trade}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
