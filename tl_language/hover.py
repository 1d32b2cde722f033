"""Hover text for every word of a TL document, as markdown: a plain function the language server calls.

`hover(analysis, position)` finds the token under the position (UTF-16 column, as LSP sends it) and
explains it from the model: keywords, operations, levels, header values (a target shows its GPU facts),
params, Scalars, builtins, index values, loop variables, tensors (levels, tile per level, dtype, bytes,
registers), side tensors, functions and operators of score expressions, layout modes, holes, and
diagnostic codes written anywhere (`TL202` in a comment shows the registry entry).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tl_language import gpu
from tl_language import syntax as ast
from tl_language.analysis import Analysis
from tl_language.codes import CODES
from tl_language.lexer import Token, lex_line
from tl_language.model import BUILTINS, INDEX_NAMES, Model
from tl_language.ops import FUNCTIONS, OPS
from tl_language.resources import (
    SPECIAL_PARAMS,
    bytes_per_block,
    element_bytes,
    is_accumulator,
    register_estimate,
    register_limit,
    shared_memory_bytes,
    stages,
    threads,
    tile_elements,
)
from tl_language.source import LineText, Position, Range, split_lines


@dataclass(frozen=True, slots=True)
class Hover:
    markdown: str
    range: Range


STATEMENTS = {
    "kernel": "**Kernel** `name` — names the kernel (the generated `__global__` function).",
    "target": (
        "**Target** `sm_XX` — the GPU architecture: sm_75, sm_80, sm_86, sm_89 or sm_90 "
        f"(default {gpu.DEFAULT_TARGET})."
    ),
    "dtype": (
        "**Dtype** `fp16 | bf16 | fp8_e4m3` — the input type of Q, K and V; accumulation is fp32 "
        f"(default {gpu.DEFAULT_DTYPE})."
    ),
    "param": "**Param** `NAME = expr` — an integer parameter; `?` marks a hole to fill (a sketch).",
    "scalar": (
        "**Scalar** `NAME = value` — a runtime scalar of score, mask and sink expressions, passed at "
        "launch (one kernel serves every value); `value` is its default, real when written with a "
        "point (`30.0`), else an integer (`2048`)."
    ),
    "mask": "**Mask** `none | causal | window(LEFT, RIGHT)` — which scores attention keeps.",
    "allocate": (
        "**Allocate** `X in <level> (shape) [with offset expr] [with dtype float32|int32]` — "
        "declares tensor X at a level: in global with its full shape and per-(batch, head) offset, "
        "in registers an fp32 accumulator. A global tensor no Copy moves is a side tensor, read by "
        "subscript in score and mask expressions (`with dtype` gives its element type)."
    ),
    "copy": (
        "**Copy** `X [(tile)] [in coordinate [L = expr]] from <level> to <level> [as Y]` — moves a "
        "tile of X between memory levels; the coordinate picks the tile along the rows."
    ),
    "compute": (
        "**Compute** `<Op> args and get [new] X | and accumulate X` — runs an operation on register tiles."
    ),
    "reshape": (
        "**Reshape** `X from (MMA_C, …) to (MMA_A, …)` — relabels a GEMM accumulator fragment as "
        "an A-operand fragment for the next GEMM (no data moves between threads)."
    ),
    "for": "**for** `i = a: b` … **end** — a loop over tiles, `i` from a up to b (exclusive).",
    "end": "**end** — closes the innermost `for`.",
}
WORDS = {
    "in": "`in` — names the memory level (Allocate) or starts a coordinate (Copy).",
    "with": (
        "`with offset expr` — the tensor's start in global memory for this (batch, head); "
        "`with dtype float32|int32` — a side tensor's element type."
    ),
    "dtype": "`with dtype float32|int32` — the element type of a side tensor (default float32).",
    "offset": "`with offset expr` — the tensor's start in global memory for this (batch, head).",
    "coordinate": "`in coordinate [L = expr]` — which tile along the tensor's rows (L) this copy moves.",
    "from": "`from` — the source memory level of a Copy, or the layout before a Reshape.",
    "to": "`to` — the destination memory level of a Copy, or the layout after a Reshape.",
    "as": "`as Y` — the copy's destination tensor gets the name Y.",
    "and": "`and get X` / `and get new X` / `and accumulate X` — where a Compute's result goes.",
    "get": "`and get X` — the result is X (`get new X` replaces an existing X).",
    "new": "`and get new X` — the result replaces X (a legal redefinition).",
    "accumulate": "`and accumulate X` — the result is added to X (e.g. acc_o += P·V).",
}
LEVELS = {
    "global": "**global** memory — device DRAM (HBM): the full tensors, addressed with their offsets.",
    "shared": "**shared** memory — on-chip, per thread block; tiles staged for the tensor cores.",
    "register": "**register** — per-thread registers: MMA fragments and fp32 accumulators.",
}
# What a mask does to the generated kernels (translator/backends; measured in docs/hopper.md).
_MASKED_KERNELS = (
    " The kernels skip the key blocks a query tile cannot see and pay a per-score mask only on the blocks"
    " that cross the band. On sm_90 the tiles run longest first: (batch, head) pairs in sections whose K and"
    " V fit in L2, the longest query tiles of a section first."
)
MASKS = {
    "none": "**none** — every key attends (no mask).",
    "causal": (
        "**causal** — query i sees keys j ≤ i (aligned to the bottom-right corner when seqlen_q ≠ seqlen_k):"
        " shorthand for `Compute Mask S, kv_idx <= q_idx + seqlen_k - seqlen_q`." + _MASKED_KERNELS
    ),
    "window": "**window(LEFT, RIGHT)** — query i sees keys in [i − LEFT, i + RIGHT]." + _MASKED_KERNELS,
}
LAYOUT_MODES = {
    "MMA_A": "**MMA_A** — the A-operand fragment layout of the tensor-core MMA.",
    "MMA_B": "**MMA_B** — the B-operand fragment layout of the tensor-core MMA.",
    "MMA_C": "**MMA_C** — the accumulator fragment layout a GEMM produces.",
    "MMA_M": "**MMA_M** — the mode counting MMA tiles along M.",
    "MMA_N": "**MMA_N** — the mode counting MMA tiles along N.",
    "MMA_N_NEW": "**MMA_N_new** — the N mode regrouped by the K of the next MMA.",
    "MMA_K": "**MMA_K** — the mode counting MMA tiles along K.",
}
ELEMENT_TYPES = {
    "float32": "**float32** — a side tensor of 4-byte reals (the default element type).",
    "int32": "**int32** — a side tensor of 4-byte integers (document ids, flags, lengths).",
}
# Operators of score and mask expressions whose meaning is not obvious from arithmetic.
OPERATORS = {
    "%": (
        "`%` — integer remainder with C semantics: the result takes the dividend's sign (`-7 % 3 == -1`); "
        "take `abs` first when the dividend may be negative."
    ),
    "&": "`&` — and: both conditions hold (binds tighter than `|`).",
    "|": "`|` — or: either condition holds (the loosest operator).",
    "!": "`!` — not: negates a condition; write `!(kv_idx < 4)`.",
}
_CODE = re.compile(r"TL\d{3}")


def target_markdown(t: gpu.Target) -> str:
    parts = ", ".join(f"{p.name} ({p.sms} SMs)" for p in t.parts)
    mma = ", ".join(f"{dt}: {shape}" for dt, shape in t.mma.items())
    features = [
        name
        for name, on in (
            ("cp.async", t.cp_async),
            ("ldmatrix", t.ldmatrix),
            ("TMA", t.tma),
            ("wgmma", t.wgmma),
        )
        if on
    ]
    return "\n".join(
        [
            f"**{t.arch}** (compute capability {t.compute_capability[0]}.{t.compute_capability[1]})",
            "",
            f"- parts: {parts}",
            f"- shared memory per block: {t.smem_per_block:,} bytes (per SM {t.smem_per_sm:,})",
            f"- registers: {t.regs_per_thread} per thread, {t.regs_per_sm:,} per SM",
            f"- input dtypes: {', '.join(t.dtypes)}; MMA shapes: {mma}",
            f"- {', '.join(features)}; warp size {t.warp_size}; "
            f"up to {t.max_threads_per_block} threads/block",
        ]
    )


def _dtype_markdown(name: str) -> str:
    archs = [t.arch for t in gpu.TARGETS.values() if name in t.dtypes]
    return f"**{name}** — {gpu.DTYPE_BYTES[name]} byte(s) per element; tensor cores on {', '.join(archs)}."


def _tile(model: Model, tile: list[ast.Expr] | None, computed: bool = False) -> str:
    if tile is None:
        return "shape from its Compute" if computed else "no tile yet"
    text = "(" + ", ".join(ast.expr_text(e) for e in tile) + ")"
    values = model.shape_values(tile)
    if values and all(v is not None for v in values) and text != "(" + ", ".join(map(str, values)) + ")":
        text += " = (" + ", ".join(str(v) for v in values) + ")"
    return text


def tensor_markdown(model: Model, name: str) -> str:
    t = model.tensors[name]
    lines = [f"**tensor** `{name}`", ""]
    for level, p in t.placements.items():
        dtype = "fp32" if level == "register" and is_accumulator(model, name) else model.dtype
        computed = isinstance(p.stmt, ast.ComputeStmt)
        row = f"- {level}: {_tile(model, p.tile, computed)}, {dtype} (line {p.stmt.range.start.line + 1})"
        n = bytes_per_block(model, name, level)
        if n is not None:
            row += f"; {n:,} bytes per block"
            if level == "register":
                elems = tile_elements(model, p.tile) or 0
                per = -(-elems * element_bytes(model, name, level) // 4) // threads(model)
                row += f", about {per} registers per thread"
        lines.append(row)
    if t.layout:
        lines.append(f"- fragment layout at the end: {t.layout}")
    return "\n".join(lines)


def _param_markdown(model: Model, name: str) -> str:
    p = model.params[name]
    value = "`?` (a hole to fill)" if p.hole else (str(p.value) if p.value is not None else "not a number")
    text = f"**Param** `{name}` = {value}"
    if name in SPECIAL_PARAMS:
        text += f"\n\n{SPECIAL_PARAMS[name]}"
    if name == "stages":
        smem = shared_memory_bytes(model)
        if smem is not None:
            text += f"\n\nshared memory per block: {smem:,} of {model.target.smem_per_block:,} bytes"
    if name in ("warps", "BN", "BM", "consumers"):
        est = register_estimate(model)
        if est is not None:
            text += (
                f"\n\nregisters per thread ≈ {est.total} (accumulators {est.accumulators} + "
                f"fragments {est.fragments}) of {register_limit(model)}"
            )
    if name in BUILTINS:
        text += f"\n\n(overrides the builtin: {BUILTINS[name]})"
    return text


def side_tensor_markdown(model: Model, name: str) -> str:
    stmt = model.tensors[name].placements["global"].stmt
    dims = ", ".join(ast.expr_text(e) for e in getattr(stmt, "shape", None) or [])
    dtype = getattr(stmt, "dtype", None)
    element = dtype.name if dtype is not None else "float32"
    return (
        f"**side tensor** `{name}` — global ({dims}), {element} (line {stmt.range.start.line + 1})\n\n"
        "Read one element at a time by subscript in score, mask and sink expressions "
        f"(`{name}[…]`, one integer index per dimension); the launch passes it by name, row-major and "
        "contiguous."
    )


def _scalar_markdown(model: Model, name: str) -> str:
    s = model.scalars[name]
    kind = "real (float)" if s.is_real else "integer (int32)"
    value = "not a number" if s.value is None else str(s.value)
    return (
        f"**Scalar** `{name}` = {value}, {kind} — a runtime scalar of score, mask and sink expressions; "
        "the launch passes another value by name, else this default."
    )


def _function_markdown(name: str) -> str | None:
    f = FUNCTIONS.get(name.lower())
    if f is None:
        return None
    args = {1: "x", 2: "a, b", 3: "c, a, b"}[f.arity]
    return f"**{f.name}**({args}) — {f.meaning} (a function of score and mask expressions)."


def _loop_var(analysis: Analysis, name: str, line: int) -> str | None:
    for loop in analysis.model.loops:
        if loop.var is None or loop.var.name != name:
            continue
        last = loop.end_range.start.line if loop.end_range else analysis.document.line_count
        if loop.range.start.line <= line <= last:
            return (
                f"**loop variable** `{name}` = {ast.expr_text(loop.start)} … "
                f"{ast.expr_text(loop.stop)} (exclusive)"
            )
    return None


def _word(analysis: Analysis, tokens: list[Token], k: int, line: int) -> str | None:
    model = analysis.model
    tok = tokens[k]
    word, low = tok.text, tok.lower
    first = tokens[0].lower if tokens[0].kind == "ident" else ""
    if tok.kind == "punct" and word == "?":
        return "**hole** `?` — a value still to be filled (TL450)."
    if tok.kind == "punct" and first == "compute":
        return OPERATORS.get(word)
    if tok.kind != "ident":
        return None
    if k == 0:
        text = STATEMENTS.get(low)
        return f"{text}\n\n{summary_markdown(model)}" if text and low == "kernel" else text
    if first == "kernel" and k == 1:
        return f"**kernel** `{word}`\n\n{summary_markdown(model)}"
    if first == "compute" and k == 1:
        spec = OPS.get(low)
        return f"**{spec.name}** ({spec.arity}) — {spec.meaning}" if spec else None
    if first == "target" and k == 1:
        t = gpu.target(word)
        return target_markdown(t) if t else None
    if first == "dtype" and k == 1 and low in gpu.DTYPES:
        return _dtype_markdown(low)
    if first == "mask" and k == 1:
        return MASKS.get(low)
    if first == "reshape" and word.upper() in LAYOUT_MODES:
        return LAYOUT_MODES[word.upper()]
    called = k + 1 < len(tokens) and tokens[k + 1].text == "("
    if called and first == "compute" and (text := _function_markdown(word)) is not None:
        return text
    if word in model.params:
        return _param_markdown(model, word)
    if word in model.scalars:
        return _scalar_markdown(model, word)
    if word in model.tensors:
        side = word in model.side_tensors()
        return side_tensor_markdown(model, word) if side else tensor_markdown(model, word)
    if (text := _loop_var(analysis, word, line)) is not None:
        return text
    if word in BUILTINS:
        return f"**builtin** `{word}` — {BUILTINS[word]}"
    if word in INDEX_NAMES:
        return (
            f"**index value** `{word}` — {INDEX_NAMES[word]}; it exists per score, in score, mask and "
            "sink expressions of the key loop."
        )
    if first == "allocate" and low in ELEMENT_TYPES and k > 0 and tokens[k - 1].lower == "dtype":
        return ELEMENT_TYPES[low]
    if low in LEVELS and first in ("allocate", "copy"):
        text = LEVELS[low]
        if low == "shared":
            text += f" {model.target.arch}: up to {model.target.smem_per_block:,} bytes per block."
        return text
    if low in WORDS:
        return WORDS[low]
    if low == "l" and first == "copy":
        return "`L` — the row axis of the tensor: `[L = j]` selects the j-th tile of rows."
    return None


def hover(analysis: Analysis, position: Position) -> Hover | None:
    """Markdown for the word at `position` (0-based line, UTF-16 column), or None. Never raises."""
    lines = split_lines(analysis.text)
    if not 0 <= position.line < len(lines):
        return None
    line = LineText(position.line, lines[position.line])
    at = line.index(position.character)
    tokens, comment_at = lex_line(line)
    for m in _CODE.finditer(line.text):
        if m.start() <= at <= m.end() and m.group() in CODES:
            return Hover(CODES[m.group()].markdown, line.range(m.start(), m.end()))
    if comment_at is not None and at >= comment_at:
        return None
    for k, tok in enumerate(tokens):
        if tok.start <= at < tok.end or (at == tok.end and tok.kind == "ident"):
            text = _word(analysis, tokens, k, position.line)
            return Hover(text, line.range(tok.start, tok.end)) if text else None
    return None


def summary_markdown(model: Model) -> str:
    """Kernel-wide facts (target, shared memory, registers): for a hover on `Kernel` or a status line."""
    smem = shared_memory_bytes(model)
    est = register_estimate(model)
    rows = [
        f"target {model.target.arch}, dtype {model.dtype}, {threads(model)} threads, {stages(model)} stage(s)"
    ]
    if smem is not None:
        rows.append(f"shared memory {smem:,} / {model.target.smem_per_block:,} bytes")
    if est is not None:
        rows.append(f"registers ≈ {est.total} / {model.target.regs_per_thread} per thread")
    return "; ".join(rows)
