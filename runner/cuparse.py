"""Hand-edited CUDA: find the `extern "C" __global__` entry point and check it against the kernel ABI.

Engineers edit a generated `.cu` and run it again (`tl run kernel.cu`). Before spending 30 s in NVRTC we
find the entry point with tree-sitter (`tree_sitter_cuda`) and compare its parameters with
`ATTENTION_PARAMS`: the count and each parameter's ABI class must match (a pointer of any pointee type; a
32-bit int; a 64-bit int; a float). A kernel whose launch description lists `TMA_PARAMS` (the sm_90 path)
takes four TMA descriptors after them (`cute::TmaDescriptor` or `CUtensorMap`, by value). Names are not
checked: they do not reach the binary, so renaming is harmless. tree-sitter's grammar flags some CuTe
template syntax as errors; those are ignored (NVRTC is the judge of syntax). If tree-sitter's error recovery
swallows the entry point, a small text scan of the `extern "C"` declaration is the fallback.

The launch description of a `.cu` file is the JSON `LaunchSpec` that `tl build` writes beside it as
`FILE.launch.json` (one place, machine-written; no comment inside the source to drift out of sync).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from runner.abi import ATTENTION_PARAMS, INFERENCE_PARAMS, TMA_ABI, LaunchSpec

# ABI classes of the C types the kernel ABI uses, with the spellings a hand edit may use for each.
_INT32 = {"int", "int32_t", "signed int", "signed"}
_INT64 = {"long long", "long long int", "signed long long", "int64_t", "long", "long int", "ptrdiff_t"}
_FLOAT = {"float"}
# A 128-byte TMA descriptor passed by value (`const __grid_constant__` is a qualifier, stripped first).
_TENSOR_MAP = {"cute::TmaDescriptor", "TmaDescriptor", "CUtensorMap", "CUtensorMap_st"}
_QUALIFIERS = re.compile(r"\b(const|volatile|__restrict__|__restrict|restrict|__grid_constant__)\b")


class CuParseError(ValueError):
    """The `.cu` file's entry point does not fit the attention kernel ABI; `line` is 1-based (0: unknown)."""

    def __init__(self, *, message: str, path: str = "", line: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line

    def __str__(self) -> str:
        where = (
            f"{self.path}:{self.line}: " if self.path and self.line else f"{self.path}: " if self.path else ""
        )
        return f"{where}{self.message}"


@dataclass(frozen=True)
class CuParam:
    name: str | None
    type: str  # normalised C type text, e.g. "const void*", "long long"
    line: int  # 1-based

    @property
    def abi_class(self) -> str:
        return abi_class(self.type)


@dataclass(frozen=True)
class EntryPoint:
    name: str
    params: tuple[CuParam, ...]
    line: int  # 1-based line of the function name
    via: str  # "tree-sitter" | "text scan"


def abi_class(ctype: str) -> str:
    """ "pointer" | "int32" | "int64" | "float32" | "unknown" for a C type as written."""
    if "*" in ctype or "[" in ctype:
        return "pointer"
    base = " ".join(_QUALIFIERS.sub(" ", ctype).split())
    if base in _INT32:
        return "int32"
    if base in _INT64:
        return "int64"
    if base in _FLOAT:
        return "float32"
    if base in _TENSOR_MAP:
        return "tensormap"
    return "unknown"


_ABI_CLASS_OF_NUMPY = {
    "uintp": "pointer",
    "int32": "int32",
    "int64": "int64",
    "float32": "float32",
    "tensormap": "tensormap",
}


def expected_params(spec: LaunchSpec | None = None) -> tuple[tuple[str, str, str], ...]:
    """(name, C type, class) of the entry point's parameters: the attention ABI, then the TMA descriptors
    when `spec` lists them."""
    base = INFERENCE_PARAMS if spec is not None and spec.inference else ATTENTION_PARAMS
    return base + (TMA_ABI if spec is not None and spec.uses_tma else ())


def find_entry_points(source: str) -> list[EntryPoint]:
    found = _tree_sitter_entries(source)
    return found if found else _scan_entries(source)


def find_entry_point(source: str, kernel_name: str | None = None, *, path: str = "") -> EntryPoint:
    entries = find_entry_points(source)
    if not entries:
        raise CuParseError(
            message='no `extern "C" __global__` function found (the kernel entry point)', path=path
        )
    if kernel_name is not None:
        named = [e for e in entries if e.name == kernel_name]
        if named:
            return named[0]
        if len(entries) == 1:
            e = entries[0]
            raise CuParseError(
                message=f"the entry point is `{e.name}`, but the launch description names `{kernel_name}`"
                " (rename one of them)",
                path=path,
                line=e.line,
            )
    if len(entries) > 1:
        names = ", ".join(f"`{e.name}`" for e in entries)
        raise CuParseError(
            message=f'several `extern "C" __global__` functions ({names}); keep one entry point',
            path=path,
            line=entries[1].line,
        )
    return entries[0]


def check_abi(entry: EntryPoint, *, path: str = "", spec: LaunchSpec | None = None) -> None:
    """Raise `CuParseError` naming the first parameter whose ABI class differs from `ATTENTION_PARAMS`
    (+ `TMA_PARAMS` when `spec` lists them)."""
    expected = expected_params(spec)
    want = len(expected)
    for i, (abi_name, abi_type, np_type) in enumerate(expected):
        if i >= len(entry.params):
            missing = ", ".join(p[0] for p in expected[i:])
            raise CuParseError(
                message=f"`{entry.name}` has {len(entry.params)} parameters, the attention ABI has {want}: "
                f"missing `{abi_type} {abi_name}` (and after it: {missing})",
                path=path,
                line=entry.line,
            )
        p = entry.params[i]
        if p.abi_class != _ABI_CLASS_OF_NUMPY[np_type]:
            shown = f"`{p.type} {p.name}`" if p.name else f"`{p.type}`"
            raise CuParseError(
                message=f"parameter {i + 1} of `{entry.name}` is {shown}, "
                f"the ABI expects `{abi_type} {abi_name}`"
                f" ({_ABI_CLASS_OF_NUMPY[np_type]}, got {p.abi_class})",
                path=path,
                line=p.line,
            )
    if len(entry.params) > want:
        extra = entry.params[want]
        raise CuParseError(
            message=f"`{entry.name}` has {len(entry.params)} parameters, the attention ABI has {want}: "
            f"remove `{extra.type} {extra.name or ''}`".rstrip("` ")
            + "`",
            path=path,
            line=extra.line,
        )


def launch_json_path(cu_path: Path) -> Path:
    return cu_path.with_name(cu_path.stem + ".launch.json")


def load_cuda_file(cu_path: Path) -> tuple[str, LaunchSpec, EntryPoint]:
    """Read a `.cu` and its `.launch.json`; check the entry point. Raises `CuParseError`."""
    try:
        source = cu_path.read_text()
    except OSError as exc:
        raise CuParseError(message=f"cannot read: {exc.strerror}", path=str(cu_path)) from None
    spec_path = launch_json_path(cu_path)
    try:
        spec = LaunchSpec.from_json(spec_path.read_text())
    except OSError:
        raise CuParseError(
            message=f"no launch description {spec_path.name} beside it (`tl build` writes it)",
            path=str(cu_path),
        ) from None
    except (ValueError, TypeError) as exc:
        raise CuParseError(
            message=f"{spec_path.name} is not a valid launch description: {exc}", path=str(cu_path)
        ) from None
    entry = find_entry_point(source, spec.kernel_name, path=str(cu_path))
    check_abi(entry, path=str(cu_path), spec=spec)
    return source, spec, entry


# ---- tree-sitter ---------------------------------------------------------------------------------------


def _parser():  # type: ignore[no-untyped-def]
    import tree_sitter_cuda
    from tree_sitter import Language, Parser

    return Parser(Language(tree_sitter_cuda.language()))


def _tree_sitter_entries(source: str) -> list[EntryPoint]:
    try:
        parser = _parser()
    except ImportError:
        return []
    data = source.encode()
    tree = parser.parse(data)
    out: list[EntryPoint] = []
    stack = [(tree.root_node, False)]
    while stack:
        node, in_extern_c = stack.pop()
        if node.type == "linkage_specification":
            lit = next((c for c in node.children if c.type == "string_literal"), None)
            in_extern_c = lit is not None and data[lit.start_byte : lit.end_byte] == b'"C"'
        if node.type == "function_definition" and in_extern_c:
            entry = _entry_from_function(node, data)
            if entry is not None:
                out.append(entry)
            continue
        stack.extend((c, in_extern_c) for c in reversed(node.children))
    return out


def _entry_from_function(fn, data: bytes) -> EntryPoint | None:  # type: ignore[no-untyped-def]
    if not any(c.type == "__global__" for c in fn.children):
        return None
    decl = next((c for c in fn.children if c.type == "function_declarator"), None)
    if decl is None:
        return None
    ident = next((c for c in decl.children if c.type == "identifier"), None)
    plist = next((c for c in decl.children if c.type == "parameter_list"), None)
    if ident is None or plist is None:
        return None
    params = []
    for p in plist.children:
        if p.type != "parameter_declaration":
            continue
        text = data[p.start_byte : p.end_byte].decode()
        name_node = _declared_identifier(p)
        name = data[name_node.start_byte : name_node.end_byte].decode() if name_node is not None else None
        params.append(CuParam(name=name, type=_type_without_name(text, name), line=p.start_point[0] + 1))
    return EntryPoint(
        name=data[ident.start_byte : ident.end_byte].decode(),
        params=tuple(params),
        line=ident.start_point[0] + 1,
        via="tree-sitter",
    )


def _declared_identifier(node):  # type: ignore[no-untyped-def]
    """The identifier a parameter declares: the innermost identifier of its declarator, if any."""
    for c in node.children:
        if c.type == "identifier":
            return c
        if c.type.endswith("declarator"):
            found = _declared_identifier(c)
            if found is not None:
                return found
    return None


def _type_without_name(text: str, name: str | None) -> str:
    if name:
        text = re.sub(rf"\b{re.escape(name)}\s*$", "", text.strip())
    text = re.sub(r"\s*\*\s*", "* ", text)
    return " ".join(text.split()).replace("* *", "**").rstrip()


# ---- fallback: scan the declaration text -----------------------------------------------------------------

_DECL = re.compile(
    r'extern\s+"C"\s+(?:[\w:()\s,]*?\s)?__global__\s+(?P<head>[^;{]*?)\b(?P<name>\w+)\s*\(', re.S
)


def _scan_entries(source: str) -> list[EntryPoint]:
    # Blank out attributes that look like calls (same length, newlines kept, so lines stay right).
    source = re.sub(
        r"__launch_bounds__\s*\([^)]*\)|__cluster_dims__\s*\([^)]*\)",
        lambda m: re.sub(r"[^\n]", " ", m.group(0)),
        source,
    )
    out = []
    for m in _DECL.finditer(source):
        start = m.end()
        depth, i = 1, start
        while i < len(source) and depth:
            depth += {"(": 1, ")": -1}.get(source[i], 0)
            i += 1
        if depth:
            continue
        body = source[start : i - 1]
        line0 = source.count("\n", 0, start) + 1
        params = []
        offset = 0
        for piece in _split_top_level(body):
            text = " ".join(_strip_comments(piece).split())
            line = line0 + body.count("\n", 0, offset + len(piece) - len(piece.lstrip()))
            offset += len(piece) + 1
            if not text or text == "void":
                continue
            m_name = re.search(r"(\w+)\s*$", text)
            name = (
                m_name.group(1) if m_name and abi_class(text[: m_name.start()] or "x") != "unknown" else None
            )
            params.append(CuParam(name=name, type=_type_without_name(text, name), line=line))
        out.append(EntryPoint(name=m.group("name"), params=tuple(params), line=line0, via="text scan"))
    return out


def _split_top_level(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "(<[":
            depth += 1
        elif ch in ")>]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def _strip_comments(text: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.S)
