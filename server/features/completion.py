"""Completion from the line's words before the cursor: statement snippets at the start of a line, the word
the grammar expects next (`in`, levels, `from global to shared`, ops after `Compute`, `and get`), tensor
and parameter names in expressions, and ranked values for `?` holes and tiles for sketch Copies."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from server import sketch
from server.safe import safe
from server.suggest import parameter_suggestions, sketch_tile, tile_suggestion
from tl_language import Analysis, gpu
from tl_language.model import BUILTINS
from tl_language.source import LineText, split_lines

if TYPE_CHECKING:
    from server.app import TLServer

K = lsp.CompletionItemKind

SNIPPETS: tuple[tuple[str, str, str], ...] = (
    ("Kernel", "Kernel ${1:name}", "name the kernel"),
    ("Target", "Target ${1|sm_80,sm_86,sm_89,sm_90,sm_75|}", "GPU architecture"),
    ("Dtype", "Dtype ${1|fp16,bf16,fp8_e4m3|}", "input element type"),
    ("Param", "Param ${1:BM} = ${2:?}", "a tile parameter (`?`: let the planner choose)"),
    ("Mask", "Mask ${1|none,causal,window(LEFT\\, RIGHT)|}", "attention mask"),
    ("Allocate", "Allocate ${1:Q} in ${2|global,shared,register|} (${3:seqlen_q}, ${4:d})", "a tensor"),
    (
        "Copy",
        "Copy ${1:K} (${2:BN}, ${3:d}) in coordinate [L = ${4:j}] from ${5:global} to ${6:shared}",
        "move a tile between memory levels",
    ),
    ("Compute", "Compute ${1:GEMM} ${2:Q}, ${3:K} and get ${4:S}", "an operation"),
    (
        "Reshape",
        "Reshape ${1:S} from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_N_new)",
        "reuse a GEMM accumulator as the A operand of the next GEMM",
    ),
    ("for", "for ${1:j} = ${2:0}: ${3:seqlen_k / BN}\n    $0\nend", "loop over key/value tiles"),
)
LEVELS = ("global", "shared", "register")
# Which level a tile may move to next (the checker's TL104 decides legality; this orders suggestions).
NEXT_LEVEL = {
    "global": ("shared", "register"),
    "shared": ("register", "global"),
    "register": ("global", "shared"),
}
MASKS = ("none", "causal", "window(LEFT, RIGHT)")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+|\S")


def _item(
    label: str,
    kind: lsp.CompletionItemKind,
    detail: str = "",
    *,
    snippet: str | None = None,
    sort: str | None = None,
    doc: str | None = None,
    edit_range: lsp.Range | None = None,
    new_text: str | None = None,
) -> lsp.CompletionItem:
    text = snippet if snippet is not None else (new_text if new_text is not None else label)
    return lsp.CompletionItem(
        label=label,
        kind=kind,
        detail=detail or None,
        sort_text=sort,
        documentation=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value=doc) if doc else None,
        insert_text_format=lsp.InsertTextFormat.Snippet if snippet is not None else None,
        text_edit=lsp.TextEdit(range=edit_range, new_text=text) if edit_range is not None else None,
        insert_text=text if edit_range is None and text != label else None,
    )


def complete(
    analysis: Analysis, line_no: int, character: int, uri: str | None = None
) -> list[lsp.CompletionItem]:
    lines = split_lines(analysis.text)
    if not 0 <= line_no < len(lines):
        return []
    raw = lines[line_no]
    line = LineText(line_no, raw)
    prefix = raw[: line.index(character)]
    if "#" in prefix:
        return []  # inside a comment
    partial = _WORD.search(prefix)
    word_start = partial.start() if partial else len(prefix)
    before = prefix[:word_start]
    tokens = _TOKEN.findall(before)
    low = [t.lower() for t in tokens]
    replace = lsp.Range(
        start=lsp.Position(line=line_no, character=line.col(word_start)),
        end=lsp.Position(line=line_no, character=character),
    )
    model = analysis.model

    hole = _hole_items(analysis, raw, line, low, tokens, prefix, line_no, character)
    if hole is not None:
        return hole
    if not tokens:
        return _statement_items(analysis, line_no, uri)
    head = low[0]
    if head == "target" and len(low) == 1:
        return [
            _item(
                a,
                K.EnumMember,
                f"{t.compute_capability[0]}.{t.compute_capability[1]} · {', '.join(p.name for p in t.parts)}",
            )
            for a, t in gpu.TARGETS.items()
        ]
    if head == "dtype" and len(low) == 1:
        return [_item(d, K.EnumMember, f"{gpu.DTYPE_BYTES[d]} bytes") for d in gpu.DTYPES]
    if head == "mask" and len(low) == 1:
        return [_item(m, K.EnumMember) for m in MASKS[:2]] + [
            _item("window", K.EnumMember, "sliding window", snippet="window(${1:LEFT}, ${2:RIGHT})")
        ]
    if head == "param" and len(low) == 1:
        return _param_name_items(model)
    if head == "compute" and len(low) == 1:
        return _op_items()
    if low[-1] in ("from", "to") and head in ("copy",):
        return _level_items(analysis, tokens, low)
    if head == "allocate" and low[-1] == "in":
        return [_item(lv, K.EnumMember, "memory level") for lv in LEVELS]
    if head == "allocate" and len(low) == 2:
        return [_item("in", K.Keyword, snippet="in ${1|global,shared,register|} (${2:seqlen_q}, ${3:d})")]
    if head == "copy" and len(low) == 1:
        return _tensor_items(model)
    if head == "copy":
        return _copy_clause_items(analysis, tokens, low)
    if head == "compute":
        return _compute_items(model, low)
    if head == "reshape" and len(low) == 1:
        return _tensor_items(model, level="register")
    if head == "reshape" and len(low) == 2:
        return [
            _item(
                "from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_N_new)",
                K.Snippet,
                "accumulator layout → A-operand layout",
            )
        ]
    if head == "for" and low[-1] == ":":
        # the key loop's bound: every BN-row block of K (a sketch's placeholder `N` becomes this)
        bound = f"seqlen_k / {_block_name(model, 'block_n') or 'BN'}"
        return [_item(bound, K.Value, "every key block", sort="0"), *_value_items(model)]
    if low[-1] in ("=", "(", ",", "+", "-", "*", "/", ":") or head in ("for", "allocate", "param"):
        return _value_items(model)
    _ = replace
    return []


def _statement_items(analysis: Analysis, line_no: int, uri: str | None = None) -> list[lsp.CompletionItem]:
    items = [
        _item(label, K.Snippet if label != "for" else K.Keyword, detail, snippet=body, sort=f"0{i:02}")
        for i, (label, body, detail) in enumerate(SNIPPETS)
    ]
    if uri is not None and sketch.is_sketch(analysis):
        # stage 2 of the whole document, as `tl complete` (the command applies the edit)
        done = lsp.CompletionItem(
            label="Complete sketch",
            kind=K.Event,
            detail="add the Allocates, tiles, coordinates, loop bound and Params (tl complete)",
            insert_text="",
            sort_text="0000",
            command=lsp.Command(title="Complete sketch", command=sketch.COMMAND, arguments=[uri]),
        )
        items.insert(0, done)
    if any(loop.range.start.line < line_no and loop.end_range is None for loop in analysis.model.loops):
        items.append(_item("end", K.Keyword, "close the open `for`", sort="000"))
    return items


def _param_name_items(model) -> list[lsp.CompletionItem]:  # type: ignore[no-untyped-def]
    try:
        from tl_language.resources import SPECIAL_PARAMS
    except ImportError:
        SPECIAL_PARAMS = {}
    return [
        _item(n, K.Variable, meaning, snippet=f"{n} = ${{1:?}}")
        for n, meaning in SPECIAL_PARAMS.items()
        if n not in model.params
    ]


def _op_items() -> list[lsp.CompletionItem]:
    try:
        from tl_language.ops import OPS
    except ImportError:
        return [_item(n, K.Function) for n in ("GEMM", "Softmax", "Multiply", "Divide")]
    return [
        _item(op.name, K.Function, op.arity, doc=op.meaning, sort=f"{i:02}")
        for i, op in enumerate(OPS.values())
    ]


def _tensor_items(model, level: str | None = None) -> list[lsp.CompletionItem]:  # type: ignore[no-untyped-def]
    out = []
    for t in model.tensors.values():
        if level is None or level in t.placements:
            out.append(_item(t.name, K.Variable, "tensor in " + ", ".join(t.levels)))
    return out


def _value_items(model) -> list[lsp.CompletionItem]:  # type: ignore[no-untyped-def]
    items = [
        _item(p.name, K.Constant, f"= {p.value if p.value is not None else '?'}", sort="0" + p.name)
        for p in model.params.values()
    ]
    items += [_item(loop.var.name, K.Variable, "loop variable") for loop in model.loops if loop.var]
    items += [_item(n, K.Variable, meaning, sort="1" + n) for n, meaning in BUILTINS.items()]
    return items


def _level_items(analysis: Analysis, tokens: list[str], low: list[str]) -> list[lsp.CompletionItem]:
    t = analysis.model.tensors.get(tokens[1]) if len(tokens) > 1 else None
    if low[-1] == "from":
        levels = [lv for lv in LEVELS if t is None or lv in t.placements] or list(LEVELS)
        return [
            _item(f"{lv} to {nxt}", K.Keyword, "copy path", sort=f"{i}{j}")
            for i, lv in enumerate(levels)
            for j, nxt in enumerate(NEXT_LEVEL[lv])
        ]
    src = low[-2] if len(low) >= 2 and low[-2] in LEVELS else None
    nexts = NEXT_LEVEL.get(src, LEVELS) if src else LEVELS
    return [_item(lv, K.EnumMember, "memory level", sort=str(i)) for i, lv in enumerate(nexts)]


def _copy_clause_items(analysis: Analysis, tokens: list[str], low: list[str]) -> list[lsp.CompletionItem]:
    model = analysis.model
    name = tokens[1]
    if low[-1] in LEVELS and "to" in low and low.index("to") == len(low) - 2:
        return [_item("as", K.Keyword, "store under another name", snippet="as ${1:O}")]
    if low[-1] in LEVELS and "from" in low:
        return [
            _item(f"to {nxt}", K.Keyword, "copy path", sort=str(i))
            for i, nxt in enumerate(NEXT_LEVEL[low[-1]])
        ]
    if "from" in low:
        return []
    items: list[lsp.CompletionItem] = []
    t = model.tensors.get(name)
    # a tensor in global memory, or one the sketch has not placed anywhere yet (a load being written)
    if len(low) == 2 and (t is None or "global" in t.placements):
        tile = tile_suggestion(model, name) if t is not None else sketch_tile(model, name)
        if tile:
            coord = "block_m" if tile.startswith("(" + (_block_name(model, "block_m") or "BM")) else "j"
            items.append(
                _item(
                    f"{tile} in coordinate [L = …] from global to shared",
                    K.Snippet,
                    "tile, coordinate and path",
                    sort="00",
                    snippet=f"{tile} in coordinate [L = ${{1:{coord}}}] from global to shared",
                )
            )
            items.append(_item(tile, K.Value, "tile for this sketch Copy", sort="01"))
    levels = [lv for lv in LEVELS if t is None or lv in t.placements] or list(LEVELS)
    items += [
        _item(f"from {lv} to {nxt}", K.Keyword, "copy path", sort=f"1{i}{j}")
        for i, lv in enumerate(levels)
        for j, nxt in enumerate(NEXT_LEVEL[lv])
    ]
    if "in" not in low:
        items.append(_item("in coordinate", K.Keyword, snippet="in coordinate [L = ${1:j}]", sort="2"))
    return items


def _compute_items(model, low: list[str]) -> list[lsp.CompletionItem]:  # type: ignore[no-untyped-def]
    if low[-1] == "and":
        return [_item("get", K.Keyword), _item("get new", K.Keyword), _item("accumulate", K.Keyword)]
    if low[-1] in ("get", "new", "accumulate"):
        items = _tensor_items(model)
        if low[-1] == "get":
            items.insert(0, _item("new", K.Keyword, "overwrite an existing tensor"))
        return items
    if len(low) == 2 or low[-1] == ",":
        return _tensor_items(model) + [
            _item(n, K.Variable, BUILTINS[n]) for n in ("scale", "rowsum", "rowmax")
        ]
    return [
        _item("and get", K.Keyword, sort="0"),
        _item("and get new", K.Keyword, sort="1"),
        _item("and accumulate", K.Keyword, sort="2"),
    ]


def _hole_items(
    analysis: Analysis,
    raw: str,
    line: LineText,
    low: list[str],
    tokens: list[str],
    prefix: str,
    line_no: int,
    character: int,
) -> list[lsp.CompletionItem] | None:
    """`Param X = ?` (cursor on or after the `?`, or right after `=`): ranked values for X."""
    if len(low) < 2 or low[0] != "param":
        return None
    rest = raw[len(prefix) :]
    if not (low[-1] == "=" or (low[-1] == "?" and len(low) >= 3) or rest.lstrip().startswith("?")):
        return None
    name = tokens[1]
    if name not in analysis.model.params:
        return None
    q = raw.find("?", raw.find("="))
    if q >= 0:
        rng = lsp.Range(
            start=lsp.Position(line=line_no, character=line.col(q)),
            end=lsp.Position(line=line_no, character=line.col(q + 1)),
        )
    else:
        rng = lsp.Range(
            start=lsp.Position(line=line_no, character=character),
            end=lsp.Position(line=line_no, character=character),
        )
    out = []
    for rank, s in enumerate(parameter_suggestions(analysis.model, name)):
        out.append(
            _item(
                str(s.value),
                K.Value,
                f"#{rank + 1} · {s.source}",
                sort=f"{rank:04}",
                doc=f"**{name} = {s.value}** (score {s.score:.3g})\n\n{s.reason}",
                edit_range=rng,
                new_text=str(s.value),
            )
        )
    if out:
        out[0].preselect = True
    return out


def register(server: TLServer) -> None:
    @server.feature(
        lsp.TEXT_DOCUMENT_COMPLETION, lsp.CompletionOptions(trigger_characters=[" ", "?", "=", "(", ","])
    )
    @safe("completion", empty=lambda: lsp.CompletionList(is_incomplete=False, items=[]))
    def completion(ls: TLServer, params: lsp.CompletionParams) -> lsp.CompletionList:
        analysis = ls.analysis_of(params.text_document.uri)
        uri = params.text_document.uri
        pos = params.position
        items = [] if analysis is None else complete(analysis, pos.line, pos.character, uri)
        return lsp.CompletionList(is_incomplete=False, items=items)


def _block_name(model, role: str) -> str | None:  # type: ignore[no-untyped-def]
    """The Param that plays `role` (block_m, block_n), by the planner's rules when it is importable."""
    try:
        from translator.planner.roles import find_roles

        return find_roles(model).name(role)
    except ImportError:
        names = {n.lower(): n for n in model.params}
        return names.get("bm" if role == "block_m" else "bn")
