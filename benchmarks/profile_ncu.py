"""Hardware counters of the generated Hopper kernel beside FlashAttention 4's, same shapes (GPU machine).

    python benchmarks/profile_ncu.py --out DIR [--kernels tl,fa4] [--cases hd128,hd64,hd64-causal]
        [--seqlen 8192] [--sm90-params hd64:BN=128,...]
    python benchmarks/profile_ncu.py --out DIR --cases v:sliding_window,v:document_mask --seqlen 16384
    python benchmarks/profile_ncu.py --out DIR --cases b:sliding_window --seqlen 16384      (backward)

A case `v:NAME` is the catalogue variant `examples/variants/NAME.tl` (sm_90, bf16, d 128, or `v:NAME@64` at
the head dim after the @ on `benchmarks/variants.py --hdim`'s tiles; its side tensors as
`benchmarks/variants.py` makes them); FA4 runs it natively where it can (softcap, window, sink) and
otherwise through FlexAttention's FLASH backend, which lowers the same score_mod / mask_mod to FA4's CuTe
DSL kernel (`benchmarks/variant_cases.py`). A case `b:NAME` is that variant's derived backward (the
dQ/dK/dV kernel, on `benchmarks/variants_backward.py`'s inputs; NAME may also be a plain kernel of
`examples/`, `b:mha_fwd`, `b:causal_mha_fwd`) beside FA4's backward where FA4 runs the
variant natively; `TL_PROFILE_BWD_OPTIONS=producer=1` profiles the backward built with those options.

Each (kernel, case) runs in its own process under Nsight Compute (`ncu --set full --clock-control none`):
the child builds its inputs (bf16, 16k tokens, 2048 hidden, as the benchmark), launches the kernel WARMUP
times, then once more; ncu profiles that last launch only (`--launch-skip WARMUP --launch-count 1`, kernels
picked by name). Our kernels are compiled in the parent first, so the children load them from the compile
cache. The reports (`*.ncu-rep`) and their raw metrics (CSV) land in DIR; the table printed last has one
column per profile and the rows that say what limits an attention kernel: duration, tensor (GMMA) pipe,
MUFU (XU) and FMA pipes, issue-slot use, and the warp stall reasons.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

WARMUP = 3
CASES = {
    "hd128": (128, "none"),
    "hd64": (64, "none"),
    "hd128-causal": (128, "causal"),
    "hd64-causal": (64, "causal"),
}
# ncu's kernel-name filter per kernel family (ours are named tl_<target>_…; FA4's CuTe DSL kernels carry the
# class name FlashAttentionForwardSm90).
NAME_FILTER = {"tl": "regex:^tl_sm_90", "fa4": "regex:[Ff]lash"}
# Rows of the summary table: (label, regex over ncu's raw metric names); the first match is shown.
ROWS = (
    ("duration (us)", r"^gpu__time_duration\.sum$"),
    ("SM clock (MHz)", r"^sm__cycles_elapsed\.avg\.per_second$"),
    ("registers/thread", r"^launch__registers_per_thread$"),
    ("SM throughput %", r"^sm__throughput\.avg\.pct_of_peak_sustained_elapsed$"),
    ("tensor GMMA pipe %", r"^sm__pipe_tensor_op_gmma_cycles_active\.avg\.pct_of_peak_sustained_active$"),
    ("tensor pipe % (any)", r"^sm__pipe_tensor.*cycles_active\.avg\.pct_of_peak_sustained_active$"),
    ("XU (MUFU) inst %", r"^sm__inst_executed_pipe_xu\.avg\.pct_of_peak_sustained_active$"),
    ("FMA pipe %", r"^sm__pipe_fma_cycles_active\.avg\.pct_of_peak_sustained_active$"),
    ("ALU pipe %", r"^sm__pipe_alu_cycles_active\.avg\.pct_of_peak_sustained_active$"),
    ("issue active %", r"^smsp__issue_active\.avg\.pct_of_peak_sustained_active$"),
    ("instructions (M)", r"^smsp__inst_executed\.sum$"),
    ("DRAM throughput %", r"^dram__throughput\.avg\.pct_of_peak_sustained_elapsed$"),
    ("L2 hit %", r"^lts__t_sector_hit_rate\.pct$"),
)
STALL = re.compile(r"^smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio$")


def _variant_case(case: str) -> tuple[str, int]:
    """`v:NAME` → (NAME, 128); `v:NAME@64` → (NAME, 64): the catalogue file moved to that head dim as
    `benchmarks/variants.py --hdim` moves it (`for_shape`)."""
    name, _, hdim = case[2:].partition("@")
    return name, int(hdim or 128)


def _variant_child(kind: str, case: str, seqlen: int) -> int:
    """One variant's kernel (ours or FA4's) launched WARMUP + 1 times on the benchmark's shape."""
    import math

    import torch

    from benchmarks.variant_cases import fa4_native, flex_calls, flex_mods, side_tensors
    from kernel_ir.program import Forward
    from pipeline.benchmark import sweep_shape

    name, hdim = _variant_case(case)
    shape = sweep_shape(seqlen, hdim)
    B, H, S = shape.batch, shape.heads, shape.seqlen_q
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, S, H, hdim, device="cuda", generator=g).to(torch.bfloat16) for _ in range(3))
    if kind == "tl":
        from runner.launch import launch

        lk = _load_variant(name, hdim)
        program = Forward.from_dict(lk.spec.program)
        side = side_tensors(program, B, H, H, S, g)
        o, lse = torch.empty_like(q), torch.empty(B, H, S, device="cuda")
        run = lambda i: launch(lk, q, k, v, o, lse, extras=side)  # noqa: E731
    else:
        program = Forward.from_dict(_variant_spec(name, hdim).spec.program)
        side = side_tensors(program, B, H, H, S, g)
        scalars = {s.name: s.default for s in program.scalars}
        scale = 1 / math.sqrt(hdim)
        native = fa4_native(name, scalars, side)
        if native is not None:
            from flash_attn.cute import flash_attn_func

            run = lambda i: flash_attn_func(q, k, v, softmax_scale=scale, **native)  # noqa: E731
        else:
            mods = flex_mods(name, scalars, side, S, S)
            if mods is None:
                print(f"{name}: FA4 has no spelling for this variant", file=sys.stderr)
                return 2
            run = flex_calls(mods, q, k, v, scale=scale)({"BACKEND": "FLASH"})
    return _launch_profiled(run)


