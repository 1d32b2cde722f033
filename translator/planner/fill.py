"""Fill a sketch: every `?` parameter from the best candidate, every missing global tile from the roles.

Only the lines that change are rewritten, and only the span that changes within them, so comments,
spacing and everything else the engineer wrote stay as they were.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tl_language import analyze
from tl_language import syntax as ast
from tl_language.analysis import Analysis
from tl_language.diagnostics import Diagnostic
from tl_language.source import LineText, Position, split_lines
from translator.planner.candidates import Candidate, plan
from translator.planner.cost import Shape
from translator.planner.roles import Roles


@dataclass(frozen=True, slots=True)
class Change:
    line: int  # 0-based
    old: str
    new: str
    reason: str


@dataclass(slots=True)
class FillResult:
    text: str
    changes: list[Change]
    diagnostics: list[Diagnostic]  # of the filled text
    candidate: Candidate | None = None
    problems: list[str] = field(default_factory=list)


def tile_for(tensor: str, roles: Roles) -> str | None:
    """The tile text of a global tensor's copy: (BM, d) for Q, (BN, d) for K/V, (BM, d_v) for O."""
    g = roles.globals.get(tensor)
    if g is None:
        return None
    rows = roles.name("block_m") if g.rows == "q" else roles.name("block_n")
    if rows is None or g.width is None:
        return None
    return f"({rows}, {ast.expr_text(g.width)})"


def _global_of(stmt: ast.CopyStmt, roles: Roles) -> str | None:
    """Which of Q/K/V/O a copy moves to or from global memory."""
    src = stmt.src.name.lower() if stmt.src else None
    dst = stmt.dst.name.lower() if stmt.dst else None
    name = None
    if src == "global" and stmt.name:
        name = stmt.name.name
    elif dst == "global":
        ident = stmt.alias or stmt.name
        name = ident.name if ident is not None else None
    if name is None:
        return None
    for key, g in roles.globals.items():
        if g.name == name:
            return key
    return None


def fill_analysis(
    analysis: Analysis, *, shape: Shape | None = None, candidate: Candidate | None = None
) -> FillResult:
    result = plan(analysis.model, shape)
    best = candidate or (result.candidates[0] if result.candidates else None)
    problems = list(result.problems)
    edits: list[tuple[Position, Position, str, str]] = []  # start, end, new text, reason
    model = analysis.model
    if best is not None:
        for name, value in best.holes.items():
            p = model.params[name]
            if p.stmt.value is not None:
                end = _keep_comment_column(analysis.text, p.stmt.value.range.end, len(str(value)) - 1)
                edits.append((p.stmt.value.range.start, end, str(value), best.summary()))
    unplanned = [n for n, p in model.params.items() if p.hole and (best is None or n not in best.holes)]
    if unplanned:
        problems.append(
            "the planner has no rule for " + ", ".join(f"`{n}`" for n in unplanned) + ": fill by hand"
        )
    for stmt in model.statements:
        if not isinstance(stmt, ast.CopyStmt) or stmt.tile is not None or stmt.name is None:
            continue
        key = _global_of(stmt, result.roles)
        tile = tile_for(key, result.roles) if key else None
        if tile is None:
            if key is not None or (stmt.src and stmt.src.name.lower() == "global"):
                problems.append(f"line {stmt.range.start.line + 1}: no tile rule for `{stmt.name.name}`")
            continue
        end = stmt.name.range.end
        edits.append((end, end, f" {tile}", f"{key} moves {tile} tiles"))
    text, changes = apply_edits(analysis.text, edits)
    return FillResult(text, changes, analyze(text).diagnostics, best, problems)


def _keep_comment_column(text: str, end: Position, grow: int) -> Position:
    """Extend an edit's end over up to `grow` spaces (keeping one) so a trailing comment stays put."""
    lines = split_lines(text)
    if grow <= 0 or end.line >= len(lines):
        return end
    lt = LineText(end.line, lines[end.line])
    i = lt.index(end.character)
    rest = lt.text[i:]
    spaces = len(rest) - len(rest.lstrip(" "))
    if not rest.lstrip(" ").startswith("#"):
        return end
    eat = max(0, min(grow, spaces - 1))
    return Position(end.line, lt.col(i + eat))


