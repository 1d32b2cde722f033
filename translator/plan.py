"""The kernel plan: what a checked TL document asks the GPU to do, as pure data.

`make_plan` recognises the attention pattern in the TL statements (Q/K/V/O in global memory, the Q tile,
the loop over key blocks with its K and V tiles, the two GEMMs, the softmax and the Reshape between them,
the division by the row sum and the store of O) and records the TL line of every statement. Backends
(sm_80-style today, Hopper later) consume only this plan, never the syntax tree, so one TL document builds
for several architectures. A statement outside the pattern raises `TranslateError` (TL501) on its range.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel_ir.program import PLAIN_SCORE, Forward
from tl_language import resources as defaults
from tl_language import syntax as ast
from tl_language.inference import Inference, inference_of
from tl_language.model import Model
from tl_language.source import Position, Range
from translator.errors import TranslateError, unsupported
from translator.lower import lower_forward
from translator.pattern import Match, match_attention

# Tile and pipeline defaults when the TL leaves a Param out live in one place, `tl_language.resources`
# (`default_warps`, `default_stages`, `default_consumers`, `default_pingpong`), which the checker and the
# planner read too.


def copy_threads_per_row(head_dim: int) -> int:
    """Threads that copy one row of a shared-memory atom: 64-element (128-byte) atoms when the head
    dimension allows, else 32-element ones; each thread moves 8 elements (16 bytes)."""
    return 8 if head_dim % 64 == 0 else 4


@dataclass(frozen=True, slots=True)
class Step:
    """One TL statement the kernel executes: its role in the pattern, its 1-based line and its text."""

    kind: str  # see pattern.STEP_KINDS
    tl_line: int
    text: str


_PLAIN_FORWARD = Forward(score=PLAIN_SCORE)  # frozen: one instance serves every plan


@dataclass(frozen=True, slots=True)
class KernelPlan:
    kernel_name: str
    arch: str  # "sm_80", "sm_90" (the Hopper backend)
    compute_capability: tuple[int, int]
    dtype: str  # "fp16" | "bf16"
    block_m: int
    block_n: int
    head_dim_qk: int
    head_dim_v: int
    warps: int
    stages: int  # sm_80: K buffers (1: FA2's scheme, 2: K double-buffered); sm_90: depth of the TMA ring
    mask: str  # "none" | "causal" | "window"
    window: tuple[int, int]  # TL default (left, right); -1: unbounded. The launch may override it.
    group: int  # query heads per K/V head fixed by the TL; 0: from the launch shape
    heads_kv: int  # K/V heads fixed by the TL (1 for MQA); 0: from the launch shape
    names: dict[str, str]  # pattern role → TL tensor name: q, k, v, o, s, acc_o
    steps: tuple[Step, ...]  # source order
    header_lines: dict[str, int]  # "kernel" | "target" | "dtype" | "mask" | param name → TL line
    # sm_90 only (the mma.sync backend ignores them): consumer warp groups, intra-warp-group overlap of
    # Q·Kᵀ(n) with P·V(n+1), ping-pong between two consumer groups.
    consumers: int = 2
    overlap: bool = True
    pingpong: bool = False
    persistent: bool = False  # one block per SM walking the query tiles (sm_90)
    # sm_90: exp2s of every eight on the FP32 pipe (`Param fma_exps`); -1: the cost model decides.
    fma_exps: int = -1
    # The regions (score, masks, normaliser) as the kernel IR; the plain forward's unless the TL says more.
    ir: Forward = _PLAIN_FORWARD
    # Split-KV decode, paged KV, packed batches (`tl_language.inference`): built by the inference backend.
    inference: Inference | None = None

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def inference_kernel(self) -> bool:
        """Built by the inference backend (cp.async + mma.sync on every target): decode, paged KV and
        packed GQA. A packed prefill on sm_90 is the Hopper skeleton's, with the inference ABI, unless its
        masks need a launch-time block mask (which a packed batch does not build; the mma.sync kernel
        masks per score)."""
        inf = self.inference
        hopper = self.compute_capability >= (9, 0) and not self.ir.block_mask
        return inf is not None and not (hopper and inf.packed_prefill)

    def step(self, kind: str) -> Step | None:
        return next((s for s in self.steps if s.kind == kind), None)

    def steps_of(self, kind: str) -> list[Step]:
        return [s for s in self.steps if s.kind == kind]

    def line_of(self, kind: str) -> int | None:
        s = self.step(kind)
        return s.tl_line if s else self.header_lines.get(kind)

    def range_of(self, *keys: str) -> Range:
        """The whole TL line of the first of `keys` (a step kind or a header/Param name) the plan knows,
        where a diagnostic about it belongs; the file's first line when none is known."""
        for key in keys:
            line = self.line_of(key)
            if line is not None:
                return Range(Position(line - 1, 0), Position(line - 1, 200))
        return Range(Position(0, 0), Position(0, 0))


