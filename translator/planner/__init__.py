"""The deterministic planner: fills `?` parameters and missing tiles from the GPU model and a cost model.

It needs no LLM and no GPU; it is the offline default of `tl complete`, `tl generate` and the language
server's completions. Entry points:
  - `plan_candidates(analysis_or_model, shape=None)` → ranked `Candidate`s (full assignments, breakdown);
  - `suggest(model, param_name, shape=None)` → ranked `Suggestion`s for one parameter (completion items);
  - `fill(text, shape=None)` → `FillResult(text, changes, diagnostics)` with every hole and tile filled;
  - `complete_sketch(text, target=…, dtype=…, head_dim=…)` → `SketchResult`: stage 2 of a statements-only
    sketch (Allocates, accumulators, tiles, coordinates, loop bound, Reshape, headers), then `fill`.
"""

from __future__ import annotations

from dataclasses import dataclass

from tl_language import gpu
from tl_language.analysis import Analysis
from tl_language.model import Model
from translator.planner.candidates import Candidate, Plan, plan
from translator.planner.cost import DEFAULT_SHAPE, Shape
from translator.planner.fill import Change, FillResult, fill, fill_analysis
from translator.planner.resources import Resources, Tiling
from translator.planner.sketch import SketchResult, complete_sketch, needs_stage2

__all__ = [
    "DEFAULT_SHAPE",
    "Candidate",
    "Change",
    "FillResult",
    "Plan",
    "Resources",
    "Shape",
    "SketchResult",
    "Suggestion",
    "Tiling",
    "complete_sketch",
    "fill",
    "fill_analysis",
    "needs_stage2",
    "plan",
    "plan_candidates",
    "suggest",
]


@dataclass(frozen=True, slots=True)
class Suggestion:
    value: int
    score: float  # the best predicted fraction of peak among candidates with this value
    reason: str


def plan_candidates(source: Analysis | Model, shape: Shape | None = None) -> list[Candidate]:
    model = source.model if isinstance(source, Analysis) else source
    return plan(model, shape).candidates


def suggest(model: Model, param_name: str, *, shape: Shape | None = None) -> list[Suggestion]:
    """Ranked values for one parameter, each with the best candidate that uses it as the reason."""
    result = plan(model, shape)
    role = next((r for r, n in result.roles.params.items() if n == param_name), None)
    if role is None:
        return []
    if role in ("d_qk", "d_v") and model.params[param_name].hole:
        return [
            Suggestion(d, 0.0, f"a head dimension {model.target.arch} kernels support") for d in gpu.HEAD_DIMS
        ]
    best: dict[int, Candidate] = {}
    for c in result.candidates:
        v = c.values[param_name]
        if v not in best:
            best[v] = c
    return [Suggestion(v, c.score, c.summary()) for v, c in best.items()]