def _launch_profiled(run, warmup: int = WARMUP) -> int:  # run: launch i -> None
    """`warmup` launches, then the one ncu profiles (`--launch-skip WARMUP --launch-count 1`)."""
    import torch

    for i in range(warmup):
        run(i)
    torch.cuda.synchronize()
    run(warmup)  # the profiled launch
    torch.cuda.synchronize()
    return 0


def _backward_options() -> list[dict[str, int]] | None:
    """`$TL_PROFILE_BWD_OPTIONS` (KEY=INT,…): the sm90 backward generator's options for `b:` cases."""
    spec = os.environ.get("TL_PROFILE_BWD_OPTIONS", "")
    opts = {k: int(v) for k, _, v in (x.partition("=") for x in spec.split(",") if x)}
    return [opts] if opts else None


def _backward_child(kind: str, name: str, seqlen: int) -> int:
    """One variant's backward (ours: the derived kernels, FA4's: autograd of its native call) launched
    WARMUP + 1 times on `benchmarks/variants_backward.py`'s inputs."""
    import math
    import zlib

    import torch

    from benchmarks import variants_backward as vb
    from benchmarks.variant_cases import fa4_native, side_tensors
    from kernel_ir.program import Forward
    from runner.launch import launch

    B, H, D, S = max(1, vb.TOKENS // seqlen), vb.HEADS, vb.HEAD_DIM, seqlen
    scale = 1 / math.sqrt(D)
    g = torch.Generator(device="cuda").manual_seed(S)
    q, k, v, do = (torch.randn(B, S, H, D, device="cuda", generator=g).to(torch.bfloat16) for _ in range(4))
    options = _backward_options()
    loaded, builds = vb.build([name], options)
    if options:  # the options' build, in the default's place
        builds[name] = builds[f"{name}{vb.AB}1"]
    spec_program = loaded[name].spec.program  # None for a plain kernel: no scalars, no side tensors
    program = Forward.from_dict(spec_program) if spec_program else None
    gv = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"{name}:{S}".encode()))
    side = side_tensors(program, B, H, H, S, gv) if program else {}
    if kind == "tl":
        o, lse = torch.empty_like(q), torch.empty(B, H, S, device="cuda", dtype=torch.float32)
        launch(loaded[name], q, k, v, o, lse, extras=side)
        run = lambda i: builds[name].run(q, k, v, o, lse, do, scale=scale, extras=side)  # noqa: E731
    else:
        native = fa4_native(name, {s.name: s.default for s in program.scalars} if program else {}, side)
        if native is None:
            print(f"{name}: FA4 does not run this variant natively", file=sys.stderr)
            return 2
        from flash_attn.cute import flash_attn_func

        leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
        out = flash_attn_func(*leaves, softmax_scale=scale, **native)
        out = out[0] if isinstance(out, tuple) else out
        run = lambda i: torch.autograd.grad(out, leaves, do, retain_graph=True)  # noqa: E731
    return _launch_profiled(run)


