"""The sm_90 query tile of a program with a score or mask region at head dim ≤ 64: 192 rows on three
consumer warp groups (the plain kernel's measured tile, `hopper_tile`) where the region costs about what
the plain kernel's does, else 128 rows on two.

Measured on the H200 (bf16, d 64, H 16, 4k and 16k; `docs/results/2026-12-04-h200-variants-d64-bm192.json`,
192 against 128 rows in one process): ALiBi +14 / +15 %, prefix LM +10 / +14 %, learnable sink +6 / +15 %,
relative bias +8 / +9 %, ReLU attention +9 / +9 %, global + sliding +5 / +13 %, sink + window +12 / +13 %;
softcap −6 / −6 %, sigmoid attention −10 / −10 %, prefix + softcap + documents −4 / −8 %, sliding window
−4 / −5 %, documents −6 / −4 %, the dilated window −25 / −25 %. What the losers share is one of three
things the planner sees, each a reason for 128 rows:

- transcendentals beyond the softmax's exp2 in every score (tanh, sigmoid: the SFU is the bound there,
  and a third consumer group only adds contention for it);
- masks whose key blocks a 192-row tile computes more of than a 128-row one does (narrow bands: a
  window's diagonal edge is masked per score on both tiles, and the taller tile computes more blocks per
  row);
- masks that read side tensors (documents, flags), whose blocks the planner cannot classify: it does not
  bet on them. Global + sliding and sink + window gain from 192 rows but stay at 128 by these rules.
"""

from __future__ import annotations

from kernel_ir import passes
from kernel_ir.expr import Op
from kernel_ir.program import Forward
from tl_language import resources as core_resources
from translator.planner.cost import Shape
from translator.planner.masks import Masks, blocks

NARROW_ROWS = 128
# A 192-row tile may compute this much more key-block work per query row than a 128-row one before the
# narrower tile wins: causal at 4k computes 5.5 % more, a 1024-key window 11 % (`blocks`).
BAND_GROWTH = 1.08


def hopper_rows(ir: Forward | None, header: str, head_dim: int, masks: Masks | None, shape: Shape) -> int:
    """Query rows of the measured sm_90 tile at `head_dim` for the program lowered to `ir` (None: it does
    not lower yet) under the `Mask` header `header` (`hopper_tile`'s where it has 128)."""
    wide = core_resources.hopper_tile(head_dim, header)
    if wide["BM"] <= NARROW_ROWS:
        return wide["BM"]
    if ir is None or ir.plain:
        return wide["BM"]
    if _extra_transcendentals(ir) > 0 or ir.block_mask:
        return NARROW_ROWS
    if masks is not None:
        tall = blocks(masks, wide["BM"], wide["BN"], shape.seqlen_q, shape.seqlen_k).computed
        short = blocks(masks, NARROW_ROWS, wide["BN"], shape.seqlen_q, shape.seqlen_k).computed
        if tall > BAND_GROWTH * short:
            return NARROW_ROWS
    return wide["BM"]


def _extra_transcendentals(ir: Forward) -> int:
    """SFU instructions a score costs beyond the softmax's exp2, conversions (I2F) not counted: the score
    region as the backends render it (`passes.rendered_score`, `score_cost`)."""
    value = passes.rendered_score(ir.score, softmax=ir.normalizer == "softmax", fast_tanh=ir.fast_tanh)
    if value is None:
        return 0
    per_score = passes.levels([value])
    conversions = sum(
        1 for n in passes.walk(value)
        if isinstance(n, Op) and n.op == "float" and per_score[n] in ("col", "elem")
    )  # fmt: skip
    return passes.score_cost(value).mufu - conversions