def make_plan(model: Model, text: str = "") -> KernelPlan:
    """Recognise the attention pattern in `model` and fix every tile size. Raises TranslateError."""
    m = match_attention(model)
    lines = text.splitlines()

    def step(kind: str, stmt: ast.Stmt) -> Step:
        n = stmt.range.start.line
        src = lines[n].split("#", 1)[0].strip() if n < len(lines) else kind
        return Step(kind, n + 1, src)

    steps = tuple(sorted((step(k, s) for k, s in m.steps), key=lambda s: s.tl_line))
    q_tile, k_tile, v_tile = (m.tile(r) for r in ("q", "k", "v"))
    block_m = _value(model, q_tile[0], m.stmt("load_q"), "BM (the Q tile's rows)")
    block_n = _value(model, k_tile[0], m.stmt("load_k"), "BN (the K tile's rows)")
    d_qk = _value(model, q_tile[1], m.stmt("load_q"), "the Q tile's head dimension")
    d_v = _value(model, v_tile[1], m.stmt("load_v"), "the V tile's head dimension")
    _agree(model, k_tile[1], d_qk, m.stmt("load_k"), "K's head dimension must equal Q's")
    _agree(model, v_tile[0], block_n, m.stmt("load_v"), "V's tile rows must equal K's (BN)")
    o_tile = m.tile("o")
    if o_tile is not None:
        _agree(model, o_tile[0], block_m, m.stmt("store_o"), "O's tile rows must equal Q's (BM)")
        _agree(model, o_tile[1], d_v, m.stmt("store_o"), "O's head dimension must equal V's")

    target = model.target
    warps = _param(model, "warps", defaults.default_warps(target, block_m, max(d_qk, d_v)))
    stages = _param(model, "stages", defaults.default_stages(target, max(d_qk, d_v), model.mask))
    consumers = _param(model, "consumers", defaults.default_consumers(block_m))
    overlap = _param(model, "overlap", 1)
    pingpong = _param(model, "pingpong", defaults.default_pingpong(consumers, overlap, max(d_qk, d_v)))
    persistent = _param(model, "persistent", defaults.HOPPER_PERSISTENT)
    fma_exps = _param(model, "fma_exps", -1)
    group = _param(model, "group", 0)
    heads_kv = _param(model, "heads_kv", 0)
    window = (-1, -1)
    if model.mask == "window":
        window = (_or(model.window[0], -1), _or(model.window[1], -1))

    header = _header_lines(model)
    fast_tanh = bool(_param(model, "fast_tanh", 0))
    ir = lower_forward(model, m, {k.kind: k.tl_line for k in steps}, fast_tanh=fast_tanh)
    plan = KernelPlan(
        kernel_name=model.kernel_name or "tl_attention_fwd",
        arch=model.target.arch,
        compute_capability=model.target.compute_capability,
        dtype=model.dtype,
        block_m=block_m,
        block_n=block_n,
        head_dim_qk=d_qk,
        head_dim_v=d_v,
        warps=warps,
        stages=stages,
        mask=model.mask,
        window=window,
        group=group,
        heads_kv=heads_kv,
        names=dict(m.names),
        steps=steps,
        header_lines=header,
        consumers=consumers,
        overlap=bool(overlap),
        pingpong=bool(pingpong),
        persistent=bool(persistent),
        fma_exps=fma_exps,
        ir=ir,
        inference=inference_of(model),
    )
    if target.wgmma and not plan.inference_kernel:
        _check_hopper(plan, model, m)
    else:
        _check_supported(plan, model, m)
    return plan


def _or(v: int | None, default: int) -> int:
    return default if v is None else v


def _value(model: Model, e: ast.Expr | None, stmt: ast.Stmt, what: str) -> int:
    v = model.evaluate(e)
    if v is None and e is None:
        raise TranslateError(
            [
                unsupported(
                    stmt.range,
                    (
                        f"this Copy has no tile shape, so {what} is unknown; write the tile, e.g. "
                        f"`(BM, d)` (a sketch: "
                        "`tl complete` fills it)"
                    ),
                )
            ]
        )
    if v is None:
        hint = f" (`{ast.expr_text(e)}` is still a `?` hole or symbolic)" if e is not None else ""
        raise TranslateError(
            [
                unsupported(
                    stmt.range,
                    f"{what} must be a number to translate{hint}; fill the Params (`tl complete` can)",
                )
            ]
        )
    return v


def _agree(model: Model, e: ast.Expr | None, want: int, stmt: ast.Stmt, what: str) -> None:
    v = model.evaluate(e)
    if v is not None and v != want:
        raise TranslateError([unsupported(stmt.range, f"{what}: found {v}, expected {want}")])


def _param(model: Model, name: str, default: int) -> int:
    p = model.params.get(name)
    if p is None:
        return default
    if p.value is None:
        raise TranslateError(
            [unsupported(p.stmt.range, f"Param {name} is a `?` hole; fill it before translating")]
        )
    return p.value


