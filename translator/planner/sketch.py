"""Stage 2 without a model: a statements-only sketch becomes TL code.

The paper's sketch says *what* the block does (`Copy Q from global to shared`, `for j = 0: N`, `Compute
GEMM Q, K and get S`, …). This module adds, deterministically, what TL code needs on top — exactly the
parts the checker's sketch hints (TL450–TL456) name:
  - the headers the document lacks (`Kernel`, `Target`, `Dtype`, `Mask none`) and the tile Params as holes
    (`Param BM = ?`, `BN`, `warps` on the mma.sync targets, `stages`) next to the head dimension;
  - `Allocate X in global (rows, width) with offset …` for Q, K, V and the output O;
  - the register accumulators before the loop (`Allocate S in register (BM, BN)`, the output's), renaming
    the accumulator when the sketch named it after the global output (`accumulate O` → `acc_o … as O`);
  - each global copy's tile and `[L = …]` coordinate (`block_m` for Q and O, the loop variable for K, V);
  - the loop bound `seqlen_k / BN` for a placeholder (`for j = 0: N`);
  - the MMA_C → MMA_A `Reshape` where the chained GEMMs need it, and on targets without wgmma the
    `Copy X from shared to register` a GEMM operand needs (the TL202 and TL201 fixes);
and then the planner (`fill`) replaces every `?` with the best tiling for the target.

Nothing else changes: the sketch's statements, their order, their comments and its own Params stay. What
this cannot do (no key loop with the two GEMMs of attention) is said in `notes`, and the text is returned
as it was.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tl_language import analyze, gpu
from tl_language import syntax as ast
from tl_language.analysis import Analysis
from tl_language.checks._sketch import defined_anywhere, placeholder_bound
from tl_language.checks.reshape import RESHAPE_TO_A
from tl_language.diagnostics import Diagnostic
from tl_language.facts import enclosing_loops, index_of, layouts, levels_before
from tl_language.model import Model
from tl_language.source import LineText, Position, split_lines
from translator.planner.cost import Shape
from translator.planner.fill import Change, apply_edits, fill

DEFAULT_HEAD_DIM = 128


@dataclass(slots=True)
class SketchResult:
    text: str
    changes: list[Change]  # structural ones first (line numbers of the result), then the planner's
    diagnostics: list[Diagnostic]  # of `text`
    notes: list[str] = field(default_factory=list)
    values: dict[str, int] = field(default_factory=dict)  # the Params the planner filled
    recognised: bool = True  # False: not the attention forward; `text` is the input


@dataclass(slots=True)
class _Roles:
    q: str
    k: str
    v: str
    s: str
    acc: str  # the accumulator as the sketch names it
    out: str  # the global output tensor
    loop: ast.ForStmt
    qk: ast.ComputeStmt
    pv: ast.ComputeStmt


def complete_sketch(
    text: str,
    *,
    target: str | None = None,
    dtype: str | None = None,
    head_dim: int | None = None,
    kernel: str | None = None,
    shape: Shape | None = None,
) -> SketchResult:
    """The TL code for `text` (see the module docstring). `target`/`dtype`/`head_dim`/`kernel` apply only
    where the sketch says nothing; `shape` is the problem the planner optimises for."""
    analysis = analyze(text)
    roles = _roles(analysis)
    if roles is None:
        return SketchResult(text, [], analysis.diagnostics, [_NOT_ATTENTION], recognised=False)
    staged, changes, notes = _Stage2(analysis, roles, target, dtype, head_dim, kernel).run()
    filled = fill(staged, shape=shape)
    notes += filled.problems
    values = filled.candidate.holes if filled.candidate else {}
    return SketchResult(filled.text, changes + filled.changes, filled.diagnostics, notes, values)


# The hints that say a statement-level part is missing (beyond `?` values and tiles, which `fill` writes).
STAGE2_CODES = frozenset({"TL453", "TL454", "TL455", "TL456"})


def needs_stage2(analysis: Analysis, *, target: str | None = None, dtype: str | None = None) -> bool:
    """Whether `text` needs more than the planner's `fill`: a statement-level part is missing, or the
    caller names a target or dtype the file does not state (stage 2 writes the header)."""
    if any(d.code in STAGE2_CODES for d in analysis.diagnostics):
        return True
    model = analysis.model
    return (target is not None and not model.target_explicit) or (
        dtype is not None and not model.dtype_explicit
    )


_NOT_ATTENTION = (
    "stage 2 knows the attention forward: one key loop with a `get` GEMM (Q·Kᵀ) and the GEMM that "
    "reads its result (P·V); write those statements, or complete the sketch with `--llm`"
)


def _roles(analysis: Analysis) -> _Roles | None:
    """The attention roles from the data flow: the loop's GEMM whose result feeds the other GEMM."""
    model = analysis.model
    if len(model.loops) != 1:
        return None
    loop = model.loops[0]
    inside = {id(s) for s in model.statements if loop in enclosing_loops(model, s)}
    gemms = [
        s
        for s in model.statements
        if isinstance(s, ast.ComputeStmt)
        and s.op is not None
        and s.op.name.lower() == "gemm"
        and id(s) in inside
    ]
    if len(gemms) != 2:
        return None
    qk, pv = gemms
    names = [a.name if isinstance(a, ast.Name) else None for a in (*qk.args, *pv.args)]
    if len(names) != 4 or None in names or qk.result is None or pv.result is None:
        return None
    q, k, s, v = names  # type: ignore[misc]
    if s != qk.result.name:
        return None
    acc = pv.result.name
    out = acc
    for stmt in model.statements:
        if (
            isinstance(stmt, ast.CopyStmt)
            and stmt.name is not None
            and stmt.name.name == acc
            and _lv(stmt.src) == "register"
            and _lv(stmt.dst) == "global"
        ):
            out = (stmt.alias or stmt.name).name
    return _Roles(q, k, v, s, acc, out, loop, qk, pv)  # type: ignore[arg-type]