def fill(text: str, *, shape: Shape | None = None) -> FillResult:
    return fill_analysis(analyze(text), shape=shape)


def apply_edits(text: str, edits: list[tuple[Position, Position, str, str]]) -> tuple[str, list[Change]]:
    """Apply non-overlapping edits (UTF-16 positions) and report one Change per touched line."""
    lines = split_lines(text)
    eol = "\r\n" if "\r\n" in text else "\n"
    by_line: dict[int, list[tuple[Position, Position, str, str]]] = {}
    for e in edits:
        by_line.setdefault(e[0].line, []).append(e)
    changes: list[Change] = []
    for n, line_edits in sorted(by_line.items()):
        old = lines[n]
        lt = LineText(n, old)
        new = old
        for start, end, repl, _ in sorted(line_edits, key=lambda e: e[0].character, reverse=True):
            a, b = lt.index(start.character), lt.index(end.character)
            new = new[:a] + repl + new[b:]
        lines[n] = new
        changes.append(Change(n, old, new, "; ".join(dict.fromkeys(e[3] for e in line_edits))))
    return eol.join(lines), changes


# The Param name `apply_candidate` declares for a tuned role the file leaves out.
_ROLE_PARAM = {"block_m": "BM", "block_n": "BN", "warps": "warps", "stages": "stages"}


def apply_candidate(text: str, candidate: Candidate) -> tuple[str, list[Change]]:
    """Write every tuned value of `candidate` into `text` (`tl tune`): existing Params get the new value,
    missing tiles are added, and a tuned role the file does not declare gets a `Param` line after the last
    Param. Everything else is kept as written."""
    analysis = analyze(text)
    model = analysis.model
    from translator.planner.roles import find_roles

    roles = find_roles(model)
    t = candidate.tiling
    by_role = {"block_m": t.block_m, "block_n": t.block_n, "warps": t.warps, "stages": t.stages}
    edits: list[tuple[Position, Position, str, str]] = []
    missing: list[str] = []
    for role, value in by_role.items():
        name = roles.name(role)
        if name is None:
            missing.append(f"Param {_ROLE_PARAM[role]} = {value}")
            continue
        p = model.params[name]
        if p.stmt.value is not None and (p.hole or p.value != value):
            end = _keep_comment_column(text, p.stmt.value.range.end, len(str(value)) - len(_text_of(text, p)))
            edits.append((p.stmt.value.range.start, end, str(value), "tuned"))
    for stmt in model.statements:
        if isinstance(stmt, ast.CopyStmt) and stmt.tile is None and stmt.name is not None:
            key = _global_of(stmt, roles)
            tile = tile_for(key, roles) if key else None
            if tile is not None:
                edits.append(
                    (stmt.name.range.end, stmt.name.range.end, f" {tile}", f"{key} moves {tile} tiles")
                )
    new_text, changes = apply_edits(text, edits)
    if missing:
        params = [s for s in model.statements if isinstance(s, ast.ParamStmt)]
        after = params[-1].range.start.line if params else _header_end(model)
        lines = split_lines(new_text)
        eol = "\r\n" if "\r\n" in new_text else "\n"
        lines[after + 1 : after + 1] = missing
        new_text = eol.join(lines)
        changes += [
            Change(after + 1 + i, "", m, "tuned (not declared before)") for i, m in enumerate(missing)
        ]
    return new_text, changes


def _text_of(text: str, p: object) -> str:
    stmt = p.stmt  # type: ignore[attr-defined]
    r = stmt.value.range
    line = LineText(r.start.line, split_lines(text)[r.start.line])
    return line.text[line.index(r.start.character) : line.index(r.end.character)]


def _header_end(model: object) -> int:
    heads = [s for s in model.statements if isinstance(s, ast.KernelStmt | ast.TargetStmt | ast.DtypeStmt)]  # type: ignore[attr-defined]
    return heads[-1].range.start.line if heads else -1
