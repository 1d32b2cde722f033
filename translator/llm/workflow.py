"""The LLM workflow: request → TL sketch → TL code, each answer checked and repaired until it is valid.

    generate(request, target=..., settings=...)  two stages, each with its repair loop
    complete(text, settings)                     one stage: fill a file's holes

Each stage asks once, checks the answer (`translator.llm.check`), and while errors remain sends them back as
`line N: CODE message` for up to `rounds` repair rounds; it then keeps the best attempt (fewest errors,
then fewest holes, then fewest warnings; the latest on a tie). Without a configured endpoint both fall back
to the deterministic planner and say so (`offline=True`). Nothing here raises on a bad answer: a model
that never writes valid TL gives a result with `ok=False` and the diagnostics of its best attempt. Endpoint
failures (after retries) raise `LlmError`, whose message names the endpoint but never the key.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from tl_language import analyze, gpu
from tl_language.codes import SKETCH_CODES
from tl_language.diagnostics import Diagnostic
from translator import planner
from translator.llm import prompts
from translator.llm.check import Checked, Stage, check, default_stages
from translator.llm.client import Cancelled, ChatClient, LlmError
from translator.llm.extract import extract_tl
from translator.llm.request import Request, parse_request
from translator.llm.settings import NOT_CONFIGURED, LlmSettings
from translator.llm.template import render_sketch
from translator.planner.sketch import complete_sketch, needs_stage2

log = logging.getLogger("translator.llm")

Progress = Callable[[str], None]
DEFAULT_ROUNDS = 3


@dataclass(slots=True)
class Attempt:
    stage: str  # "sketch" | "code" | "complete"
    round: int  # 0: the first answer; n: the n-th repair
    answer: str  # the model's raw answer
    checked: Checked
    finish_reason: str | None = None


@dataclass(slots=True)
class GenerateResult:
    sketch: str
    code: str
    diagnostics: list[Diagnostic]  # of `code`
    rounds: int  # repair rounds used, both stages together
    attempts: list[Attempt]
    offline: bool = False
    ok: bool = False  # `code` has no errors and no holes
    notes: list[str] = field(default_factory=list)
    request: Request | None = None


@dataclass(slots=True)
class CompleteResult:
    text: str
    diagnostics: list[Diagnostic]
    rounds: int
    attempts: list[Attempt]
    offline: bool = False
    ok: bool = False
    values: dict[str, int] = field(default_factory=dict)  # the Params that were `?`, as filled
    notes: list[str] = field(default_factory=list)


def _noop(_: str) -> None:
    pass


class _Stage:
    """One conversation: ask, check, repair; remembers every attempt."""

    def __init__(
        self,
        client: ChatClient,
        system: str,
        name: str,
        *,
        want_filled: bool,
        stages: list[tuple[str, Stage]],
        progress: Progress,
        cancel: threading.Event | None,
    ):
        self.client, self.name, self.want_filled = client, name, want_filled
        self.stages, self.progress, self.cancel = stages, progress, cancel
        self.messages = [{"role": "system", "content": system}]
        self.attempts: list[Attempt] = []

    def run(self, prompt: str, rounds: int) -> Attempt:
        self.messages.append({"role": "user", "content": prompt})
        for r in range(rounds + 1):
            verb = "asking" if r == 0 else f"repair round {r}: asking"
            self.progress(f"{self.name}: {verb} {self.client.settings.model}")
            reply = self.client.chat(self.messages, cancel=self.cancel)
            problems = []
            if reply.finish_reason == "length":
                problems.append("the answer was cut off (max tokens reached): send the whole file, shorter")
            text = extract_tl(reply.text)
            checked = check(text, answer_problems=problems, stages=self.stages if self.want_filled else None)
            attempt = Attempt(self.name, r, reply.text, checked, reply.finish_reason)
            self.attempts.append(attempt)
            log.info("%s round %d: %d error(s), %d hole(s)", self.name, r, checked.errors, checked.holes)
            if checked.acceptable(want_filled=self.want_filled) or r == rounds:
                break
            self.progress(
                f"{self.name}: {checked.errors} error(s)"
                + (f", {checked.holes} hole(s)" if self.want_filled else "")
                + "; asking for a repair"
            )
            self.messages.append({"role": "assistant", "content": reply.text})
            self.messages.append(
                {
                    "role": "user",
                    "content": prompts.render(
                        "repair",
                        diagnostics=prompts.diagnostic_lines(
                            _repair_diagnostics(checked, self.want_filled), checked.problems
                        ),
                    ),
                }
            )
        return self.best()

    def best(self) -> Attempt:
        # Fewest errors, holes, warnings; on a tie the later attempt (it has seen more feedback).
        return min(reversed(self.attempts), key=lambda a: a.checked.key(want_filled=self.want_filled))

    @property
    def rounds(self) -> int:
        return max(0, len(self.attempts) - 1)


def _repair_diagnostics(checked: Checked, want_filled: bool) -> list[Diagnostic]:
    """What to send back: errors and warnings; hole hints only when the stage must fill them."""
    return [d for d in checked.diagnostics if want_filled or d.code not in SKETCH_CODES | {"TL452"}]


def _system(arch: str, request: Request) -> str:
    fallback = render_sketch(request)
    return prompts.render(
        "system",
        spec=prompts.spec(),
        arch=arch,
        target_facts=prompts.target_facts(arch),
        examples=prompts.examples(fallback),
    )


def planner_hint(text: str, *, top: int = 3, shape: planner.Shape | None = None) -> str:
    cands = planner.plan_candidates(analyze(text), shape)
    if not cands:
        return "- (the planner found no tiling that fits; choose tiles that satisfy the target's limits)"
    return "\n".join(f"{i}. {c.summary()}" for i, c in enumerate(cands[:top], 1))


def generate(
    request: str,
    *,
    target: str | None = None,
    settings: LlmSettings | None = None,
    rounds: int = DEFAULT_ROUNDS,
    on_progress: Progress | None = None,
    cancel: threading.Event | None = None,
    stages: list[tuple[str, Stage]] | None = None,
    shape: planner.Shape | None = None,
) -> GenerateResult:
    """Request → sketch → code. Offline (planner + template) when `settings` is None or not configured."""
    progress = on_progress or _noop
    req = parse_request(request, arch=target)
    stages = default_stages() if stages is None else stages
    if settings is None or not settings.configured:
        return _generate_offline(req, progress, shape, stages)
    client = ChatClient(settings)
    system = _system(req.arch, req)
    sketch_example = prompts.sketch_example(render_sketch(req))
    variant = {
        "gqa": f", GQA with group {req.group}",
        "mqa": ", MQA (one K/V head)",
        "mla": f", MLA-shaped (d_qk {req.d_qk}, d_v {req.d_v})",
    }.get(req.variant, "")
    s1 = _Stage(client, system, "sketch", want_filled=False, stages=[], progress=progress, cancel=cancel)
    best_sketch = s1.run(
        prompts.render(
            "sketch",
            request=request.strip(),
            arch=req.arch,
            dtype=req.dtype,
            mask=req.mask,
            head_dim=str(req.d_qk) if req.d_qk == req.d_v else f"{req.d_qk} (QK) / {req.d_v} (V)",
            variant_note=variant,
            sketch_example=sketch_example,
        ),
        rounds,
    )
    notes: list[str] = []
    sketch = best_sketch.checked.text
    if best_sketch.checked.errors:
        notes.append(
            f"the sketch still has {best_sketch.checked.errors} error(s) after {s1.rounds} repair "
            "round(s); stage 2 starts from the best one"
        )
    s2 = _Stage(client, system, "code", want_filled=True, stages=stages, progress=progress, cancel=cancel)
    best_code = s2.run(
        prompts.render(
            "code", arch=req.arch, planner_hint=planner_hint(sketch, shape=shape), sketch=sketch.rstrip()
        ),
        rounds,
    )
    code, checked = best_code.checked.text, best_code.checked
    if checked.errors == 0 and checked.holes:
        # The model left holes but nothing is wrong: the planner fills them rather than failing.
        filled = planner.fill(code, shape=shape)
        code = filled.text
        checked = check(code, stages=stages)
        notes.append(f"the planner filled {len(filled.changes)} line(s) the model left open")
    notes += checked.skipped
    return GenerateResult(
        sketch,
        code,
        checked.diagnostics,
        s1.rounds + s2.rounds,
        s1.attempts + s2.attempts,
        offline=False,
        ok=checked.acceptable(want_filled=True),
        notes=notes,
        request=req,
    )


def _generate_offline(
    req: Request, progress: Progress, shape: planner.Shape | None, stages: list[tuple[str, Stage]]
) -> GenerateResult:
    progress("offline generator: template + planner (no LLM endpoint configured)")
    sketch = render_sketch(req)
    filled = planner.fill(sketch, shape=shape)
    checked = check(filled.text, stages=stages)
    notes = [
        "offline generator: built from the template of the bundled examples and filled by the planner "
        "(" + NOT_CONFIGURED + ")"
    ]
    if req.assumed:
        notes.append("assumed (not in the request): " + ", ".join(req.assumed))
    notes += filled.problems + checked.skipped
    return GenerateResult(
        sketch,
        filled.text,
        checked.diagnostics,
        0,
        [],
        offline=True,
        ok=checked.acceptable(want_filled=True),
        notes=notes,
        request=req,
    )


def complete(
    text: str,
    settings: LlmSettings | None = None,
    *,
    rounds: int = DEFAULT_ROUNDS,
    on_progress: Progress | None = None,
    cancel: threading.Event | None = None,
    stages: list[tuple[str, Stage]] | None = None,
    shape: planner.Shape | None = None,
    use_llm: bool = True,
    target: str | None = None,
    dtype: str | None = None,
    head_dim: int | None = None,
    kernel: str | None = None,
) -> CompleteResult:
    """Fill `text`'s holes: by the model when configured and `use_llm`, else (or on request) the planner.

    A statements-only sketch (the paper's first stage) is also given what TL code needs (stage 2):
    offline by `translator.planner.sketch.complete_sketch`, with the model by the same prompt and repair
    loop. `target`, `dtype`, `head_dim` and `kernel` apply where the file says nothing.

    Raises `LlmError` when `use_llm` is set but no endpoint is configured, or the endpoint fails."""
    progress = on_progress or _noop
    stages = default_stages() if stages is None else stages
    analysis = analyze(text)
    stage2 = needs_stage2(analysis, target=target, dtype=dtype)
    if not use_llm and stage2:
        progress("stage 2: adding what the sketch lacks, then the planner fills the tiles")
        staged = complete_sketch(
            text, target=target, dtype=dtype, head_dim=head_dim, kernel=kernel, shape=shape
        )
        checked = check(staged.text, stages=stages)
        return CompleteResult(
            staged.text,
            checked.diagnostics,
            0,
            [],
            offline=True,
            ok=checked.acceptable(want_filled=True),
            values=staged.values,
            notes=staged.notes + checked.skipped,
        )
    if not use_llm:
        progress("planner: filling holes")
        filled = planner.fill_analysis(analysis, shape=shape)
        checked = check(filled.text, stages=stages)
        return CompleteResult(
            filled.text,
            checked.diagnostics,
            0,
            [],
            offline=True,
            ok=checked.acceptable(want_filled=True),
            values=filled.candidate.holes if filled.candidate else {},
            notes=filled.problems + checked.skipped,
        )
    if settings is None or not settings.configured:
        raise LlmError(NOT_CONFIGURED, kind="config")
    arch = analysis.model.target.arch
    if not analysis.model.target_explicit and target in gpu.TARGETS:
        arch = target or arch
    req = parse_request("", arch=arch)
    # The planner ranks tilings of TL code: for a sketch, of what stage 2 would make of it.
    hint_text = text
    if stage2:
        hint_text = complete_sketch(text, target=arch, dtype=dtype, head_dim=head_dim, shape=shape).text
    missing = [d for d in analysis.diagnostics if d.code in SKETCH_CODES]
    client = ChatClient(settings)
    stage = _Stage(
        client,
        _system(arch, req),
        "complete",
        want_filled=True,
        stages=stages,
        progress=progress,
        cancel=cancel,
    )
    best = stage.run(
        prompts.render(
            "complete",
            arch=arch,
            planner_hint=planner_hint(hint_text, shape=shape),
            missing=prompts.diagnostic_lines(missing),
            text=text.rstrip(),
        ),
        rounds,
    )
    out = analyze(best.checked.text)
    values = {
        n: p.value
        for n, p in out.model.params.items()
        if n in analysis.model.params and analysis.model.params[n].hole and p.value is not None
    }
    return CompleteResult(
        best.checked.text,
        best.checked.diagnostics,
        stage.rounds,
        stage.attempts,
        offline=False,
        ok=best.checked.acceptable(want_filled=True),
        values=values,
        notes=best.checked.skipped,
    )


__all__ = [
    "Attempt",
    "Cancelled",
    "CompleteResult",
    "GenerateResult",
    "LlmError",
    "complete",
    "generate",
    "planner_hint",
]
