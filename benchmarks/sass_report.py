"""Registers, spills and the instructions that matter in the generated kernels' SASS (run on the GPU machine).

    python benchmarks/sass_report.py --out DIR

For each kernel (the sm_80 path and the Hopper path, bf16 hd128 non-causal) it translates the same TL
variant the GPU suite and the benchmark build (so the compile is a cache hit there), loads it, reads the
driver's register / local-memory (spill) counts, disassembles the cubin with `cuobjdump --dump-sass` and
counts tensor-core (HMMA, HGMMA), copy (LDGSTS = cp.async, UTMALDG/UTMASTG = TMA, LDSM = ldmatrix, STSM) and
local-memory (LDL/STL) instructions. Prints one table; writes the SASS and a JSON beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

OPS = ("HMMA", "HGMMA", "LDGSTS", "UTMALDG", "UTMASTG", "LDSM", "STSM", "LDL", "STL")


def _func_attr(kernel: object, name: str) -> int | None:
    from cuda.bindings import driver

    attr = getattr(driver.CUfunction_attribute, name)
    handle = kernel.handle  # type: ignore[attr-defined]
    if not isinstance(handle, driver.CUfunction):
        err, handle = driver.cuKernelGetFunction(handle)
        if err != driver.CUresult.CUDA_SUCCESS:
            return None
    err, value = driver.cuFuncGetAttribute(attr, handle)
    return int(value) if err == driver.CUresult.CUDA_SUCCESS else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("sass-out"))
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    from pipeline.build import compile_all
    from pipeline.variants import KernelConfig
    from runner.launch import load, require_device
    from runner.sass import count, disassemble

    device_arch = require_device()
    configs = [KernelConfig(128, "bf16", "none", target=t) for t in ("sm_80", "sm_90")]
    items = [c.translate() for c in configs]
    rows = []
    for cfg, t, built in zip(configs, items, compile_all(items, device_arch=device_arch), strict=True):
        compiled = built.compiled  # a BuildError has no .compiled: let it raise with its message
        loaded = load(compiled, t.spec)
        row: dict[str, object] = {
            "kernel": cfg.name,
            "arch": t.spec.arch,
            "binary": f"{compiled.kind} for {compiled.sass_arch or compiled.target}",
            "registers": _func_attr(loaded.kernel, "CU_FUNC_ATTRIBUTE_NUM_REGS"),
            "local_bytes": _func_attr(loaded.kernel, "CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES"),
            "cached": compiled.cached,
        }
        if compiled.kind == "cubin":
            sass = disassemble(compiled.code)
            (args.out / f"{cfg.name}.sass").write_text(sass)
            row.update(count(sass, OPS))
        rows.append(row)
    (args.out / "sass.json").write_text(json.dumps(rows, indent=2))
    cols = ["kernel", "binary", "registers", "local_bytes", *OPS]
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(str(r.get(c, "-")) for c in cols))
    return 0


if __name__ == "__main__":
    sys.exit(main())
