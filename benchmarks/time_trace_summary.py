"""Where a CUDA compile's front end goes: a summary of nvcc's `-fdevice-time-trace` JSON.

    nvcc -std=c++17 -arch=sm_90a -cubin -I$CUTLASS/include -fdevice-time-trace trace.json kernel.cu
    python3 benchmarks/time_trace_summary.py trace.json.json [--top 30]

Prints the phases (front end, its wrap-up and deferred instantiations, NVVM, ptxas), the function bodies
over 0.2 s, the outermost template instantiations inside the largest body (the kernel statements that
cost the most), and the top instantiations by name: inclusive seconds (a name nested in itself counted
once) and self seconds. The trace inflates every instantiation, so read shares and differences
(docs/performance.md, "Compile latency"; docs/results/*-vm-compile-profile-*.txt).
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from pathlib import Path
from typing import Any

PHASES = (
    "gcc (preprocessing 1)",
    "CUDA C++ Front-End",
    "Wrapping up translation unit",
    "Generating Needed Template Instantiations",
    "Generating NVVM IR",
    "LibNVVM",
    "Total PTXAS Time",
)
Key = tuple[str, str]  # ("Function" / "Class", the template's name without its arguments)


def _name(event: dict[str, Any]) -> str:
    return str(event["args"]["detail"]).split(" [", 1)[0]


def _function(event: dict[str, Any]) -> str:
    return re.sub(r"\(.*", "", str(event["args"]["detail"]))


def summarise(path: Path, top: int = 30) -> str:
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    out = [f"{name:45s} {e['dur'] / 1e6:7.2f}" for name in PHASES for e in events if e["name"] == name]
    front = next(e for e in events if e["name"] == "CUDA C++ Front-End")
    end = front["ts"] + front["dur"]
    inside = [
        e for e in events if e["pid"] == front["pid"] and front["ts"] <= e["ts"] <= end and e is not front
    ]
    inside.sort(key=lambda e: (e["ts"], -e["dur"]))
    inclusive: dict[Key, float] = collections.defaultdict(float)
    own: dict[Key, float] = collections.defaultdict(float)
    calls: collections.Counter[Key] = collections.Counter()
    active: collections.Counter[Key] = collections.Counter()
    outermost: dict[str, dict[str, list[float]]] = {}
    bodies: dict[str, float] = collections.defaultdict(float)
    stack: list[dict[str, Any]] = []
    body: list[tuple[str, int]] = []  # (function, instantiations open when its body began)
    depth = {"inst": 0, "header": 0}
    headers = 0.0

    def pop() -> None:
        e = stack.pop()
        if "_key" in e:
            active[e["_key"]] -= 1
            depth["inst"] -= 1
            own[e["_key"]] += e["_self"]
        elif e["name"] == "Processing Header File":
            depth["header"] -= 1
        elif e["name"] == "Scanning Function Body":
            body.pop()

    for e in inside:
        while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
            pop()
        e["_self"] = e["dur"]
        if stack:
            stack[-1]["_self"] -= e["dur"]
        if e["name"].startswith("Instantiating"):
            key: Key = (e["name"].split()[-1], _name(e))
            e["_key"] = key
            if not active[key]:
                inclusive[key] += e["dur"]
            calls[key] += 1
            if body and body[-1][1] == depth["inst"]:
                outermost.setdefault(body[-1][0], {}).setdefault(key[1], []).append(e["dur"])
            active[key] += 1
            depth["inst"] += 1
        elif e["name"] == "Processing Header File":
            if not depth["header"]:
                headers += e["dur"]
            depth["header"] += 1
        elif e["name"] == "Scanning Function Body":
            f = _function(e)
            if all(b[0] != f for b in body):
                bodies[f] += e["dur"]
            body.append((f, depth["inst"]))
        stack.append(e)
    while stack:
        pop()
    out.append(f"{'header files (outermost)':45s} {headers / 1e6:7.2f}")
    out.append("\n# function bodies over 0.2 s (Scanning Function Body, inclusive):")
    out += [f"  {t / 1e6:6.2f}  {f}" for f, t in sorted(bodies.items(), key=lambda x: -x[1]) if t > 2e5]
    if outermost:
        f, found = max(outermost.items(), key=lambda x: sum(map(sum, x[1].values())))
        total = sum(map(sum, found.values()))
        out.append(f"\n# outermost instantiations in the body of {f}: {total / 1e6:.2f} s (seconds, calls):")
        ranked = sorted(found.items(), key=lambda x: -sum(x[1]))[:top]
        out += [f"  {sum(ts) / 1e6:6.2f} {len(ts):3d}  {n}" for n, ts in ranked]
    out.append(f"\n# top {top} instantiations by name, inclusive (seconds, instantiations):")
    ranked_k = sorted(inclusive.items(), key=lambda x: -x[1])[:top]
    out += [f"  {t / 1e6:6.2f} {calls[k]:5d}  {k[0]:8s} {k[1]}" for k, t in ranked_k]
    out.append(f"\n# top {top} by self time:")
    ranked_k = sorted(own.items(), key=lambda x: -x[1])[:top]
    out += [f"  {t / 1e6:6.2f} {calls[k]:5d}  {k[0]:8s} {k[1]}" for k, t in ranked_k]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("trace", type=Path, help="the JSON nvcc's -fdevice-time-trace wrote")
    ap.add_argument("--top", type=int, default=30, help="rows per ranking")
    args = ap.parse_args(argv)
    print(summarise(args.trace, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
