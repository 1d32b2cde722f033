"""Compile latency of the bundled examples through NVRTC: cold, with a precompiled header written, warm.

For each example (at its own `Target`, or at each of `--targets`) and each mode, a fresh interpreter
compiles the kernel with the kernel cache off and reports wall and CPU seconds (its own and its child
ptxas's) and NVRTC's phase split (`--time`: C++ front end, NVVM optimizer, PTX → SASS):

  headers  the kernel's include block alone (+ an empty kernel), no precompiled header: the most a
           precompiled header can save;
  cold     the kernel, no precompiled header: what every compile costs without one;
  first    the kernel in a process that uses precompiled headers: it writes the header of the block,
           compiles with it and weighs it (runner.compile: a header whose read costs more system time
           than its parse took is dropped);
  warm     then, in the same process, the kernel with a one-line edit: with the header if it was kept
           ("pch": "used" in the JSON), without it otherwise (what a second save in the language server
           and a compile_many worker's later jobs cost).

`--build` also times `compile_many` over all of them from an empty kernel cache with `--jobs` workers:
precompiled headers off, on (`$TL_PCH`) on a machine where no header was weighed yet, and on again with
the first build's verdicts (a later build on the same machine). No GPU is needed; `--device-arch sm_90`
compiles as for an H200 (sm_80-class kernels as compute_80 PTX, then ptxas for sm_90), as the on-save
path does there.

Run: `python benchmarks/compile_latency.py [--examples mha_fwd,hopper_mha_fwd] [--targets sm_80,sm_90]
[--backward] [--modes headers,cold,first,warm] [--device-arch sm_90] [--build] [--jobs N] [--parallel N]
[--repeat N] [--prelude] [--nvrtc-option KEY=VALUE ...] [--compare KEY=VALUE] [--json OUT]`.
`--prelude`: the headers of first/warm also hold the kernel's template instantiations, as in the language
server's worker (`runner.compile_prelude`). `--backward`: the examples' backward translation units (the
D, dQ/dK/dV and convert kernels in one) instead of their forwards.

NVRTC options are `cuda.core.ProgramOptions` fields (VALUE read as JSON, else as a string):
`--nvrtc-option` adds one to every compile; `--compare` measures every kernel and mode both without
and with it, A B B A over the repeats (drift on a shared machine cancels), one table row each. E.g.
`--compare split_compile=0` (NVVM's passes on one thread per CPU; not the runner's default: it changes
sm_90a SASS, docs/results/2026-12-01-vm-nvrtc-options.json), `--compare ofast_compile=min`.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # a checkout on the GPU host is used without being installed

MODES = ("headers", "cold", "first", "warm")
ANCHOR = "\n__global__ void tl_pch_anchor() {}\n"
CHILD_TIMEOUT_S = 900
# NVRTC's own cache (12.9+) off in every compile here: a warm compile may reuse the cold one's header
# and nothing else. (On the H200 host a run without this reported NVVM 0.4 s and ptxas 0.02 s for warm
# compiles whose edit was a comment, against 2.3 s and 0.6 s cold: more than a header can explain.)
# `--keep-nvrtc-cache` leaves NVRTC's default.
NVRTC_OPTIONS: dict[str, Any] = {"no_cache": True}
# NVRTC's --time CSV names its phases so; the table calls them front / opt / ptx.
PHASES = {"CUDA C++ Frontend": "front", "NVVM Optimizer": "opt", "PTX Translation": "ptx"}


@dataclass
class Kernel:
    example: str
    target: str  # the TL Target asked for
    arch: str  # the kernel's arch (LaunchSpec.arch): sm_90 becomes sm_90a
    name: str
    source: str


@dataclass
class Measure:
    example: str
    target: str
    arch: str
    mode: str
    wall_s: float | None = None
    cpu_s: float | None = None
    phases_s: dict[str, float] = field(default_factory=dict)
    pch: str | None = None
    load: list[float] = field(default_factory=list)  # 1-minute load average before and after each sample
    error: str | None = None
    samples: list[dict[str, Any]] = field(default_factory=list)
    variant: str = ""  # the `--compare` option this was measured with ("" without it)


def examples(names: list[str] | None) -> list[Path]:
    """The plain examples (examples/*.tl but the sketch), or the named ones from anywhere under
    examples/ (the catalogue's `alibi`, the inference `paged_decode` …)."""
    paths = sorted(p for p in (ROOT / "examples").glob("*.tl") if p.stem != "sketch_fwd")
    if names:
        wanted = set(names)
        paths = [p for p in sorted((ROOT / "examples").rglob("*.tl")) if p.stem in wanted]
        missing = wanted - {p.stem for p in paths}
        if missing:
            raise SystemExit(f"compile_latency: no such example: {', '.join(sorted(missing))}")
    return paths


def translate(path: Path, target: str | None, backward: bool = False) -> Kernel:
    """The example's kernel, translated in memory (nothing is written beside the example); `backward`:
    its backward's translation unit instead (`pipeline.backward.translate_backward`, the default
    skeleton for the Target: the sm_90 wgmma one where it covers the program), named `<example>.bwd`."""
    from pipeline.build import translate_text
    from pipeline.variants import variant

    text = path.read_text()
    if target is not None:
        text = variant(text, target=target)
    if backward:
        from pipeline.backward import translate_backward

        b = translate_backward(text)
        return Kernel(f"{path.stem}.bwd", target or b.spec.arch, b.spec.arch, f"{path.stem}.bwd.cu", b.source)
    t = translate_text(text, Path(path.name))  # a bare name: `#line` directives do not name a temp dir
    own = target or t.spec.arch
    return Kernel(path.stem, own, t.spec.arch, t.cu_path.name, t.source)


# ---- the child: one fresh interpreter per measured kernel and mode ----------------------------------


def _cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # ptxas, when PTX is assembled for the device
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _load() -> float:
    return os.getloadavg()[0]


def _phases(csv_path: Path) -> dict[str, float]:
    """NVRTC's --time CSV (file, phase, metric, unit), summed per phase, in seconds; then emptied."""
    out: dict[str, float] = {}
    try:
        rows = list(csv.reader(csv_path.read_text().splitlines()))
    except OSError:
        return out
    for row in rows[1:]:
        if len(row) >= 4 and row[1].strip() in PHASES:
            scale = {"ms": 1e-3, "s": 1.0, "us": 1e-6}.get(row[3].strip(), 1e-3)
            key = PHASES[row[1].strip()]
            out[key] = round(out.get(key, 0.0) + float(row[2]) * scale, 2)
    csv_path.unlink(missing_ok=True)
    return out


def _compile_timed(source: str, spec: dict[str, Any], csv_path: Path) -> dict[str, Any]:
    from runner.compile import CompileError, compile_source

    load0, cpu0, t0 = _load(), _cpu(), time.perf_counter()
    try:
        ck = compile_source(
            source,
            arch=spec["arch"],
            device_arch=spec.get("device_arch"),
            name=spec["name"],
            options={"time": str(csv_path), **spec["nvrtc_options"]},
            use_cache=False,
        )
        error, pch = None, ck.pch
    except CompileError as err:
        error, pch = str(err)[:2000], None
    wall, cpu = time.perf_counter() - t0, _cpu() - cpu0
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "phases_s": _phases(csv_path),
        "pch": pch,
        "load": [round(load0, 2), round(_load(), 2)],
        "error": error,
    }


def child(spec_path: Path, out_path: Path) -> int:
    """Compile as the spec says and write one result per step as JSON (the modes of one process)."""
    from runner.compile import header_prefix, use_precompiled_headers

    spec = json.loads(spec_path.read_text())
    # One path for every step: the precompiled header's options must match its reader's.
    csv_path = Path(tempfile.mkdtemp(prefix="tl-compile-latency-")) / "time.csv"
    results: dict[str, Any] = {}
    if spec["process"] == "plain":
        use_precompiled_headers(False)
        for mode in spec["modes"]:
            source = spec["source"]
            if mode == "headers":
                prefix = header_prefix(source)
                if not prefix:
                    results[mode] = {"error": "the source has no include block"}
                    continue
                source = prefix + ANCHOR
            results[mode] = _compile_timed(source, spec, csv_path)
    else:
        use_precompiled_headers(True, prelude=spec.get("prelude", False))
        results["first"] = _compile_timed(spec["source"], spec, csv_path)
        if spec.get("prelude"):  # a skeleton's second compile writes its prelude header (not reported)
            results["prelude_write"] = _compile_timed(spec["source"], spec, csv_path)
        if "warm" in spec["modes"]:
            # An edit, as on a save: the source differs, the include block does not.
            edited = spec["source"] + "\n// compile_latency: warm compile\n"
            results["warm"] = _compile_timed(edited, spec, csv_path)
    out_path.write_text(json.dumps(results))
    return 0


def run_child(
    kernel: Kernel,
    modes: list[str],
    process: str,
    device_arch: str | None,
    prelude: bool = False,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tl-compile-latency-") as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        spec = {
            **asdict(kernel),
            "modes": modes,
            "process": process,
            "device_arch": device_arch,
            "nvrtc_options": {**NVRTC_OPTIONS, **(options or {})},
            "prelude": prelude,
        }
        spec_path.write_text(json.dumps(spec))
        env = {**os.environ, "TL_CACHE_DIR": str(Path(tmp) / "cache")}
        env.pop("TL_PCH", None)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(spec_path), str(out_path)]
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, timeout=CHILD_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            return {m: {"error": f"timed out after {CHILD_TIMEOUT_S} s"} for m in modes}
        if proc.returncode != 0 or not out_path.exists():
            why = proc.stderr.decode(errors="replace")[-1500:]
            return {m: {"error": f"child exited with {proc.returncode}: {why}"} for m in modes}
        return json.loads(out_path.read_text())


def parse_option(text: str) -> tuple[str, Any]:
    """KEY=VALUE of a `ProgramOptions` field; VALUE as JSON (1, true, "x") or else the plain string."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"not KEY=VALUE: {text!r}")
    try:
        value: Any = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip().replace("-", "_"), value


def variant_label(options: dict[str, Any]) -> str:
    return ",".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in options.items())


def measure(
    kernel: Kernel,
    modes: list[str],
    device_arch: str | None,
    repeat: int = 1,
    prelude: bool = False,
    compare: dict[str, Any] | None = None,
) -> list[Measure]:
    """Each mode `repeat` times, the two kinds of process taking turns; the median of each (all samples in
    `samples`): on a shared machine one compile's time moves by more than a header's parse. With
    `compare`, each repeat measures without and with those options, A B then B A: a load that drifts over
    the run weighs on both alike."""
    variants: list[dict[str, Any]] = [{}, compare] if compare else [{}]
    samples: dict[tuple[int, str], list[dict[str, Any]]] = {
        (v, m): [] for v in range(len(variants)) for m in modes
    }
    plain = [m for m in ("headers", "cold") if m in modes]
    pch = [m for m in ("first", "warm") if m in modes]
    for i in range(max(1, repeat)):
        order = list(range(len(variants)))
        for v in order if i % 2 == 0 else order[::-1]:
            for group, process in ((plain, "plain"), (pch, "pch")):
                if group:
                    got = run_child(kernel, group, process, device_arch, prelude, variants[v])
                    for mode, r in got.items():
                        if (v, mode) in samples:  # "warm" alone still has its process write the header
                            samples[(v, mode)].append(r)
    return [
        _summary(kernel, mode, samples[(v, mode)], variant_label(variants[v]))
        for v in range(len(variants))
        for mode in modes
    ]


def _summary(kernel: Kernel, mode: str, got: list[dict[str, Any]], variant: str) -> Measure:
    """The medians of one kernel's samples in one mode and variant."""
    got = got or [{"error": "not measured"}]
    ok = [r for r in got if not r.get("error") and r.get("wall_s") is not None]
    phases = {
        k: _median([r["phases_s"][k] for r in ok if k in r.get("phases_s", {})]) for k in PHASES.values()
    }
    return Measure(
        kernel.example,
        kernel.target,
        kernel.arch,
        mode,
        wall_s=_median([r["wall_s"] for r in ok]) if ok else None,
        cpu_s=_median([r["cpu_s"] for r in ok]) if ok else None,
        phases_s={k: v for k, v in phases.items() if v is not None},
        pch=ok[-1].get("pch") if ok else None,
        load=[x for r in ok for x in r.get("load", [])],
        error=None if len(ok) == len(got) else next(r["error"] for r in got if r.get("error")),
        samples=got,
        variant=variant,
    )


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


# ---- parallel builds ----------------------------------------------------------------------------------


BUILDS = (("off", False), ("on", True), ("on, weighed", True))


def build(
    kernels: list[Kernel], jobs: int | None, device_arch: str | None, pch: bool, verdicts: Path | None = None
) -> dict[str, Any]:
    """`compile_many` over every kernel from an empty kernel cache in a fresh interpreter, headers on or
    off; with `verdicts` (a previous build's `pch/verdicts`), as a later build on the same machine that
    knows which headers pay. The result's `verdicts` is this build's, for the next."""
    script = (
        "import json, sys, time\n"
        "from runner.compile import CompileJob, compile_many\n"
        "spec = json.load(sys.stdin)\n"
        "jobs = [CompileJob(source=k['source'], arch=k['arch'], name=k['name'],"
        " device_arch=spec['device_arch'], options=spec['nvrtc_options']) for k in spec['kernels']]\n"
        "t = time.perf_counter()\n"
        "res = compile_many(jobs, max_workers=spec['jobs'])\n"
        "wall = time.perf_counter() - t\n"
        "print(json.dumps({'wall_s': round(wall, 2), 'results': [{'name': j.name,"
        " 'ok': hasattr(r, 'code'), 'seconds': round(getattr(r, 'seconds', 0.0), 2),"
        " 'pch': getattr(r, 'pch', None)} for j, r in zip(jobs, res)]}))\n"
    )
    keep = Path(tempfile.mkdtemp(prefix="tl-compile-latency-verdicts-"))
    with tempfile.TemporaryDirectory(prefix="tl-compile-latency-build-") as tmp:
        cache = Path(tmp) / "cache"
        if verdicts is not None and verdicts.is_dir():
            shutil.copytree(verdicts, cache / "pch" / "verdicts")
        env = {**os.environ, "TL_CACHE_DIR": str(cache), "TL_PCH": "1" if pch else "0"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        spec = {
            "kernels": [asdict(k) for k in kernels],
            "jobs": jobs,
            "device_arch": device_arch,
            "nvrtc_options": NVRTC_OPTIONS,
        }
        load0 = _load()
        proc = subprocess.run(
            [sys.executable, "-c", script],
            input=json.dumps(spec).encode(),
            env=env,
            capture_output=True,
            timeout=CHILD_TIMEOUT_S * 2,
            check=False,
        )
        if proc.returncode != 0:
            shutil.rmtree(keep, ignore_errors=True)
            return {"pch": pch, "error": proc.stderr.decode(errors="replace")[-1500:]}
        if (cache / "pch" / "verdicts").is_dir():
            shutil.copytree(cache / "pch" / "verdicts", keep, dirs_exist_ok=True)
        out = json.loads(proc.stdout.decode().strip().splitlines()[-1])
        out.update({"pch": pch, "jobs": jobs or os.cpu_count(), "load": [round(load0, 2), round(_load(), 2)]})
        out["verdicts"] = str(keep)
        return out


# ---- report -------------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    from runner.toolchain import toolchain

    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    tc = toolchain()
    return {
        "host": platform.node(),
        "cores": os.cpu_count(),
        "cpu": model,
        "nvrtc": tc.nvrtc_version,
        "cutlass": tc.cutlass_version,
        "cccl": tc.cccl_version,
        "python": platform.python_version(),
        "date": datetime.date.today().isoformat(),
    }


def _cell(m: Measure | None) -> str:
    if m is None:
        return "-"
    if m.error or m.wall_s is None:
        return "FAIL"
    return f"{m.wall_s:.1f} ({m.cpu_s:.1f})"


def table(measures: list[Measure], modes: list[str]) -> str:
    """One row per kernel (and `--compare` variant): wall (CPU) seconds per mode, then the cold compile's
    phase split."""
    rows: dict[tuple[str, str], dict[str, Measure]] = {}
    for m in measures:
        label = f"{m.example} [{m.variant}]" if m.variant else m.example
        rows.setdefault((label, m.arch), {})[m.mode] = m
    head = ["example", "arch", *[f"{mode} s (cpu)" for mode in modes], "cold front/opt/ptx s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (example, arch), by_mode in rows.items():
        cold = by_mode.get("cold")
        split = "-"
        if cold is not None and cold.phases_s:
            split = " / ".join(f"{cold.phases_s.get(k, 0.0):.1f}" for k in ("front", "opt", "ptx"))
        cells = [example, arch, *[_cell(by_mode.get(mode)) for mode in modes], split]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--examples",
        default=None,
        help="comma-separated example names, any under examples/ (default: the plain ones)",
    )
    ap.add_argument("--targets", default=None, help="comma-separated TL Targets (default: each example's)")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    ap.add_argument("--device-arch", default=None, help="compile as for this device (e.g. sm_90)")
    ap.add_argument("--build", action="store_true", help="also time compile_many, headers off and on")
    ap.add_argument("--jobs", type=int, default=None, help="compile_many workers (default: all cores)")
    ap.add_argument(
        "--parallel",
        type=int,
        default=1,
        help="kernels measured at once (default 1: alone, the clean number)",
    )
    ap.add_argument("--repeat", type=int, default=1, help="samples per mode; the table shows medians")
    ap.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    ap.add_argument("--keep-nvrtc-cache", action="store_true", help="leave NVRTC's own cache at its default")
    ap.add_argument(
        "--prelude",
        action="store_true",
        help="first/warm: headers that hold the kernel's instantiations too (runner.compile_prelude)",
    )
    ap.add_argument(
        "--nvrtc-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a ProgramOptions field for every compile (repeatable), e.g. split_compile=1",
    )
    ap.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="also measure each kernel with this option (repeatable: one variant of them all), A B B A",
    )
    ap.add_argument("--backward", action="store_true", help="the examples' backward kernels instead")
    ap.add_argument("--child", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(*args.child)
    if args.keep_nvrtc_cache:
        NVRTC_OPTIONS.clear()
    try:
        NVRTC_OPTIONS.update(parse_option(o) for o in args.nvrtc_option)
        compare = dict(parse_option(o) for o in args.compare)
    except ValueError as err:
        ap.error(str(err))
    modes = [m for m in args.modes.split(",") if m]
    if unknown := [m for m in modes if m not in MODES]:
        ap.error(f"unknown mode(s): {', '.join(unknown)}")
    targets: list[str | None] = args.targets.split(",") if args.targets else [None]
    kernels: list[Kernel] = []
    skipped: list[str] = []
    from pipeline.backward import BackwardBuildError
    from pipeline.build import BuildError

    for path in examples(args.examples.split(",") if args.examples else None):
        for target in targets:
            try:
                kernels.append(translate(path, target, args.backward))
            except BuildError as err:
                skipped.append(f"{path.stem} for {target or 'its own Target'}: {err.message}")
            except BackwardBuildError as err:
                skipped.append(f"{path.stem}'s backward for {target or 'its own Target'}: {err}")
    info = machine()
    print(
        f"# {info['cores']} cores, {info['cpu']}, NVRTC {info['nvrtc']}, CUTLASS {info['cutlass']}",
        flush=True,
    )
    measures: list[Measure] = []
    with ThreadPoolExecutor(max_workers=max(1, args.parallel)) as pool:
        runs = pool.map(
            lambda k: measure(k, modes, args.device_arch, args.repeat, args.prelude, compare or None), kernels
        )
        for k, got in zip(kernels, runs, strict=True):
            measures += got
            done = ", ".join(f"{m.mode}{f' [{m.variant}]' if m.variant else ''} {_cell(m)}" for m in got)
            print(f"# {k.example} {k.arch}: {done}", flush=True)
    builds = []
    if args.build and kernels:
        verdicts: Path | None = None
        for label, pch in BUILDS:
            b = build(kernels, args.jobs, args.device_arch, pch, verdicts if label == "on, weighed" else None)
            b["headers"] = label
            builds.append(b)
            verdicts = Path(b["verdicts"]) if "verdicts" in b else None
            print(f"# build, precompiled headers {label}: {b.get('wall_s')} s", flush=True)
        for b in builds:
            if "verdicts" in b:
                shutil.rmtree(b.pop("verdicts"), ignore_errors=True)
    print(table(measures, modes))
    for b in builds:
        if "error" in b:
            print(f"build (headers {b['headers']}): FAIL {b['error'][:300]}")
        else:
            n, workers = len(b["results"]), b["jobs"]
            print(f"build of {n} kernels, {workers} workers, headers {b['headers']}: {b['wall_s']:.1f} s")
    for s in skipped:
        print(f"skipped: {s}")
    print(
        "cells: median wall seconds (CPU seconds of the compiling process and its ptxas); samples in the JSON"
    )
    if args.json:
        from runner.compile import nvrtc_options

        # The runner's own flags, beside the ones added here: what an A/B was measured against.
        base = {k: v for k, v in nvrtc_options("sm_90a", "k.cu").items() if k not in ("name", "include_path")}
        payload = {
            "machine": info,
            "runner_nvrtc_options": base,
            "device_arch": args.device_arch,
            "parallel": args.parallel,
            "prelude": args.prelude,
            "repeat": args.repeat,
            "nvrtc_options": NVRTC_OPTIONS,
            "compare": compare,
            "modes": modes,
            "measures": [asdict(m) for m in measures],
            "builds": builds,
            "skipped": skipped,
        }
        args.json.write_text(json.dumps(payload, indent=1) + "\n")
    failed = any(m.error for m in measures) or any("error" in b for b in builds)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