def _name_filter(kind: str, case: str) -> str:
    """ncu's kernel filter: a variant's kernel by its exact name (its launch-time block-mask kernel, named
    `<kernel>_block_mask`, is not the one profiled); a backward's dQ/dK/dV kernel, FA4's main backward."""
    if case.startswith("b:"):
        return "regex:_bwd_dq_dk_dv$" if kind == "tl" else "regex:FlashAttentionBackwardSm90"
    if kind == "tl" and case.startswith("v:"):
        return f"regex:^{_variant_spec(*_variant_case(case)).spec.kernel_name}$"
    return NAME_FILTER[kind]


def _variant_spec(name: str, hdim: int = 128):  # -> Translation
    from benchmarks.variant_cases import VARIANTS_DIR, for_shape
    from pipeline.build import translate_text

    text = for_shape((VARIANTS_DIR / f"{name}.tl").read_text(), "bf16", hdim)
    return translate_text(text, Path(f"{name}_ncu.tl"))


def _load_variant(name: str, hdim: int = 128):  # -> LoadedKernel
    from pipeline.build import compile_all
    from runner.launch import load, require_device

    t = _variant_spec(name, hdim)
    built = compile_all([t], device_arch=require_device())[0]
    return load(built.compiled, t.spec)


def _child(kind: str, case: str, seqlen: int, params: dict[str, int]) -> int:
    if case.startswith("b:"):
        return _backward_child(kind, case[2:], seqlen)
    if case.startswith("v:"):
        return _variant_child(kind, case, seqlen)
    import torch

    from pipeline.benchmark import sweep_shape
    from runner.baselines import default_scale
    from runner.bench import make_bench_inputs

    d, mask = CASES[case]
    shape = sweep_shape(seqlen, d)
    inputs = make_bench_inputs(shape, d, d, "bf16")
    if kind == "tl":
        from runner.bench import kernel_run

        run = kernel_run(_load(d, mask, params), inputs)
    else:
        from runner.baselines import BASELINES

        run = next(b for b in BASELINES if b.name == "fa4").prepare(inputs, mask, default_scale(d))
        # prepare() ran it once already: one launch fewer to skip
    for i in range(WARMUP + (0 if kind == "tl" else -1)):
        run(i)
    torch.cuda.synchronize()
    run(WARMUP)  # the profiled launch
    torch.cuda.synchronize()
    return 0


def _config(d: int, mask: str, params: dict[str, int]):  # -> KernelConfig
    from pipeline.variants import KernelConfig

    return KernelConfig(d, "bf16", mask, target="sm_90", params=tuple(params.items()))


def _load(d: int, mask: str, params: dict[str, int]):  # -> LoadedKernel
    from pipeline.build import compile_all
    from runner.launch import load, require_device

    t = _config(d, mask, params).translate()
    built = compile_all([t], device_arch=require_device())[0]
    return load(built.compiled, t.spec)  # a BuildError has no .compiled: let it raise with its message


