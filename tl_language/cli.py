"""`tl`: check and format TL files; other packages add subcommands through `register(subparsers)`.

Positions printed by `tl check` are 1-based `line:col`, the column counted in UTF-16 code units (as the
language server reports them; the same as characters outside astral symbols).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import types
from collections.abc import Sequence
from pathlib import Path

from tl_language.analysis import analyze
from tl_language.codes import CODES, markdown_document
from tl_language.diagnostics import Severity
from tl_language.formatter import format_text

# Packages that may add subcommands; each is optional and imported only if it exists.
PLUGINS = ("pipeline.cli", "translator.llm.cli", "server.cli")


class Unreadable(Exception):
    """A file that is not TL text: the message says why, for the user, without a traceback."""


def read_tl(path: str) -> str:
    """The text of a TL file, or Unreadable with a clear reason (missing, directory, binary, not UTF-8)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise Unreadable(f"{path}: no such file") from None
    except IsADirectoryError:
        raise Unreadable(f"{path}: is a directory, not a TL file") from None
    except PermissionError:
        raise Unreadable(f"{path}: permission denied") from None
    except OSError as err:
        raise Unreadable(f"{path}: cannot read ({err.strerror or err})") from None
    if b"\x00" in data:
        raise Unreadable(f"{path}: binary file (contains NUL bytes), not TL text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise Unreadable(
            f"{path}:{line}: not UTF-8 text (invalid byte 0x{data[err.start]:02x} at offset {err.start})"
        ) from None


def _check(args: argparse.Namespace) -> int:
    status = 0
    records: list[dict[str, object]] = []
    counts = {Severity.ERROR: 0, Severity.WARNING: 0}
    unreadable = 0
    sketches = 0  # files that are the first stage: their hints say what `tl complete` adds
    for path in args.files:
        try:
            text = read_tl(path)
        except Unreadable as err:
            print(f"tl: {err}", file=sys.stderr)
            status = 2
            unreadable += 1
            continue
        analysis = analyze(text)
        for d in analysis.diagnostics:
            if d.severity in counts:
                counts[d.severity] += 1
            if args.format == "json":
                records.append({"file": path, **d.to_json()})
            else:
                pos = d.range.start
                print(f"{path}:{pos.line + 1}:{pos.character + 1}: {d.severity.label}[{d.code}] {d.message}")
        if analysis.has_errors and status == 0:
            status = 1
        sketches += analysis.model.is_sketch
    if args.format == "json":
        print(json.dumps(records, indent=2, ensure_ascii=False))
    else:
        errors, warnings = counts[Severity.ERROR], counts[Severity.WARNING]
        checked = len(args.files) - unreadable
        tail = f", {unreadable} unreadable" if unreadable else ""
        if sketches:
            tail += f"; {sketches} sketch(es): `tl complete FILE` writes the TL code"
        print(f"{errors} error(s), {warnings} warning(s) in {checked} file(s){tail}", file=sys.stderr)
    return status


def _fmt(args: argparse.Namespace) -> int:
    status = 0
    changed: list[str] = []
    for path in args.files:
        try:
            text = read_tl(path)
        except Unreadable as err:
            print(f"tl: {err}", file=sys.stderr)
            status = 2
            continue
        formatted = format_text(text)
        if formatted == text:
            continue
        changed.append(path)
        if not args.check:
            Path(path).write_text(formatted, encoding="utf-8", newline="")
    for path in changed:
        print(f"would reformat {path}" if args.check else f"reformatted {path}")
    if args.check and changed and status == 0:
        status = 1
    return status


def _codes(args: argparse.Namespace) -> int:
    if args.markdown:
        print(markdown_document(), end="")
        return 0
    for c in CODES.values():
        print(f"{c.code}  {c.severity.label:<7}  {c.name:<26}  {c.summary}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tl", description="TL: check, format and build attention kernels.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    check = sub.add_parser(
        "check", help="report diagnostics",
        description="Report diagnostics as FILE:LINE:COL: severity[CODE] message, with 1-based line and "
                    "column (the column in UTF-16 code units). Exit 0: no errors; 1: errors; 2: a file "
                    "could not be read (missing, directory, binary, not UTF-8).",
    )
    check.add_argument("files", nargs="+", metavar="FILE")
    check.add_argument("--format", choices=("text", "json"), default="text",
                       help="json: a list of diagnostics with 0-based LSP ranges and fixes")
    check.set_defaults(func=_check)
    fmt = sub.add_parser(
        "fmt", help="format files in place",
        description="Rewrite files in the canonical TL layout (idempotent, keeps comments). Exit 2 if a "
                    "file could not be read.",
    )
    fmt.add_argument("files", nargs="+", metavar="FILE")
    fmt.add_argument("--check", action="store_true",
                     help="write nothing; list files that would change and exit 1 if any")
    fmt.set_defaults(func=_fmt)
    codes = sub.add_parser("codes", help="list diagnostic codes")
    codes.add_argument("--markdown", action="store_true", help="print docs/diagnostics.md")
    codes.set_defaults(func=_codes)
    for name in PLUGINS:
        module = _optional_import(name)
        if module is not None:
            module.register(sub)
    return parser


def _optional_import(name: str) -> types.ModuleType | None:
    """Import `name` if it exists; a ModuleNotFoundError for it (or a parent package) means skip."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        parts = name.split(".")
        missing = {".".join(parts[: i + 1]) for i in range(len(parts))}
        if err.name in missing:
            return None
        raise


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return int(func(args))
    except BrokenPipeError:  # `tl codes | head`: the reader left; not an error worth a traceback
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
