"""Build and verify the derived backward kernels over TL programs × dtypes × head dims × odd shapes.

    python3 benchmarks/backward_verify.py --build .cache/bwd          # no GPU: NVRTC + ptxas for sm_90
    python3 benchmarks/backward_verify.py --run .cache/bwd            # on the H200: verify every case
    python3 benchmarks/backward_verify.py --build .cache/bwd --skeleton sm90   # + the wgmma kernels (_sm90)

`--build` writes, per case, the .bwd.cu, its launch json and the cubin (sm_80 source finalised for the
device's sm_90 by ptxas, as `runner.compile` does when an sm_80 kernel meets an H200), so the device run
spends no time compiling. `--run` checks dQ, dK, dV (and learnable side-tensor gradients) of every case
against autograd of the IR's float32 reference (`runner.backward_verify`) and prints one line per case
and a summary table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (TL file, learnable side tensors): the plain kernels and every catalogue variant
LEARNABLE = {"alibi": ("slopes",), "relative_bias": ("rel",), "learnable_sink": ("sinks",)}
PROGRAMS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("examples/mha_fwd.tl", ()),
    ("examples/causal_mha_fwd.tl", ()),
    *(
        (f"examples/variants/{p.stem}.tl", LEARNABLE.get(p.stem, ()))
        for p in sorted((ROOT / "examples" / "variants").glob("*.tl"))
    ),
)
# built a second time with a deterministic dQ (tag suffix _det): the rerun must give the same bits
DETERMINISTIC = ("mha_fwd", "causal_mha_fwd", "alibi")
# (B, H, Hkv, Sq, Sk): lengths 1, 17, 1000, 4097; Sq != Sk; GQA 2 and 7
SHAPES = (
    (1, 2, 2, 1, 1),
    (2, 4, 2, 17, 17),
    (1, 7, 1, 1000, 1000),
    (1, 2, 1, 4097, 4097),
    (2, 4, 4, 17, 1000),
    (1, 14, 2, 1000, 333),
    (1, 2, 2, 333, 1000),
)
# the TL requires seqlen_q == seqlen_k
SAME_LENGTH = ("relative_bias", "document_mask", "global_sliding", "prefix_softcap_document")


def cases(
    full: bool, only: str = "", dims: tuple[int, ...] | None = None
) -> list[tuple[str, tuple[str, ...], str, int, bool]]:
    """(TL file, learnable, dtype, head dim, deterministic): every program in bf16 and fp16 at d 128
    (`full`: d 64 too; else d 64 for the plain kernels), and the DETERMINISTIC ones in bf16 at d 128;
    `dims`: every program in both dtypes at each of these head dims, the DETERMINISTIC ones in bf16."""
    import re

    out = []
    for path, learn in PROGRAMS:
        stem = Path(path).stem
        for dtype in ("bf16", "fp16"):
            for d in dims or (128, 64):
                if dims is None and d == 64 and not full and not (dtype == "bf16" and "mha" in path):
                    continue
                out.append((path, learn, dtype, d, False))
        if stem in DETERMINISTIC:
            out += [(path, learn, "bf16", d, True) for d in dims or (128,)]
    return [c for c in out if not only or re.search(only, tag(*c))]


def tag(path: str, learn: tuple[str, ...], dtype: str, d: int, deterministic: bool) -> str:
    return f"{Path(path).stem}_{dtype}_d{d}" + ("_det" if deterministic else "")


def _text(path: str, d: int, dtype: str = "bf16") -> str:
    """`path` at head dim `d`; above 128 on the sm_90 target with the planner's forward tiles there
    (`variant_cases.for_shape`: the files' tiles do not fit d 256's shared memory)."""
    text = (ROOT / path).read_text()
    if d > 128:
        from benchmarks.variant_cases import for_shape

        return for_shape(text, dtype, d)
    return text.replace("Param d = 128", f"Param d = {d}") if d != 128 else text


# --skeleton: the keywords of `translate_backward` and the suffix of the case tags ("sm90": the wgmma
# dQ/dK/dV kernel, an sm_90a cubin, timed beside the sm80 skeleton by `backward.py --also _sm90`;
# "sm90ovl": that kernel with P computed while dP's wgmma runs, `generate_backward_sm90(overlap_p=True)`
# through translate_backward's generator options; it refuses programs whose dS reads the raw score
# (softcap, sigmoid, ReLU): pick the others with --only; "sm90km":
# the default with the grid key block column first wherever, `key_major=True`; "sm90hs": key column
# first within sections of heads that fit in L2, `head_sections=True`; "sm90dqb": dQ through
# shared memory and one bulk reduce-add a block, `dq_bulk=True` (d 128's default); "sm90atom": dQ by
# float4 atomics, `dq_bulk=False` (d 64's default); "sm90ovlq": overlap_p and dq_bulk;
# "sm90m80": 80-row query tiles with dQ computed transposed, `block_m=80` (d 128 only); "sm90m80q": that
# and dq_bulk; "sm90m128": 128-row query tiles, `block_m=128` (d 64 only, FA3's d 64 tile; the default
# there for plain and causal programs); "sm90m64": 64-row query tiles, `block_m=64` (d 64's other tile);
# "sm80m128": the mma.sync skeleton on FA2's 128 × 128 d 64 tile, `block_m=128` (d 64 only; the default
# there on sm_80 and sm_90); "sm80m64": its 64 × 128 tile, `block_m=64` (d 64's other tile))
SKELETONS = {
    "sm80": ({"arch": "sm_80", "skeleton": "sm80"}, ""),
    "sm90": ({"arch": "sm_90", "skeleton": "sm90"}, "_sm90"),
    "sm90ovl": ({"arch": "sm_90", "skeleton": "sm90", "options": {"overlap_p": True}}, "_sm90ovl"),
    "sm90km": ({"arch": "sm_90", "skeleton": "sm90", "options": {"key_major": True}}, "_sm90km"),
    "sm90hs": ({"arch": "sm_90", "skeleton": "sm90", "options": {"head_sections": True}}, "_sm90hs"),
    "sm90dqb": ({"arch": "sm_90", "skeleton": "sm90", "options": {"dq_bulk": True}}, "_sm90dqb"),
    "sm90atom": ({"arch": "sm_90", "skeleton": "sm90", "options": {"dq_bulk": False}}, "_sm90atom"),
    "sm90ovlq": (
        {"arch": "sm_90", "skeleton": "sm90", "options": {"overlap_p": True, "dq_bulk": True}},
        "_sm90ovlq",
    ),
    "sm80m128": ({"arch": "sm_80", "skeleton": "sm80", "options": {"block_m": 128}}, "_sm80m128"),
    "sm80m64": ({"arch": "sm_80", "skeleton": "sm80", "options": {"block_m": 64}}, "_sm80m64"),
    "sm90m80": ({"arch": "sm_90", "skeleton": "sm90", "options": {"block_m": 80}}, "_sm90m80"),
    "sm90m128": ({"arch": "sm_90", "skeleton": "sm90", "options": {"block_m": 128}}, "_sm90m128"),
    "sm90m64": ({"arch": "sm_90", "skeleton": "sm90", "options": {"block_m": 64}}, "_sm90m64"),
    "sm90m80q": (
        {"arch": "sm_90", "skeleton": "sm90", "options": {"block_m": 80, "dq_bulk": True}},
        "_sm90m80q",
    ),
}


def build(
    out: Path,
    full: bool,
    only: str = "",
    nvcc: bool = False,
    skeleton: str = "sm80",
    dims: tuple[int, ...] | None = None,
) -> None:
    from pipeline.backward import translate_backward
    from runner.compile import CompileJob, compile_many

    out.mkdir(parents=True, exist_ok=True)
    builds, jobs = [], []
    keywords, suffix = SKELETONS[skeleton]
    for case in cases(full, only, dims):
        path, learn, dtype, d, det = case
        text = _text(path, d, dtype)
        b = translate_backward(text, dtype=dtype, learnable=learn, deterministic=det, **keywords)
        name = tag(*case) + suffix
        cu = out / f"{name}.bwd.cu"
        if cu.exists() and cu.read_text() == b.source and (out / f"{name}.cubin").exists():
            print(f"{name}: up to date")
            continue
        cu.write_text(b.source)
        (out / f"{name}.json").write_text(json.dumps({"tl": path, "spec": json.loads(b.spec.to_json())}))
        builds.append(name)
        jobs.append(CompileJob(source=b.source, arch=b.spec.arch, name=f"{name}.bwd.cu", device_arch="sm_90"))
    start = time.perf_counter()
    arch = "sm_90a" if skeleton.startswith("sm90") else "sm_90"
    results = _nvcc_many(out, builds, arch) if nvcc else compile_many(jobs)
    for name, r in zip(builds, results, strict=True):
        if isinstance(r, Exception):
            print(f"{name}: COMPILE FAILED {r}")
            continue
        (out / f"{name}.cubin").write_bytes(r.code)
        print(f"{name}: {r.kind} for {r.sass_arch or r.target}, {len(r.code)} bytes, {r.seconds:.0f} s")
    print(f"built {len(builds)} in {time.perf_counter() - start:.0f} s")


def _nvcc_many(out: Path, tags: list[str], arch: str = "sm_90") -> list[Any]:
    """sm_90 cubins from the toolkit's nvcc, one per core: where it is the device driver's CUDA version
    and the NVRTC here is newer (its PTX does not load there), these run on the device without a build."""
    import os
    import shutil
    import subprocess
    from concurrent.futures import ThreadPoolExecutor
    from types import SimpleNamespace

    import cutlass_library

    include = Path(cutlass_library.__file__).parent / "source" / "include"
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"

    def one(tag: str) -> Any:
        start = time.perf_counter()
        cubin = out / f"{tag}.cubin"
        cmd = [
            nvcc,
            "-cubin",
            f"-arch={arch}",
            "-std=c++17",
            f"-I{include}",
            "-o",
            str(cubin),
            str(out / f"{tag}.bwd.cu"),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            return RuntimeError(done.stderr[-2000:])
        return SimpleNamespace(code=cubin.read_bytes(), kind="cubin", sass_arch="sm_90", target="sm_90",
                               seconds=time.perf_counter() - start)  # fmt: skip

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return list(pool.map(one, tags))


def module_image(path: Path, arch: str) -> Any:
    """A built module as `runner.compile` hands it over: an ELF cubin (ptxas finalised it for the device)
    or PTX (NVRTC's output for an older arch, JIT-compiled by the driver at load: the sm_80 path)."""
    from runner.compile import CompiledKernel

    code = path.read_bytes()
    kind = "cubin" if code[:4] == b"\x7fELF" else "ptx"
    target = "sm_90" if kind == "cubin" else f"compute_{arch.removeprefix('sm_')}"
    return CompiledKernel(code, kind, target, arch, path.name, "", 0.0, True, path.stem)


def run(src: Path, shapes: str, repeats: int = 1) -> int:
    """Every case in `src` on every shape, `repeats` draws each; a draw's seed depends on the shape and
    the repeat only, so two builds of one program (`_sm90`, `_sm90ws`) see the same inputs."""
    import torch

    from runner.abi import BackwardSpec
    from runner.backward import load_backward
    from runner.backward_verify import verify_backward
    from runner.verify import Shape

    picked = (
        SHAPES if shapes == "all" else tuple(tuple(int(x) for x in s.split(",")) for s in shapes.split(";"))
    )
    failed = total = 0
    for meta in sorted(src.glob("*.json")):
        tag = meta.stem
        if tag.endswith(".fwd"):  # a forward `benchmarks/backward.py --build-forwards` wrote beside them
            continue
        cubin = src / f"{tag}.cubin"
        if not cubin.exists():
            print(f"{tag}: no cubin")
            continue
        spec = BackwardSpec.from_json(json.dumps(json.loads(meta.read_text())["spec"]))
        compiled = module_image(cubin, spec.arch)
        try:
            loaded = load_backward(compiled, spec)
        except Exception as exc:
            print(f"{tag}: LOAD FAILED {exc}")
            failed += 1
            continue
        for i, s in enumerate(p for p in picked for _ in range(repeats)):
            shape = Shape(*s)
            if any(n in tag for n in SAME_LENGTH) and shape.seqlen_q != shape.seqlen_k:
                continue
            total += 1
            try:
                res = verify_backward(loaded, shape, seed=i)
                line = res.line()
                failed += not res.passed
            except Exception as exc:  # report and go on: one case must not hide the others
                line = f"{tag} {shape}: ERROR {type(exc).__name__}: {str(exc)[:300]}"
                failed += 1
            print(f"{tag}: {line}", flush=True)
        torch.cuda.synchronize()
    print(f"backward verification: {total - failed}/{total} passed on {torch.cuda.get_device_name()}")
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", type=Path)
    ap.add_argument("--run", type=Path)
    ap.add_argument("--full", action="store_true", help="every program in both dtypes and head dims")
    ap.add_argument("--shapes", default="all", help="'all' or 'B,H,Hkv,Sq,Sk;…'")
    ap.add_argument("--only", default="", help="a regular expression over the case tags (stem_dtype_dN)")
    ap.add_argument("--repeats", type=int, default=1, help="--run: draws per shape (seeds 0, 1, … per case)")
    ap.add_argument("--nvcc", action="store_true", help="--build with the toolkit's nvcc (sm_90 cubins)")
    ap.add_argument("--dims", default="", help="--build: head dims for every program, e.g. 256")
    ap.add_argument(
        "--skeleton",
        choices=tuple(SKELETONS),
        default="sm80",
        help="--build: sm90 = the wgmma dQ/dK/dV kernel, tags _sm90; sm90ovl = it with P overlapping dP's "
        "wgmma (overlap_p), tags _sm90ovl; sm90km = it key-major, tags _sm90km; sm90dqb = it with dQ's "
        "bulk add (dq_bulk), tags _sm90dqb; sm90ovlq = both, tags _sm90ovlq; sm90m80 = 80-row query tiles "
        "(d 128), tags _sm90m80; sm90m80q = that and dq_bulk, tags _sm90m80q; sm90atom = dQ by atomics, "
        "tags _sm90atom; sm90m128 = 128-row query tiles (d 64), tags _sm90m128; sm90m64 = 64-row query "
        "tiles, tags _sm90m64; sm80m128 / sm80m64 = the sm_80 skeleton's 128- / 64-row query tiles "
        "(d 64), tags _sm80m128 / _sm80m64",
    )
    args = ap.parse_args()
    if args.build:
        dims = tuple(int(x) for x in args.dims.split(",")) if args.dims else None
        build(args.build, args.full, args.only, nvcc=args.nvcc, skeleton=args.skeleton, dims=dims)
    if args.run:
        return run(args.run, args.shapes, args.repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