def _header_lines(model: Model) -> dict[str, int]:
    out: dict[str, int] = {}
    kinds = {ast.KernelStmt: "kernel", ast.TargetStmt: "target", ast.DtypeStmt: "dtype", ast.MaskStmt: "mask"}
    for s in model.statements:
        key = kinds.get(type(s))
        if key is not None:
            out.setdefault(key, s.range.start.line + 1)
    for name, p in model.params.items():
        out.setdefault(name, p.stmt.range.start.line + 1)
    return out


def _param_range(model: Model, name: str, fallback: ast.Stmt) -> ast.Range:
    p = model.params.get(name)
    return p.stmt.range if p is not None else fallback.range


def _check_supported(plan: KernelPlan, model: Model, m: Match) -> None:
    """Limits of the sm_80-style kernels, each reported on the statement that sets the offending value."""
    problems = []
    load_q, load_k, load_v = m.stmt("load_q"), m.stmt("load_k"), m.stmt("load_v")
    mma_k = 8 if plan.arch == "sm_75" else 16
    if plan.dtype not in ("fp16", "bf16"):
        problems.append(
            unsupported(
                _dtype_range(model, load_q),
                (
                    f"Dtype {plan.dtype} has no {plan.arch} mma.sync kernel here; fp16 and bf16 "
                    f"(bf16 from sm_80) are "
                    "supported"
                ),
            )
        )
    elif plan.arch == "sm_75" and plan.dtype != "fp16":
        problems.append(
            unsupported(
                _dtype_range(model, load_q),
                "sm_75 tensor cores take fp16 only; use Dtype fp16 or Target sm_80+",
            )
        )
    if plan.warps not in (1, 2, 4, 8, 16):
        problems.append(
            unsupported(
                _param_range(model, "warps", load_q), f"warps = {plan.warps}: supported are 1, 2, 4, 8 or 16"
            )
        )
    elif plan.block_m % (16 * plan.warps):
        problems.append(
            unsupported(
                load_q.range,
                (
                    f"BM = {plan.block_m} does not give each of the {plan.warps} warps whole 16-row "
                    f"MMA tiles; "
                    f"use a multiple of {16 * plan.warps}"
                ),
            )
        )
    if plan.block_n % 16 or plan.block_n < 16:
        problems.append(
            unsupported(load_k.range, f"BN = {plan.block_n}: the key tile must be a multiple of 16")
        )
    for d, stmt, what in ((plan.head_dim_qk, load_k, "d_qk"), (plan.head_dim_v, load_v, "d_v")):
        if d % 32 or d > 256:
            problems.append(
                unsupported(
                    stmt.range,
                    (
                        f"{what} = {d}: head dimensions must be multiples of 32 up to 256 (64, 96, "
                        f"128, 192, 256 …) "
                        f"for the {mma_k}-wide MMA and 128-byte swizzled rows"
                    ),
                )
            )
    if plan.stages not in (1, 2):
        problems.append(
            unsupported(
                _param_range(model, "stages", load_k),
                f"stages = {plan.stages}: supported are 1 (FA2's single K/V buffer) or 2 (double-buffered K)",
            )
        )
    if plan.group and plan.heads_kv:
        problems.append(
            unsupported(
                _param_range(model, "heads_kv", load_k), "give either Param group or Param heads_kv, not both"
            )
        )
    for d, tensors in (
        (plan.head_dim_qk, ((plan.block_m, load_q), (plan.block_n, load_k))),
        (plan.head_dim_v, ((plan.block_n, load_v), (plan.block_m, m.stmt("store_o")))),
    ):
        rows_per_pass = plan.threads // copy_threads_per_row(d)
        for rows, stmt in tensors:
            if rows % rows_per_pass:
                problems.append(
                    unsupported(
                        stmt.range,
                        (
                            f"a ({rows}, {d}) tile cannot be split evenly among {plan.threads} "
                            f"threads copying 16 "
                            f"bytes each ({rows_per_pass} rows per pass); use a multiple of "
                            f"{rows_per_pass} rows "
                            "or fewer warps"
                        ),
                    )
                )
    if problems:
        raise TranslateError(problems)


def _check_hopper(plan: KernelPlan, model: Model, m: Match) -> None:
    """sm_90: the mma.sync limits (warps' copy split, stages ≤ 2) do not apply; the Hopper backend's own
    limits (`translator/backends/sm90/config.py`) are checked when it builds the kernel. Here only what
    no backend takes: both GQA forms at once, and switches that are not 0 or 1."""
    problems = []
    if plan.group and plan.heads_kv:
        problems.append(
            unsupported(
                _param_range(model, "heads_kv", m.stmt("load_k")),
                "give either Param group or Param heads_kv, not both",
            )
        )
    for name in ("overlap", "pingpong", "persistent"):
        p = model.params.get(name)
        if p is not None and p.value not in (0, 1):
            problems.append(unsupported(p.stmt.range, f"{name} = {p.value}: expected 0 (off) or 1 (on)"))
    if problems:
        raise TranslateError(problems)


def _dtype_range(model: Model, fallback: ast.Stmt) -> ast.Range:
    for s in model.statements:
        if isinstance(s, ast.DtypeStmt):
            return s.range
    return fallback.range
