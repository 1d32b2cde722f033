"""TL130–TL133: inference Params (split-KV, paged KV, packed GQA, varlen) in combinations no kernel runs.

Each is reported on the Param line that asks for the impossible part (TL133 on the `head_idx` read).
Value ranges of the Params themselves are TL307's (`checks/params.py`).
"""

from __future__ import annotations

from collections.abc import Iterator

from tl_language import syntax as ast
from tl_language.diagnostics import Diagnostic, make
from tl_language.inference import inference_of
from tl_language.model import Model


def check(document: ast.Document, model: Model) -> Iterator[Diagnostic]:
    inf = inference_of(model)
    if inf is None:
        return
    params = model.params
    if not model.target.cp_async:
        first = next(params[n] for n in ("splits", "page_size", "pack_gqa", "varlen") if n in params)
        yield make(
            "TL131",
            first.stmt.range,
            f"{model.target.arch} has no cp.async: inference kernels need Target sm_80 or newer",
        )
    if "splits" in params and (p := params["splits"]).value != 1:
        softmax = [s for s in model.statements if _is_op(s, "softmax")]
        if not softmax:
            yield make(
                "TL130",
                p.stmt.range,
                "split-KV merges partial results by LSE, and this kernel has no Softmax",
            )
        elif any(len(s.args) > 1 for s in softmax):
            yield make(
                "TL130",
                p.stmt.range,
                "split-KV with a Softmax sink: each split would add the sink to its denominator",
            )
    if inf.varlen:
        for name in ("splits", "page_size"):
            p = params.get(name)
            if p is not None and p.value not in (None, 0 if name == "page_size" else 1):
                yield make(
                    "TL132",
                    p.stmt.range,
                    f"`{name}` with `varlen = 1`: packed prefill batches "
                    "read contiguous K and V in one pass over the keys",
                )
        p = params.get("persistent")
        if p is not None and p.value == 1:
            yield make(
                "TL132",
                p.stmt.range,
                "`persistent = 1` with `varlen = 1`: a packed batch runs one block per query tile "
                "(the persistent tile walk knows one sequence length)",
            )
    if inf.pack_gqa:
        for s in model.statements:
            if not isinstance(s, ast.ComputeStmt):
                continue
            for a in s.args:
                for n in ast.expr_names(a):
                    if n.name == "head_idx":
                        yield make(
                            "TL133",
                            n.range,
                            "`head_idx` differs between the rows of a packed "
                            "GQA tile; set `Param pack_gqa = 0` or read `kv_head_idx`",
                        )


def _is_op(stmt: ast.Stmt, name: str) -> bool:
    return isinstance(stmt, ast.ComputeStmt) and stmt.op is not None and stmt.op.name.lower() == name
