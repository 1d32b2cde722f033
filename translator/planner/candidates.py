"""Enumerate tilings, keep those the target can run, score them with the cost model, rank them.

A parameter the file fixes stays fixed; a `?` parameter (or one the file does not declare: warps, stages)
is searched. Limits (each candidate respects all of them, `tests/translator/planner` checks every target):
  - MMA granularity: BM % (mma.m · warps) == 0 and BN a multiple of 16 and of the MMA's n and k;
  - shared memory per block (all stages) ≤ the target's opt-in limit;
  - registers per thread ≤ the target's limit (no spilling);
  - threads ≤ the block limit; the head dimension one the kernels support; the dtype one the target takes;
  - every thread moves whole 16-byte copies of each tile.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from kernel_ir.program import Forward
from tl_language import gpu
from tl_language import resources as core_resources
from tl_language.model import Model
from translator.plan import copy_threads_per_row
from translator.planner.cost import DEFAULT_SHAPE, Shape, estimate
from translator.planner.masks import Masks, lowered, masks_in
from translator.planner.query_rows import hopper_rows
from translator.planner.resources import Resources, Tiling, register_budget, resources
from translator.planner.roles import Roles, find_roles

BLOCK_M = (64, 128, 192, 256)
BLOCK_N = (32, 64, 128, 256)
# sm_90: wgmma N is any multiple of 8 (16 for the P·V K-slices), and the measured best tiles are not powers of
# two (128×160 at head dim 128, 128×80 at 256: docs/hopper.md), so the key tile is searched in steps of 16.
BLOCK_N_WGMMA = (64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256)
WARPS = (4, 8)
STAGES = (1, 2)
# Head dimension assumed for a `?` head dim (the problem's, not the kernel's, so the planner says so).
DEFAULT_HEAD_DIM = 128


# A role the file does not declare takes the default the checker and the translator assume without the
# Param (`tl_language.resources.default_warps` / `default_stages`), which depends on the tile: marked
# here and resolved per tiling.
_FROM_TILE = 0


def _defaults(target: gpu.Target) -> dict[str, int]:
    """Values of roles a file does not declare (warps and stages: `_FROM_TILE`, resolved per tiling)."""
    return {"warps": _FROM_TILE, "stages": _FROM_TILE, "d_qk": DEFAULT_HEAD_DIM}


@dataclass(slots=True)
class Candidate:
    rank: int
    values: dict[str, int]  # param name -> value, for every planned role the file declares
    holes: dict[str, int]  # the subset that was `?` in the file (what `fill` writes)
    tiling: Tiling
    resources: Resources
    score: float  # predicted fraction of tensor-core peak
    breakdown: dict[str, float]
    reasons: list[str] = field(default_factory=list)
    measured: bool = False  # the target's measured default tile (sm_90: `hopper_tile`), ranked first

    def summary(self) -> str:
        t, b = self.tiling, self.breakdown
        return (
            f"BM={t.block_m} BN={t.block_n} warps={t.warps} stages={t.stages}: "
            f"predicted {self.score:.0%} of tensor peak; {self.resources.blocks_per_sm} block(s)/SM "
            f"(limited by {self.resources.limited_by}), {self.resources.shared_bytes // 1024} KiB shared, "
            f"~{self.resources.registers} regs/thread, {b['waves']:.0f} wave(s) at "
            f"{b['wave_efficiency']:.0%}, MMA feed {b['mma_feed_efficiency']:.0%}"
        )


@dataclass(slots=True)
class Plan:
    candidates: list[Candidate]
    roles: Roles
    problems: list[str]  # why nothing (or less than expected) could be planned
    rejected: dict[str, int]  # limit -> how many tilings it rejected


def granularity_ok(t: Tiling, target: gpu.Target) -> str | None:
    """None if the tiling is legal for the target's MMA and copies, else the limit it breaks."""
    mma = target.mma.get(t.dtype)
    if mma is None:
        return "dtype"
    if target.wgmma:
        return _hopper_granularity(t)
    if t.block_m % (mma.m * t.warps) != 0:
        return "MMA granularity (BM)"
    n_unit = math.lcm(16, mma.n, mma.k)
    if t.block_n % n_unit != 0:
        return "MMA granularity (BN)"
    if t.d_qk not in gpu.HEAD_DIMS or t.d_v not in gpu.HEAD_DIMS:
        return "head dimension"
    elem = gpu.DTYPE_BYTES[t.dtype]
    # The translator's copies: each row of a tile is split among copy_threads_per_row(d) threads moving 16
    # bytes each, so a tile's rows must be a multiple of the rows one pass of the block covers.
    for rows, width in ((t.block_m, t.d_qk), (t.block_n, t.d_qk), (t.block_n, t.d_v), (t.block_m, t.d_v)):
        if rows % max(1, t.threads // copy_threads_per_row(width)) != 0:
            return "copy granularity"
    per_pass = t.threads * target.copy_bytes
    for rows, width in ((t.block_m, t.d_qk), (t.block_n, t.d_qk), (t.block_n, t.d_v), (t.block_m, t.d_v)):
        if (rows * width * elem) % per_pass != 0 or (width * elem) % target.copy_bytes != 0:
            return "copy granularity"
    return None


def _hopper_granularity(t: Tiling) -> str | None:
    """The sm_90 kernel's limits (translator/backends/sm90/config.py): 64 query rows per consumer warp
    group, BN a multiple of 16 up to 256 (wgmma N), head dims in whole 64-column TMA boxes, d_v ≤ d_qk."""
    consumers = core_resources.default_consumers(t.block_m)
    if t.block_m % consumers or (t.block_m // consumers) % core_resources.HOPPER_WGMMA_M:
        return "wgmma granularity (BM)"
    if t.block_n % 16 or not 16 <= t.block_n <= 256:
        return "wgmma granularity (BN)"
    if t.d_qk % 64 or t.d_v % 64 or t.d_qk > 256 or t.d_v > t.d_qk:
        return "head dimension"
    return None


def fits(t: Tiling, target: gpu.Target) -> tuple[Resources, str | None]:
    res = resources(t, target)
    if res.shared_bytes > target.smem_per_block:
        return res, "shared memory"
    if res.registers > register_budget(t, target):
        return res, "registers"
    if res.threads > target.max_threads_per_block:
        return res, "threads per block"
    if res.blocks_per_sm < 1:
        return res, "occupancy"
    return res, None


TUNABLE = frozenset({"block_m", "block_n", "warps", "stages"})


def plan(
    model: Model, shape: Shape | None = None, *, search: frozenset[str] = frozenset(), sms: int | None = None
) -> Plan:
    """Rank the tilings for `model`. Roles in `search` are searched even when the file fixes them or leaves
    them out (`tl tune`); `sms` overrides the target's SM count (a specific part, e.g. 132 for an H200)."""
    shape = shape or DEFAULT_SHAPE
    roles = find_roles(model)
    target, dtype = model.target, model.dtype
    problems: list[str] = []
    defaults = _defaults(target)
    if dtype not in target.dtypes:
        takes = ", ".join(target.dtypes)
        problems.append(f"{target.arch} tensor cores do not take {dtype} (they take {takes})")
        return Plan([], roles, problems, {})

    def space(role: str, options: tuple[int, ...]) -> tuple[int, ...]:
        name = roles.name(role)
        if role in search:
            return options
        if name is None:
            return (defaults[role],) if role in defaults else options
        p = model.params[name]
        if p.hole:
            return options
        if p.value is None:
            problems.append(f"`{name}` does not evaluate to an integer; planning with the search space")
            return options
        return (p.value,)

    d_qk_space = space("d_qk", gpu.HEAD_DIMS) if roles.name("d_qk") else (defaults["d_qk"],)
    if roles.name("d_qk") and model.params[roles.params["d_qk"]].hole:
        d_qk_space = (defaults["d_qk"],)
        problems.append(
            f"head dimension `{roles.params['d_qk']}` is a hole: assumed {defaults['d_qk']}; "
            "write your model's head dimension"
        )
    d_v_space = space("d_v", gpu.HEAD_DIMS) if roles.name("d_v") else None
    if roles.name("d_v") and model.params[roles.params["d_v"]].hole:
        d_v_space = None
    causal = model.mask == "causal"
    ir = lowered(model)
    masks = masks_in(ir)  # a mask region: its own key blocks and kept pairs (translator.planner.masks)

    out: list[Candidate] = []
    rejected: dict[str, int] = {}
    # sm_90: the wgmma kernel has no warps knob (consumer warp groups follow BM), so warps is not searched.
    warps_options = (core_resources.DEFAULT_WARPS,) if target.wgmma else WARPS
    for bm, bn, w0, st0, dqk in itertools.product(
        space("block_m", BLOCK_M),
        space("block_n", BLOCK_N_WGMMA if target.wgmma else BLOCK_N),
        space("warps", warps_options),
        space("stages", STAGES),
        d_qk_space,
    ):
        for dv in d_v_space or (dqk,):
            d = max(dqk, dv)
            w = w0 if w0 != _FROM_TILE else core_resources.default_warps(target, bm, d)
            st = st0 if st0 != _FROM_TILE else core_resources.default_stages(target, d, model.mask)
            t = Tiling(bm, bn, w, st, dqk, dv, dtype)
            why = granularity_ok(t, target)
            res: Resources | None = None
            if why is None:
                res, why = fits(t, target)
            if why is not None or res is None:
                rejected[why or "?"] = rejected.get(why or "?", 0) + 1
                continue
            cost = estimate(t, res, target, shape, causal=causal, sms=sms, masks=masks)
            values = _values(roles, t)
            holes = {n: v for n, v in values.items() if model.params[n].hole}
            out.append(Candidate(0, values, holes, t, res, cost.score, cost.breakdown))
    if target.wgmma:
        _mark_measured(out, model.mask, ir, masks, shape)
    out.sort(
        key=lambda c: (
            not c.measured,
            -c.score,
            -c.tiling.block_m,
            -c.tiling.block_n,
            c.tiling.warps,
            -c.tiling.stages,
        )
    )
    for i, c in enumerate(out, 1):
        c.rank = i
        c.reasons = [c.summary()]
        if c.measured:
            c.reasons.append(
                "the measured default on the H200 (docs/hopper.md): ranked above the model, which cannot "
                "tell the top sm_90 tiles apart (BN 128–176 measured within 2 % at head dim 128) and does "
                "not see the spill of the register-bound ones (BN 192)"
            )
    if not out:
        limits = ", ".join(f"{k} ({n})" for k, n in sorted(rejected.items(), key=lambda kv: -kv[1]))
        problems.append(
            f"no tiling fits {target.arch} with the fixed parameters; rejected by: {limits or '-'}"
        )
    return Plan(out, roles, problems, rejected)


def _mark_measured(
    out: list[Candidate], header: str, ir: Forward | None, masks: Masks | None, shape: Shape
) -> None:
    """Flag the candidates whose tile is the measured one for their head dim (measurement beats the model
    where both exist): `hopper_tile`'s for the plain kernels, and at head dim ≤ 64 also for programs with a
    score or mask region, whose query rows `hopper_rows` decides. Above 64 such programs are the model's."""
    rows: dict[int, int] = {}
    key_tiles = {c.tiling.block_n for c in out}  # one: the file fixes BN, and the rows decide alone
    for c in out:
        t = c.tiling
        d = max(t.d_qk, t.d_v)
        best = core_resources.hopper_tile(d, header)
        if d <= 64:
            if d not in rows:
                rows[d] = hopper_rows(ir, header, d, masks, shape)
            best = {**best, "BM": rows[d], "BN": best["BN"] if len(key_tiles) > 1 else t.block_n}
        elif masks is not None:
            continue
        c.measured = (t.block_m, t.block_n, t.stages) == (best["BM"], best["BN"], best["stages"])


def _values(roles: Roles, t: Tiling) -> dict[str, int]:
    by_role = {
        "block_m": t.block_m,
        "block_n": t.block_n,
        "warps": t.warps,
        "stages": t.stages,
        "d_qk": t.d_qk,
        "d_v": t.d_v,
    }
    return {name: by_role[role] for role, name in roles.params.items()}
