"""The last step every backend shares: render the written kernel (with its CUDA line → TL line map) and
describe its launch from the plan."""

from __future__ import annotations

from typing import Any

from runner.abi import ATTENTION_PARAMS, COMBINE_THREADS, LaunchSpec, program_params
from tl_language.inference import Inference
from translator.plan import KernelPlan
from translator.writer import CodeWriter


def render(
    w: CodeWriter, plan: KernelPlan, tl_file: str | None, line_directives: bool
) -> tuple[str, dict[int, int]]:
    """The source, named after the TL file (or the kernel), and its source map."""
    shown = tl_file.replace("\\", "/").rsplit("/", 1)[-1] if tl_file else None
    cu_file = (shown.rsplit(".", 1)[0] if shown else plan.kernel_name) + ".cu"
    return w.render(tl_file=shown, cu_file=cu_file, line_directives=line_directives)


def launch_spec(
    plan: KernelPlan, *, tl_file: str | None, threads: int, shared_bytes: int, arch: str, **extra: Any
) -> LaunchSpec:
    """What the runner needs to launch the kernel: the plan's shape facts plus the backend's block size,
    shared memory and architecture (and anything backend-specific in `extra`)."""
    program = None if plan.ir.plain else plan.ir.to_dict()
    base = extra.pop("params", tuple(p[0] for p in ATTENTION_PARAMS))
    extra["params"] = tuple(base) + tuple(p[0] for p in program_params(program))
    return LaunchSpec(
        kernel_name=plan.kernel_name,
        block_m=plan.block_m,
        threads=threads,
        shared_bytes=shared_bytes,
        dtype=plan.dtype,
        head_dim_qk=plan.head_dim_qk,
        head_dim_v=plan.head_dim_v,
        mask=plan.mask,
        arch=arch,
        window=plan.window,
        group=plan.group,
        tl_file=tl_file,
        block_n=plan.block_n,
        heads_kv=plan.heads_kv,
        program=program,
        **extra,
    )


def inference_spec(inf: Inference, combine: str | None) -> dict[str, Any]:
    """`LaunchSpec.inference` of a kernel with the inference ABI: its inference Params and the name of
    its combine kernel (None: it has none)."""
    return {
        "splits": inf.splits,
        "page_size": inf.page_size,
        "pack_gqa": inf.pack_gqa,
        "varlen": inf.varlen,
        "combine": combine,
        # the combine's warps a block, which the launch shares out by rows (`warps_per_row`)
        **({"combine_warps": COMBINE_THREADS // 32} if combine else {}),
    }