def _precompile(cases: list[str], params: dict[int, dict[str, int]]) -> None:
    from pipeline.build import compile_all
    from runner.launch import require_device

    items = []
    if names := [c[2:] for c in cases if c.startswith("b:")]:
        from benchmarks.variants_backward import build

        build(names, _backward_options())  # into the kernel cache, for the children
    for case in cases:
        if case.startswith("b:"):
            continue
        if case.startswith("v:"):
            items.append(_variant_spec(*_variant_case(case)))
            continue
        d, mask = CASES[case]
        items.append(_config(d, mask, params.get(d, {})).translate())
    for built in compile_all(items, device_arch=require_device()):
        if not hasattr(built, "compiled"):
            print(f"compile failed: {built}", file=sys.stderr)


def _ncu_page(report: Path, *args: str) -> str:
    cmd = ["ncu", "--import", str(report), "--csv", *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def _raw_metrics(report: Path) -> dict[str, str]:
    return raw_from_csv(_ncu_page(report, "--page", "raw", "--print-units", "base"))


def raw_from_csv(text: str) -> dict[str, str]:
    """The profiled kernel's raw metrics (the longest one, should the filter have caught another)."""
    rows = list(csv.reader(io.StringIO(text)))
    if len(rows) < 3:
        return {}
    header, data = rows[0], rows[2:]  # rows[1] holds the units
    best = max(data, key=lambda r: _num(r[header.index("gpu__time_duration.sum")]) or 0.0)
    return dict(zip(header, best, strict=False))


def opcode_mix_from_csv(text: str, column: str = "Instructions Executed") -> dict[str, int]:
    """Per opcode (without modifiers or predicate), the sum of one column of ncu's SASS source page
    (`--page source --print-source sass`): warp instructions executed by default, or the warp stall
    samples ("Warp Stall Sampling (All Samples)": where the warps wait, charged to the instruction they wait
    to issue). Where two kernels' instruction counts and waits differ."""
    from runner.sass import base_opcode

    rows = list(csv.reader(io.StringIO(text)))
    start = next((i for i, r in enumerate(rows) if "Source" in r and column in r), None)
    if start is None:
        return {}
    header = rows[start]
    src, col = header.index("Source"), header.index(column)
    mix: dict[str, int] = {}
    for r in rows[start + 1 :]:
        if len(r) <= max(src, col) or not r[src].strip():
            continue
        op = base_opcode(r[src])
        mix[op] = mix.get(op, 0) + int(_num(r[col]) or 0)
    return mix


SAMPLES = "Warp Stall Sampling (All Samples)"


def _num(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def _row_value(metrics: dict[str, str], pattern: str) -> str:
    for name, value in metrics.items():
        if re.match(pattern, name):
            v = _num(value)
            if v is None:
                return value
            if name == "smsp__inst_executed.sum" or name.endswith("per_second"):
                v /= 1e6
            elif name == "gpu__time_duration.sum":
                v /= 1e3  # ns → us
            return f"{v:.1f}"
    return "-"


def _parse_params(spec: str) -> dict[int, dict[str, int]]:
    """`hd64:BN=128,hd128:persistent=1` → {64: {"BN": 128}, 128: {"persistent": 1}}."""
    out: dict[int, dict[str, int]] = {}
    for part in filter(None, spec.split(",")):
        hd, _, kv = part.partition(":")
        k, _, v = kv.partition("=")
        out.setdefault(int(hd.removeprefix("hd")), {})[k] = int(v)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("ncu-out"))
    ap.add_argument("--kernels", default="tl,fa4")
    ap.add_argument("--cases", default="hd128,hd64,hd64-causal")
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--sm90-params", default="", help="Params of our kernel per head dim: hd64:BN=128,…")
    ap.add_argument("--timeout-s", type=int, default=240, help="per profile")
    ap.add_argument("--child", nargs=2, metavar=("KERNEL", "CASE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    params = _parse_params(args.sm90_params)
    cases = args.cases.split(",")
    if args.child:
        kind, case = args.child
        return _child(kind, case, args.seqlen, params.get(CASES.get(case, (128,))[0], {}))

    if shutil.which("ncu") is None:
        print("profile_ncu: ncu is not on the PATH", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    kinds = args.kernels.split(",")
    if "tl" in kinds:
        _precompile(cases, params)
    columns: dict[str, dict[str, str]] = {}
    mixes: dict[str, dict[str, int]] = {}
    samples: dict[str, dict[str, int]] = {}
    for case in cases:
        for kind in kinds:
            label = f"{kind}:{case}"
            slug = case.replace(":", "-").replace("@", "-d")  # names the device returns
            report = args.out / f"{kind}_{slug}"
            cmd = [
                "ncu", "--set", "full", "--clock-control", "none", "--target-processes", "all",
                "--kernel-name", _name_filter(kind, case),
                "--launch-skip", str(WARMUP), "--launch-count", "1",
                "--force-overwrite", "--export", str(report),
                sys.executable, __file__, "--child", kind, case, "--seqlen", str(args.seqlen),
                "--sm90-params", args.sm90_params,
            ]  # fmt: skip
            try:
                proc = subprocess.run(
                    cmd, capture_output=True, text=True, timeout=args.timeout_s, env=os.environ
                )
                log = proc.stdout + proc.stderr
            except subprocess.TimeoutExpired as exc:
                log = f"timed out after {args.timeout_s}s\n{exc.stdout or ''}{exc.stderr or ''}"
            (args.out / f"{kind}_{slug}.log").write_text(str(log))
            rep = report.with_suffix(".ncu-rep")
            if not rep.exists():
                print(f"{label}: no report; the log's end:\n{str(log)[-1500:]}")
                continue
            metrics = _raw_metrics(rep)
            (args.out / f"{kind}_{slug}.json").write_text(json.dumps(metrics, indent=1))
            columns[label] = metrics
            source = _ncu_page(rep, "--page", "source", "--print-source", "sass")
            (args.out / f"{kind}_{slug}_sass.csv").write_text(source)
            mixes[label] = opcode_mix_from_csv(source)
            samples[label] = opcode_mix_from_csv(source, SAMPLES)
    if not columns:
        return 1
    _print_table(columns)
    _print_mix(mixes, "instructions executed (M) by opcode", 1e-6)
    _print_mix(samples, "stall samples (% of the kernel's) by opcode waiting to issue", None)
    return 0


def _print_table(columns: dict[str, dict[str, str]]) -> None:
    labels = list(columns)
    width = max(12, *(len(x) for x in labels))
    print("\n" + "metric".ljust(28) + "".join(x.rjust(width + 2) for x in labels))
    for title, pattern in ROWS:
        print(title.ljust(28) + "".join(_row_value(columns[x], pattern).rjust(width + 2) for x in labels))
    stalls: dict[str, dict[str, float]] = {}
    for label, metrics in columns.items():
        for name, value in metrics.items():
            m = STALL.match(name)
            if m and (v := _num(value)) is not None:
                stalls.setdefault(m.group(1), {})[label] = v
    top = sorted(stalls, key=lambda s: -max(stalls[s].values()))[:10]
    print("stall (warps per issue)")
    for s in top:
        print(f"  {s}".ljust(28) + "".join(f"{stalls[s].get(x, 0.0):.2f}".rjust(width + 2) for x in labels))


def _print_mix(mixes: dict[str, dict[str, int]], title: str, scale: float | None, top: int = 16) -> None:
    """One row per opcode, the opcodes with the most in any profile first; `scale` None: % of the total."""
    labels = [x for x in mixes if mixes[x]]
    if not labels:
        return
    width = max(12, *(len(x) for x in labels))
    totals = {x: sum(mixes[x].values()) for x in labels}

    def cell(x: str, v: int) -> str:
        return f"{v * scale:.2f}" if scale is not None else f"{100 * v / max(totals[x], 1):.1f}"

    ops = sorted(
        {o for x in labels for o in mixes[x]}, key=lambda o: -max(mixes[x].get(o, 0) for x in labels)
    )
    print(title)
    if scale is not None:
        print("  total".ljust(28) + "".join(f"{totals[x] * scale:.1f}".rjust(width + 2) for x in labels))
    for o in ops[:top]:
        print(f"  {o}".ljust(28) + "".join(cell(x, mixes[x].get(o, 0)).rjust(width + 2) for x in labels))


if __name__ == "__main__":
    sys.exit(main())