def _lv(ident: ast.Ident | None) -> str:
    return ident.name.lower() if ident is not None else ""


# A structural edit: a span of one line replaced, or whole lines inserted before a line.
_Span = tuple[Position, Position, str, str]


class _Stage2:
    def __init__(
        self,
        analysis: Analysis,
        roles: _Roles,
        target: str | None,
        dtype: str | None,
        head_dim: int | None,
        kernel: str | None,
    ) -> None:
        self.a, self.m, self.r = analysis, analysis.model, roles
        self.lines = split_lines(analysis.text)
        self.spans: list[_Span] = []
        self.inserts: list[tuple[int, int, str, str]] = []  # (before line, order, text, reason)
        self.notes: list[str] = []
        self.target, self.dtype, self.head_dim, self.kernel = target, dtype, head_dim, kernel
        # the accumulator gets its own name when the sketch called it after the global output
        self.acc = roles.acc
        if roles.acc == roles.out or (roles.acc in self.m.tensors and _in_global(self.m, roles.acc)):
            self.acc = _fresh(self.m, "acc_o")
        self.bm, self.bn = "BM", "BN"
        self.d_qk, self.d_v = self._head_dims()

    # ---- the parts, each an edit ------------------------------------------------------------------------

    def run(self) -> tuple[str, list[Change], list[str]]:
        self._preamble()
        self._accumulators()
        self._rename_accumulator()
        self._copies()
        self._loop_bound()
        self._accumulate()
        self._register_copies()
        self._reshape()
        self._normalize()
        text, changes = self._apply()
        return text, changes, self.notes

    def _head_dims(self) -> tuple[str, str]:
        params = self.m.params
        if "d_qk" in params or "d_v" in params:
            return ("d_qk" if "d_qk" in params else "d"), ("d_v" if "d_v" in params else "d")
        return "d", "d"

    def _indent(self, line: int) -> str:
        raw = self.lines[line] if 0 <= line < len(self.lines) else ""
        return raw[: len(raw) - len(raw.lstrip(" \t"))]

    def _insert(self, before: int, text: str, reason: str, order: int = 0) -> None:
        self.inserts.append((before, order, text, reason))

    def _preamble(self) -> None:
        """Missing headers and Params, then the global Allocates, before the first body statement."""
        m = self.m
        body = next(
            (
                s
                for s in self.a.document.statements
                if not isinstance(
                    s,
                    ast.KernelStmt
                    | ast.TargetStmt
                    | ast.DtypeStmt
                    | ast.ParamStmt
                    | ast.MaskStmt
                    | ast.ScalarStmt,
                )
            ),
            None,
        )
        at = body.range.start.line if body is not None else len(self.lines)
        have = {type(s) for s in self.a.document.statements}
        head: list[tuple[str, str]] = []
        if ast.KernelStmt not in have:
            head.append((f"Kernel {self.kernel or 'attention_fwd'}", "the kernel's name"))
        arch = m.target.arch if m.target_explicit else (self.target or gpu.DEFAULT_TARGET)
        if ast.TargetStmt not in have:
            head.append((f"Target {arch}", "the target"))
        if ast.DtypeStmt not in have:
            head.append((f"Dtype {self.dtype or gpu.DEFAULT_DTYPE}", "the input dtype"))
        wgmma = gpu.TARGETS[arch].wgmma if arch in gpu.TARGETS else False
        for name, why in (
            ("BM", "query rows per block (planner)"),
            ("BN", "key rows per iteration (planner)"),
        ):
            if name not in m.params:
                head.append((f"Param {name} = ?", why))
        if self.d_qk not in m.params:
            d = self.head_dim or DEFAULT_HEAD_DIM
            head.append((f"Param d = {d}", "the head dimension of Q, K and V"))
            if self.head_dim is None:
                self.notes.append(f"assumed head dimension {d}: write `Param d = …` or pass --head-dim")
        if not wgmma and "warps" not in m.params:
            head.append(("Param warps = ?", "warps per block (planner)"))
        if "stages" not in m.params:
            head.append(("Param stages = ?", "K/V pipeline buffers (planner)"))
        if not any(isinstance(s, ast.MaskStmt) for s in self.a.document.statements):
            head.append(("Mask none", "no mask (the default, written out)"))
        allocs = self._global_allocates()
        block = [*head, *([("", "")] if head and allocs else []), *allocs]
        if block and body is not None and (allocs or head):
            block.append(("", ""))
        for i, (line, why) in enumerate(block):
            self._insert(at, line, why, order=i)

    def _global_allocates(self) -> list[tuple[str, str]]:
        r, out = self.r, []
        rows = {
            r.q: ("seqlen_q", self.d_qk, "q_offset"),
            r.k: ("seqlen_k", self.d_qk, "kv_offset"),
            r.v: ("seqlen_k", self.d_v, "kv_offset"),
            r.out: ("seqlen_q", self.d_v, "o_offset"),
        }
        for name, (length, width, offset) in rows.items():
            if not _in_global(self.m, name):
                out.append(
                    (
                        f"Allocate {name} in global ({length}, {width}) with offset {offset}",
                        f"{name} in global memory with its offset",
                    )
                )
        return out

    def _accumulators(self) -> None:
        """The score tile and the output accumulator in registers, just before the loop."""
        r, line = self.r, self.r.loop.range.start.line
        indent = self._indent(line)
        if not _allocated(self.m, r.s, "register"):
            self._insert(
                line,
                f"{indent}Allocate {r.s} in register ({self.bm}, {self.bn})",
                "the score accumulator",
                order=100,
            )
        if not _allocated(self.m, r.acc, "register") or self.acc != r.acc:
            self._insert(
                line,
                f"{indent}Allocate {self.acc} in register ({self.bm}, {self.d_v})",
                "the fp32 output accumulator",
                order=101,
            )

    def _rename_accumulator(self) -> None:
        """`accumulate O` where O is the global output: the register uses become `acc_o`."""
        if self.acc == self.r.acc:
            return
        old = self.r.acc
        for stmt in self.m.statements:
            if isinstance(stmt, ast.ComputeStmt):
                refs = [n for e in stmt.args for n in ast.expr_names(e) if n.name == old]
                if stmt.result is not None and stmt.result.name == old:
                    refs.append(stmt.result)  # type: ignore[arg-type]
            elif isinstance(stmt, ast.CopyStmt) and stmt.name is not None and stmt.name.name == old:
                refs = [stmt.name] if _lv(stmt.src) in ("register", "shared") else []  # type: ignore[list-item]
            elif isinstance(stmt, ast.ReshapeStmt) and stmt.name is not None and stmt.name.name == old:
                refs = [stmt.name]  # type: ignore[list-item]
            else:
                refs = []
            for ref in refs:
                self.spans.append(
                    (
                        ref.range.start,
                        ref.range.end,
                        self.acc,
                        f"the register accumulator is `{self.acc}`; `{old}` names the global output",
                    )
                )

    def _copies(self) -> None:
        """Each global copy's tile and coordinate; the store names the global output."""
        r = self.r
        tiles = {r.q: (self.bm, self.d_qk), r.k: (self.bn, self.d_qk), r.v: (self.bn, self.d_v)}
        loop_var = r.loop.var.name if r.loop.var else "j"
        for stmt in self.m.statements:
            if not isinstance(stmt, ast.CopyStmt) or stmt.name is None:
                continue
            name, src, dst = stmt.name.name, _lv(stmt.src), _lv(stmt.dst)
            if src == "global" and name in tiles:
                rows, cols = tiles[name]
                coord = "block_m" if name == r.q else loop_var
            elif src == "register" and dst == "global" and name == r.acc:
                rows, cols, coord = self.bm, self.d_v, "block_m"
                if self.acc != r.acc and stmt.alias is None and stmt.dst is not None:
                    self.spans.append(
                        (
                            stmt.dst.range.end,
                            stmt.dst.range.end,
                            f" as {r.out}",
                            f"the accumulator is stored as the global output {r.out}",
                        )
                    )
            else:
                continue
            add = ""
            if stmt.tile is None:
                add += f" ({rows}, {cols})"
            if stmt.coordinate is None:
                add += f" in coordinate [L = {coord}]"
            if add:
                at = stmt.name.range.end if stmt.tile is None else self._after_tile(stmt)
                if at is not None:
                    self.spans.append((at, at, add, f"{name}'s tile and its coordinate"))

    def _after_tile(self, stmt: ast.CopyStmt) -> Position | None:
        end = stmt.tile[-1].range.end if stmt.tile else None
        if end is None or end.line >= len(self.lines):
            return None
        line = LineText(end.line, self.lines[end.line])
        i = line.text.find(")", line.index(end.character))
        return Position(end.line, line.col(i + 1)) if i >= 0 else None

    def _loop_bound(self) -> None:
        bound = placeholder_bound(self.m, self.r.loop)
        if bound is not None:
            self.spans.append(
                (
                    bound.range.start,
                    bound.range.end,
                    f"seqlen_k / {self.bn}",
                    "the loop visits every key block",
                )
            )

    def _accumulate(self) -> None:
        """P·V sums over the key blocks: `and get X` inside the loop becomes `and accumulate X`."""
        pv = self.r.pv
        if pv.mode not in ("get", "get_new") or pv.result is None:
            return
        n = pv.result.range.start.line
        line = LineText(n, self.lines[n])
        head = line.text[: line.index(pv.result.range.start.character)]
        found = re.search(r"\band\s+get(\s+new)?\s+$", head, re.IGNORECASE)
        if found:
            start, end = Position(n, line.col(found.start())), Position(n, line.col(len(head)))
            self.spans.append((start, end, "and accumulate ", "P·V accumulates over the key blocks"))

    def _register_copies(self) -> None:
        """mma.sync reads GEMM operands from registers (TL201's fix); sm_90's wgmma reads shared memory."""
        if self.m.target.wgmma or (
            not self.m.target_explicit and self.target in gpu.TARGETS and gpu.TARGETS[self.target].wgmma
        ):
            return
        for gemm in (self.r.qk, self.r.pv):
            i = index_of(self.m, gemm)
            for e in gemm.args:
                if not isinstance(e, ast.Name) or e.name in (self.r.s,):
                    continue
                have = levels_before(self.m, e.name, i)
                if "register" in have or "shared" not in have:
                    continue
                place = self.m.tensors[e.name].placements["shared"].stmt
                line = place.range.start.line + 1
                self._insert(
                    line,
                    f"{self._indent(line - 1)}Copy {e.name} from shared to register",
                    f"mma.sync reads {e.name} from registers",
                    order=-1,
                )

    def _reshape(self) -> None:
        pv = self.r.pv
        a = pv.args[0]
        if isinstance(a, ast.Name) and layouts(self.m).get(id(pv), {}).get(a.name) == "MMA_C":
            line = pv.range.start.line
            self._insert(
                line,
                self._indent(line) + RESHAPE_TO_A.format(name=a.name),
                "the accumulator layout becomes the A-operand layout before P·V",
                order=-1,
            )

    def _normalize(self) -> None:
        """The online softmax leaves acc unnormalised: `Compute Divide acc, rowsum` after the loop goes with
        a `Compute Softmax` in it (the attention pattern requires the pair)."""
        m, r = self.m, self.r
        softmax = any(
            isinstance(s, ast.ComputeStmt) and s.op is not None and s.op.name.lower() == "softmax"
            for s in r.loop.body
        )
        after = [
            s
            for s in m.statements
            if index_of(m, s) > index_of(m, r.loop) and r.loop not in enclosing_loops(m, s)
        ]
        divides = any(
            isinstance(s, ast.ComputeStmt) and s.op is not None and s.op.name.lower() == "divide"
            for s in after
        )
        if not softmax or divides or r.loop.end_range is None:
            return
        line = r.loop.end_range.start.line + 1
        text = (
            f"{self._indent(r.loop.range.start.line)}Compute Divide {self.acc}, rowsum and get new {self.acc}"
        )
        self._insert(line, text, "the softmax's output is divided by its row sum after the loop", order=-1)

    # ---- applying ---------------------------------------------------------------------------------------

    def _apply(self) -> tuple[str, list[Change]]:
        text, span_changes = apply_edits(self.a.text, self.spans)
        lines = split_lines(text)
        eol = "\r\n" if "\r\n" in self.a.text else "\n"
        inserted: list[tuple[int, str, str]] = []
        for before, _, line, reason in sorted(self.inserts, key=lambda t: (t[0], t[1])):
            inserted.append((before, line, reason))
        out: list[str] = []
        changes: list[Change] = []
        by_line: dict[int, list[tuple[str, str]]] = {}
        for before, line, reason in inserted:
            by_line.setdefault(before, []).append((line, reason))
        edited = {c.line: c for c in span_changes}
        for n in range(len(lines) + 1):
            for line, reason in by_line.get(n, []):
                if reason:
                    changes.append(Change(len(out), "", line, reason))
                out.append(line)
            if n < len(lines):
                if n in edited:
                    c = edited[n]
                    changes.append(Change(len(out), c.old, c.new, c.reason))
                out.append(lines[n])
        return eol.join(out), changes


def _in_global(model: Model, name: str) -> bool:
    t = model.tensors.get(name)
    p = t.placements.get("global") if t else None
    return p is not None and isinstance(p.stmt, ast.AllocateStmt)


def _allocated(model: Model, name: str, level: str) -> bool:
    t = model.tensors.get(name)
    p = t.placements.get(level) if t else None
    return p is not None and isinstance(p.stmt, ast.AllocateStmt)


def _fresh(model: Model, base: str) -> str:
    name, n = base, 1
    while defined_anywhere(model, name):
        n += 1
        name = f"{base}{n}"
    return name
