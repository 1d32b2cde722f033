"""Precompiled headers kept on disk: does a fresh process compile a known skeleton warm?

    python3 benchmarks/pch_across_processes.py [--example hopper_mha_fwd] [--processes 4] [--json OUT]

Each step is a new process started without address-space randomisation (`runner.pch_heap.spawn_options`)
that calls `use_precompiled_headers(True, prelude=True, on_disk=True)` first, then compiles the example
with its scale edited (a new kernel body each time; the kernel cache is off), as the language server's
worker does for a save after a restart. The first process parses everything (and writes the include
block's header and the skeleton's body copy), the second writes the prelude header, the later ones read
it. A last process runs with randomisation on and headers off, for the cold compile beside them. Prints
CPU seconds (user + system of the compile) and what each did with the headers; NVRTC only, no GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def child(example: str, step: int) -> dict[str, object]:
    from runner.compile import use_precompiled_headers

    on_disk = use_precompiled_headers(True, prelude=True, on_disk=True)  # first: it maps NVRTC's heap

    import resource

    from pipeline.build import translate_text
    from runner.compile import compile_source

    text = (ROOT / "examples" / f"{example}.tl").read_text()
    factor = 1 + (step + 1) / 64  # never 1: `scale * 1.0` folds back into the plain kernel, another skeleton
    edited = text.replace(
        "Compute Multiply S, scale and get new S", f"Compute Multiply S, scale * {factor} and get new S"
    )
    t = translate_text(edited, Path(f"{example}.tl"))
    before = resource.getrusage(resource.RUSAGE_SELF)
    wall = time.perf_counter()
    compiled = compile_source(t.source, arch=t.spec.arch, name=f"{example}.cu", use_cache=False)
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "step": step,
        "on_disk": on_disk,
        "pch": compiled.pch,
        "wall_s": round(time.perf_counter() - wall, 2),
        "cpu_s": round(cpu, 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--example", default="hopper_mha_fwd")
    ap.add_argument("--processes", type=int, default=4, help="fresh processes with randomisation off")
    ap.add_argument("--json", default="")
    ap.add_argument("--child", type=int, default=-1, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child >= 0:
        print("RESULT " + json.dumps(child(args.example, args.child)), flush=True)
        return 0

    from runner.pch_heap import spawn_options

    rows = []
    with tempfile.TemporaryDirectory(prefix="tl-pch-disk-") as cache:
        env = {**os.environ, "TL_CACHE_DIR": cache, "TL_PCH": "1"}
        for step in range(args.processes + 1):
            randomised = step == args.processes  # the last one: an ordinary process, for the cold time
            cmd = [sys.executable, __file__, "--example", args.example, "--child", str(step)]
            extra = {} if randomised else spawn_options()
            step_env = {**env, "TL_PCH": "0"} if randomised else env  # and no header at all
            out = subprocess.run(cmd, env=step_env, capture_output=True, text=True, check=False, **extra)  # type: ignore[call-overload]
            line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
            if line is None:
                print(f"step {step} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
                return 1
            row = {**json.loads(line[len("RESULT ") :]), "randomised": randomised}
            rows.append(row)
            print(
                f"process {step + 1} ({'randomisation on' if randomised else 'randomisation off'}): "
                f"{row['cpu_s']:6.1f} s CPU, {row['wall_s']:6.1f} s wall, headers on disk {row['on_disk']}, "
                f"header {row['pch']}",
                flush=True,
            )
    load = os.getloadavg()
    print(f"{args.example}, {time.strftime('%Y-%m-%d %H:%M')}, load {load[0]:.1f}, {os.cpu_count()} cores")
    if args.json:
        result = {"example": args.example, "load": load, "rows": rows}
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
