"""Which parameter of a TL file plays which role (block_m, block_n, warps, stages, d_qk, d_v).

Usage decides first (the S accumulator's shape, the loop bound, the global allocations' widths), names
second, so `Param Br = ?` used as `Allocate S in register (Br, Bc)` is planned like `BM`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tl_language import syntax as ast
from tl_language.model import Model

ROLES = ("block_m", "block_n", "warps", "stages", "d_qk", "d_v")

_NAMES: dict[str, tuple[str, ...]] = {
    "block_m": ("bm", "block_m", "br", "kblockm", "tile_m"),
    "block_n": ("bn", "block_n", "bc", "kblockn", "tile_n"),
    "warps": ("warps", "num_warps", "nwarps", "kwarps"),
    "stages": ("stages", "num_stages", "kstages"),
    "d_qk": ("d_qk", "d", "head_dim", "hd", "dqk", "d_k"),
    "d_v": ("d_v", "dv", "head_dim_v"),
}


@dataclass(slots=True)
class GlobalTensor:
    """A tensor allocated in global memory: its name, which sequence its rows run over, its width's text."""

    name: str
    rows: str  # "q" | "k"
    width: ast.Expr | None


@dataclass(slots=True)
class Roles:
    params: dict[str, str] = field(default_factory=dict)  # role -> param name
    globals: dict[str, GlobalTensor] = field(default_factory=dict)  # "Q" | "K" | "V" | "O" -> tensor

    def name(self, role: str) -> str | None:
        return self.params.get(role)


def _param_name(e: ast.Expr | None, model: Model) -> str | None:
    if isinstance(e, ast.Paren):
        return _param_name(e.inner, model)
    if isinstance(e, ast.Name) and e.name in model.params:
        return e.name
    return None


def find_roles(model: Model) -> Roles:
    roles = Roles()
    q_like: list[GlobalTensor] = []
    k_like: list[GlobalTensor] = []
    for stmt in model.statements:
        if isinstance(stmt, ast.AllocateStmt) and stmt.name and stmt.level and stmt.shape:
            level = stmt.level.name.lower()
            if level == "global" and len(stmt.shape) == 2:
                first = stmt.shape[0]
                rows = first.name if isinstance(first, ast.Name) else ""
                if rows == "seqlen_q":
                    q_like.append(GlobalTensor(stmt.name.name, "q", stmt.shape[1]))
                elif rows == "seqlen_k":
                    k_like.append(GlobalTensor(stmt.name.name, "k", stmt.shape[1]))
            elif level == "register" and len(stmt.shape) == 2 and stmt.name.name.upper() == "S":
                _set(roles, "block_m", _param_name(stmt.shape[0], model))
                _set(roles, "block_n", _param_name(stmt.shape[1], model))
        elif isinstance(stmt, ast.ForStmt) and isinstance(stmt.stop, ast.BinOp) and stmt.stop.op == "/":
            _set(roles, "block_n", _param_name(stmt.stop.right, model))
    by_name = {t.name.upper(): t for t in q_like + k_like}
    for key, pool, index in (("Q", q_like, 0), ("O", q_like, -1), ("K", k_like, 0), ("V", k_like, -1)):
        t = by_name.get(key) or (pool[index] if pool else None)
        if t is not None:
            roles.globals[key] = t
    if "Q" in roles.globals:
        _set(roles, "d_qk", _param_name(roles.globals["Q"].width, model))
    if "V" in roles.globals:
        v = _param_name(roles.globals["V"].width, model)
        if v != roles.name("d_qk"):
            _set(roles, "d_v", v)
    taken = set(roles.params.values())
    for role, names in _NAMES.items():
        if role in roles.params:
            continue
        for p in model.params:
            if p.lower() in names and p not in taken:
                roles.params[role] = p
                taken.add(p)
                break
    if roles.name("d_v") == roles.name("d_qk"):
        roles.params.pop("d_v", None)
    return roles


def _set(roles: Roles, role: str, name: str | None) -> None:
    if name is not None and role not in roles.params and name not in roles.params.values():
        roles.params[role] = name
