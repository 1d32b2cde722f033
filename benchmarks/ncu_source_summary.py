"""Warp-stall samples of one kernel per instruction class, from Nsight Compute's source page, for two
kernels side by side (ours beside FA4's): where the samples go, how many instructions of each opcode a
warp executes per iteration of the main loop, and the hottest instructions.

    ncu -k regex:dq_dk_dv --launch-skip 1 -c 1 --section SourceCounters --section WarpStateStats \\
        --import-source no -o ours -f python3 benchmarks/backward_profile.py --prebuilt DIR --tag TAG
    ncu -i ours.ncu-rep --page source --print-source sass --csv > ours.csv
    python3 benchmarks/ncu_source_summary.py ours.csv fa4.csv --iterations 540672

`--iterations`: how often an instruction of the main loop runs (warp-level "Instructions Executed"),
e.g. thread blocks × consumer warps × query blocks a key block; the per-iteration counts divide by it.
"""

from __future__ import annotations

import argparse
import csv
import re
from collections import Counter
from pathlib import Path

CLASSES = (
    ("HGMMA issue", ("HGMMA",)),
    ("wgmma wait", ("WARPGROUP",)),
    ("fence", ("FENCE", "MEMBAR")),
    ("named barrier", ("BAR",)),
    ("mbarrier", ("SYNCS",)),
    ("float math", ("FFMA", "FADD", "FMUL", "MUFU", "F2FP", "FSEL", "FMNMX", "FSETP")),
    ("shared ld/st", ("LDS", "STS", "STSM", "LDSM")),
    ("global/TMA/local", ("STG", "LDG", "REDG", "UBLKRED", "UTMALDG", "UTMASTG", "LDL", "STL")),
    ("branch", ("BRA", "BSSY", "BSYNC", "EXIT", "WARPSYNC", "ELECT")),
)


def opcode(sass: str) -> str:
    """The opcode of a SASS line without its predicate (`@!P0 BRA …` → `BRA`)."""
    body = re.sub(r"^@!?U?P\w+\s+", "", sass.strip())
    return body.split()[0] if body else ""


def instruction_class(sass: str) -> str:
    op = opcode(sass)
    if op.startswith("LDS") and "RZ, [RZ]" in sass:  # the dummy loads of a proxy fence
        return "fence"
    base = op.split(".")[0]
    return next((name for name, ops in CLASSES if base in ops), "integer/uniform/other")


def read(path: Path) -> list[tuple[str, int, int]]:
    """(SASS, stall samples, warp-level executions) per instruction of the CSV's one kernel."""
    rows = list(csv.reader(path.open()))
    header = rows[1]
    at = {name: header.index(name) for name in ("Source", "Warp Stall Sampling (All Samples)")}
    executed = header.index("Instructions Executed")
    return [
        (r[at["Source"]], int(r[at["Warp Stall Sampling (All Samples)"]] or 0), int(r[executed] or 0))
        for r in rows[2:]
        if len(r) > executed
    ]


def summary(path: Path, iterations: int, top: int) -> list[str]:
    instrs = read(path)
    total = sum(s for _, s, _ in instrs)
    by_class, ops, op_samples = Counter(), Counter(), Counter()
    for sass, samples, execs in instrs:
        by_class[instruction_class(sass)] += samples
        base = opcode(sass).split(".")[0]
        ops[base] += execs
        op_samples[base] += samples
    out = [f"== {path.name}: {total} samples, {len(instrs)} instructions"]
    out += [f"  {name:22s} {n:8d}  {100 * n / total:5.1f} %" for name, n in by_class.most_common()]
    out.append(f"  per iteration and warp (executions / {iterations}), with their samples:")
    out += [
        f"    {op:8s} {n / iterations:7.1f}  {op_samples[op]:7d}"
        for op, n in ops.most_common()
        if n / iterations >= 1.0
    ]
    out.append(f"  the {top} hottest instructions (samples, executions, SASS):")
    hot = sorted(instrs, key=lambda x: -x[1])[:top]
    out += [f"    {s:7d} {e:9d}  {sass.strip()[:80]}" for sass, s, e in hot]
    return out


def by_count(path: Path, top: int) -> list[str]:
    """The instructions grouped by how often they ran: each group is code that runs together (a loop
    body, a branch's side), with its warp instructions, stall samples and commonest opcodes."""
    groups: dict[int, tuple[int, int, Counter[str]]] = {}
    for sass, samples, execs in read(path):
        if execs:
            n, s, ops = groups.get(execs, (0, 0, Counter()))
            ops[opcode(sass).split(".")[0]] += 1
            groups[execs] = (n + 1, s + samples, ops)
    total = sum(e * n for e, (n, _, _) in groups.items())
    out = [f"== {path.name}: {total / 1e6:.1f} M warp instructions, by execution count"]
    for e, (n, s, ops) in sorted(groups.items(), key=lambda kv: -kv[0] * kv[1][0])[:top]:
        common = ", ".join(f"{op} {k}" for op, k in ops.most_common(8))
        share = f"{e * n / 1e6:6.1f} M ({100 * e * n / total:4.1f} %)"
        out.append(f"  {e:9d} × {n:4d} = {share}, {s:6d} samples: {common}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", type=Path, nargs="+")
    ap.add_argument("--iterations", type=int, required=True)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--groups", type=int, default=0, help="also the N largest groups by execution count")
    args = ap.parse_args()
    for path in args.csv:
        print("\n".join(summary(path, args.iterations, args.top)))
        if args.groups:
            print("\n".join(by_count(path, args.groups)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
