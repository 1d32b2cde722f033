"""The warm save with the kernel's CuTe instantiations in the precompiled header, and its SASS.

An include block's header saves 7–9 % of an sm_80 compile: the rest is the kernel body's template
instantiations (docs/performance.md, "Compile latency"). With preludes (`runner.compile_prelude`, what the
language server's worker uses) the header also holds those. In one process:

  cold     the kernel with an edit in its body (its `scale_log2`), no header: the reference;
  first    the kernel as generated, with preludes: a skeleton's first compile only remembers its body;
  writes   the same again: this compile writes the prelude header;
  warm     the edited kernel, reading it.

It prints CPU seconds and NVRTC's phases for each, and whether the warm kernel's SASS equals the cold
one's. No GPU is needed. Run: `python benchmarks/pch_prelude.py [--example mha_fwd] [--target sm_80]
[--device-arch sm_90] [--json OUT]`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run as a script, from a checkout that is not installed

from benchmarks.compile_latency import NVRTC_OPTIONS, _phases, examples, translate  # noqa: E402

# The edit of the body: the softmax scale's factor (every forward kernel computes it once).
SCALE = "const float scale_log2 = softmax_scale * 1.44269504088896340736f;"
EDITED = "const float scale_log2 = softmax_scale * 0.5f * 1.44269504088896340736f;"
MODES = ("cold", "first", "writes", "warm")


def _cpu() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _compile(source: str, spec: dict[str, Any], csv_path: Path) -> dict[str, Any]:
    from runner.compile import compile_source

    cpu0, t0 = _cpu(), time.perf_counter()
    k = compile_source(
        source,
        arch=spec["arch"],
        device_arch=spec["device_arch"],
        name=spec["name"],
        options={"time": str(csv_path), **NVRTC_OPTIONS},
        use_cache=False,
    )
    return {
        "wall_s": round(time.perf_counter() - t0, 2),
        "cpu_s": round(_cpu() - cpu0, 2),
        "phases_s": _phases(csv_path),
        "pch": k.pch,
        "load": round(os.getloadavg()[0], 2),
        "code": k.code,
    }


def _sass(code: bytes) -> str | None:
    from runner.sass import SassError, disassemble

    try:
        text = disassemble(code)
    except SassError:
        return None
    return "\n".join(m.group(1) for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+([^;]*);", text))


def probe(example: str, target: str | None, device_arch: str | None) -> dict[str, Any]:
    from runner.compile import _PCH, use_precompiled_headers

    kernel = translate(next(p for p in examples([example])), target)
    if SCALE not in kernel.source:
        raise SystemExit(f"pch_prelude: {kernel.name} has no `{SCALE}` to edit")
    spec = {"arch": kernel.arch, "device_arch": device_arch, "name": kernel.name}
    edited = kernel.source.replace(SCALE, EDITED)
    out: dict[str, Any] = {"example": example, "arch": kernel.arch, "device_arch": device_arch}
    with tempfile.TemporaryDirectory(prefix="tl-pch-prelude-") as tmp:
        os.environ["TL_CACHE_DIR"] = str(Path(tmp) / "cache")  # the headers and their verdicts: fresh
        csv_path = Path(tmp) / "time.csv"
        use_precompiled_headers(False)
        out["cold"] = _compile(edited, spec, csv_path)
        use_precompiled_headers(True, prelude=True)
        out["first"] = _compile(kernel.source, spec, csv_path)
        out["writes"] = _compile(kernel.source, spec, csv_path)
        out["warm"] = _compile(edited, spec, csv_path)
        # The PCH heap the header needed (the runner grows it, and writes the header again, past 1 GiB)
        out["pch_heap_bytes"] = _PCH.heap_bytes
    cold, warm = _sass(out["cold"]["code"]), _sass(out["warm"]["code"])
    out["same_sass"] = None if cold is None or warm is None else cold == warm
    out["same_binary"] = out["cold"]["code"] == out["warm"]["code"]
    for mode in MODES:
        out[mode].pop("code")
    return out


def table(r: dict[str, Any]) -> str:
    rows = [
        f"{r['example']} {r['arch']}: the warm save with the kernel's instantiations in the header",
        "| compile | wall s | CPU s | front / opt / ptx s | header |",
        "|---|---|---|---|---|",
    ]
    for mode in MODES:
        m = r[mode]
        ph = " / ".join(str(m["phases_s"].get(k, "—")) for k in ("front", "opt", "ptx"))
        rows.append(f"| {mode} | {m['wall_s']:.1f} | {m['cpu_s']:.1f} | {ph} | {m['pch'] or '—'} |")
    rows.append(f"warm SASS equals cold SASS: {r['same_sass']} (binaries equal: {r['same_binary']})")
    rows.append(f"PCH heap: {r['pch_heap_bytes'] / 2**30:.2f} GiB")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--example", default="mha_fwd")
    ap.add_argument("--target", default=None, help="a TL Target (default: the example's)")
    ap.add_argument("--device-arch", default=None, help="compile as for this device (e.g. sm_90)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    result = probe(args.example, args.target, args.device_arch)
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["same_sass"] is not False else 1


if __name__ == "__main__":
    sys.exit(main())
