"""`tl generate`, `tl complete`, `tl tune`: registered into the `tl` command by `register(subparsers)`.

Exit codes: 0 success; 1 the result still has errors (or holes), or an LLM endpoint failed; 2 usage errors
(a file that cannot be read, bad arguments, `--llm` without a configured endpoint); 3 `tl tune` without a
GPU (the planner's ranking is printed instead).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path
from typing import Any

from tl_language.codes import SKETCH_CODES

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NO_DEVICE = 0, 1, 2, 3


def _out(msg: str = "") -> None:
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()


def _err(msg: str) -> None:
    sys.stderr.write(msg + "\n")


def register(subparsers: Any) -> None:
    g = subparsers.add_parser(
        "generate",
        help="write TL from a description (LLM when configured, else the offline generator)",
        description="Prints the sketch, then the code, then the check result. With TL_LLM_BASE_URL and "
        "TL_LLM_MODEL set, an OpenAI-compatible model writes both and the checker repairs them; "
        "without, the offline generator builds them from the examples' template and the planner.",
    )
    g.add_argument("description", help='e.g. "a causal GQA kernel, bf16, head dim 128, for A100"')
    g.add_argument("-o", "--output", type=Path, default=None, help="write the code here")
    g.add_argument(
        "--target", default=None, help="sm_75 | sm_80 | sm_86 | sm_89 | sm_90 (wins over the text)"
    )
    g.add_argument("--rounds", type=int, default=3, help="repair rounds per stage (default 3)")
    g.add_argument("--offline", action="store_true", help="use the offline generator even if an LLM is set")
    g.add_argument(
        "--shape", default=None, metavar="B,H,Sq,Sk", help="problem shape the planner optimises for"
    )
    _feedback_flags(g)
    g.set_defaults(func=cmd_generate)

    c = subparsers.add_parser(
        "complete",
        help="turn a sketch into TL code: its missing parts, `?` parameters and tiles (--llm asks the model)",
        description="Stage 2 of the workflow: a statements-only sketch gets its global Allocates, register "
        "accumulators, tiles, coordinates, loop bound, Reshape and headers, and the planner fills every `?` "
        "for the target. Prints the result (or a diff with --diff); --write writes it back.",
    )
    c.add_argument("file", type=Path, metavar="FILE")
    c.add_argument("--llm", action="store_true", help="ask the configured model (checked by the repair loop)")
    c.add_argument("--write", action="store_true", help="write the result back to FILE (else print it)")
    c.add_argument("--diff", action="store_true", help="print a unified diff instead of the whole result")
    c.add_argument("--target", default=None, help="sm_75 … sm_90, where FILE has no Target")
    c.add_argument("--dtype", default=None, help="fp16 | bf16, if FILE has no Dtype")
    c.add_argument("--head-dim", type=int, default=None, help="the head dimension, if FILE has no `Param d`")
    c.add_argument("--rounds", type=int, default=3, help="repair rounds with --llm (default 3)")
    c.add_argument(
        "--shape", default=None, metavar="B,H,Sq,Sk", help="problem shape the planner optimises for"
    )
    _feedback_flags(c)
    c.set_defaults(func=cmd_complete)

    t = subparsers.add_parser(
        "tune",
        help="rank tilings with the planner; with a GPU, measure the top ones and write the best back",
    )
    t.add_argument("file", type=Path, metavar="FILE")
    t.add_argument(
        "--shape", default=None, metavar="B,H,Sq,Sk", help="problem shape (default 4,16,4096,4096)"
    )
    t.add_argument("--top", type=int, default=4, help="candidates to measure (default 4)")
    t.add_argument("--yes", action="store_true", help="write the best back without asking")
    t.set_defaults(func=cmd_tune)


def _feedback_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--compile",
        action="store_true",
        help="also compile each valid answer through NVRTC and feed errors back (slow: ~20 s each)",
    )
    p.add_argument(
        "--verify",
        action="store_true",
        help="also verify each valid answer on the GPU and feed mismatches back (needs a device)",
    )


def _stages(args: argparse.Namespace) -> Any:
    from translator.llm.check import default_stages

    return default_stages(compile=args.compile, verify=args.verify)


def _read(path: Path) -> str | None:
    try:
        from tl_language.cli import Unreadable, read_tl
    except ImportError:  # the CLI module of the core is absent: read plainly
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            _err(f"tl: {path}: cannot read ({e})")
            return None
    try:
        return read_tl(str(path))
    except Unreadable as e:
        _err(f"tl: {e}")
        return None


def _shape(text: str | None) -> Any:
    from translator.planner import Shape

    return Shape.parse(text) if text else None


def _report(path: str, diagnostics: list[Any]) -> tuple[int, int]:
    errors = warnings = 0
    for d in diagnostics:
        if d.severity.label == "info" and d.code not in SKETCH_CODES:
            continue
        errors += d.severity.label == "error"
        warnings += d.severity.label == "warning"
        pos = d.range.start
        _out(f"{path}:{pos.line + 1}:{pos.character + 1}: {d.severity.label}[{d.code}] {d.message}")
    return errors, warnings


def _settings() -> Any:
    from translator.llm.settings import LlmSettings

    return LlmSettings.from_env()


def cmd_generate(args: argparse.Namespace) -> int:
    from translator.llm.client import LlmError
    from translator.llm.workflow import generate

    try:
        settings = None if args.offline else _settings()
        shape = _shape(args.shape)
    except ValueError as e:
        _err(f"tl generate: {e}")
        return EXIT_USAGE
    if args.target is not None:
        from tl_language import gpu

        if args.target.lower() not in gpu.TARGETS:
            _err(f"tl generate: unknown target `{args.target}` (known: {', '.join(gpu.TARGETS)})")
            return EXIT_USAGE
    offline = settings is None or not settings.configured
    if offline:
        why = (
            "--offline"
            if args.offline
            else "no LLM endpoint configured (set TL_LLM_BASE_URL and TL_LLM_MODEL)"
        )
        _out(f"# offline generator: {why}; building from the examples' template and the planner")
    try:
        r = generate(
            args.description,
            target=args.target and args.target.lower(),
            settings=settings,
            rounds=max(0, args.rounds),
            on_progress=lambda m: _err(f"tl generate: {m}"),
            stages=_stages(args),
            shape=shape,
        )
    except LlmError as e:
        _err(f"tl generate: {e}")
        return EXIT_FAILED
    _out("── sketch " + "─" * 60)
    _out(r.sketch.rstrip())
    _out("── code " + "─" * 62)
    _out(r.code.rstrip())
    _out("── check " + "─" * 61)
    name = str(args.output) if args.output else "<generated>"
    errors, warnings = _report(name, r.diagnostics)
    for note in r.notes[1:] if r.offline else r.notes:
        _out(f"note: {note}")
    how = "offline generator" if r.offline else f"{r.rounds} repair round(s), {len(r.attempts)} answer(s)"
    _out(f"{'ok' if r.ok else 'NOT OK'}: {errors} error(s), {warnings} warning(s) ({how})")
    if args.output:
        args.output.write_text(r.code, encoding="utf-8")
        _out(f"wrote {args.output}")
    return EXIT_OK if r.ok else EXIT_FAILED


def cmd_complete(args: argparse.Namespace) -> int:
    from translator.llm.client import LlmError
    from translator.llm.workflow import complete

    text = _read(args.file)
    if text is None:
        return EXIT_USAGE
    try:
        shape = _shape(args.shape)
        settings = _settings() if args.llm else None
    except ValueError as e:
        _err(f"tl complete: {e}")
        return EXIT_USAGE
    if settings is not None and not settings.configured:
        _err(f"tl complete: {settings.not_configured_message}")
        return EXIT_USAGE
    usage = _header_options(args)
    if usage:
        _err(f"tl complete: {usage}")
        return EXIT_USAGE
    try:
        r = complete(
            text,
            settings,
            rounds=max(0, args.rounds),
            use_llm=args.llm,
            shape=shape,
            on_progress=lambda m: _err(f"tl complete: {m}"),
            stages=_stages(args),
            target=args.target and args.target.lower(),
            dtype=args.dtype and args.dtype.lower(),
            head_dim=args.head_dim,
            kernel=_kernel_name(args.file),
        )
    except LlmError as e:
        _err(f"tl complete: {e}")
        return EXIT_FAILED
    for note in r.notes:
        _err(f"tl complete: note: {note}")
    if args.diff:
        diff = difflib.unified_diff(
            text.splitlines(keepends=True),
            r.text.splitlines(keepends=True),
            fromfile=str(args.file),
            tofile=f"{args.file} (completed)",
        )
        sys.stdout.write("".join(diff))
    elif not args.write:
        sys.stdout.write(r.text)
    if args.write:
        if r.text != text:
            args.file.write_text(r.text, encoding="utf-8")
            _err(f"tl complete: wrote {args.file} ({'model' if not r.offline else 'planner'})")
        else:
            _err(f"tl complete: {args.file}: nothing to fill")
    _errors, _ = _report(
        str(args.file),
        [d for d in r.diagnostics if d.severity.label in ("error", "warning") or d.code in SKETCH_CODES],
    )
    return EXIT_OK if r.ok else EXIT_FAILED


def _header_options(args: argparse.Namespace) -> str | None:
    """A usage error for --target/--dtype/--head-dim, or None."""
    from tl_language import gpu

    if args.target is not None and args.target.lower() not in gpu.TARGETS:
        return f"unknown target `{args.target}` (known: {', '.join(gpu.TARGETS)})"
    if args.dtype is not None and args.dtype.lower() not in gpu.DTYPES:
        return f"unknown dtype `{args.dtype}` (known: {', '.join(gpu.DTYPES)})"
    if args.head_dim is not None and args.head_dim not in gpu.HEAD_DIMS:
        dims = ", ".join(map(str, gpu.HEAD_DIMS))
        return f"head dimension {args.head_dim} is not one the kernels take ({dims})"
    return None


def _kernel_name(path: Path) -> str | None:
    """The file's stem as a kernel name when it is an identifier TL accepts (else stage 2's default)."""
    from tl_language.checks.kernel_name import kernel_name_problem

    stem = path.stem
    ok = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", stem) is not None and kernel_name_problem(stem) is None
    return stem if ok else None


def cmd_tune(args: argparse.Namespace) -> int:
    from tl_language import analyze
    from translator.planner import DEFAULT_SHAPE, plan
    from translator.planner.candidates import TUNABLE
    from translator.planner.fill import apply_candidate
    from translator.planner.measure import device_status, measure

    text = _read(args.file)
    if text is None:
        return EXIT_USAGE
    try:
        shape = _shape(args.shape) or DEFAULT_SHAPE
    except ValueError as e:
        _err(f"tl tune: {e}")
        return EXIT_USAGE
    analysis = analyze(text)
    errors = [d for d in analysis.diagnostics if d.severity.label == "error"]
    if errors:
        _report(str(args.file), errors)
        _err(f"tl tune: {args.file} has {len(errors)} error(s); fix them first")
        return EXIT_FAILED
    result = plan(analysis.model, shape, search=TUNABLE)
    for p in result.problems:
        _err(f"tl tune: {p}")
    if not result.candidates:
        return EXIT_FAILED
    _out(
        f"planner ranking for {analysis.model.target.arch} {analysis.model.dtype}, shape B,H,Sq,Sk = {shape} "
        f"({len(result.candidates)} tilings fit):"
    )
    for c in result.candidates[: max(args.top, 10)]:
        _out(f"  {c.rank:>2}. {c.summary()}")
    why = device_status()
    if why is not None:
        _err(
            f"tl tune: no GPU measurement: {why}. The ranking above is the planner's prediction; run "
            "`tl tune` on a machine with a CUDA device to measure it."
        )
        return EXIT_NO_DEVICE
    top = result.candidates[: max(1, args.top)]
    measured = measure(text, top, shape, log=_out)
    _out("measured:")
    for m in measured:
        res = f"{m.tflops:.1f} TFLOPS" if m.tflops is not None else f"n/a ({m.error})"
        _out(
            f"  {m.candidate.rank:>2}. BM={m.candidate.tiling.block_m} BN={m.candidate.tiling.block_n} "
            f"warps={m.candidate.tiling.warps} stages={m.candidate.tiling.stages}: {res}"
        )
    ok = [m for m in measured if m.tflops is not None]
    if not ok:
        _err("tl tune: no candidate built, verified and ran; nothing to write")
        return EXIT_FAILED
    best = max(ok, key=lambda m: m.tflops or 0.0)
    new_text, _ = apply_candidate(text, best.candidate)
    if new_text == text:
        _out(f"best: #{best.candidate.rank} is what {args.file} already has; nothing to change")
        return EXIT_OK
    diff = difflib.unified_diff(
        text.splitlines(keepends=True),
        new_text.splitlines(keepends=True),
        fromfile=str(args.file),
        tofile=f"{args.file} (tuned)",
    )
    _out("".join(diff).rstrip())
    if not args.yes:
        if not sys.stdin.isatty():
            _out("not written (no terminal to confirm): rerun with --yes to write it")
            return EXIT_OK
        if input(f"write this to {args.file}? [y/N] ").strip().lower() not in ("y", "yes"):
            _out("not written")
            return EXIT_OK
    args.file.write_text(new_text, encoding="utf-8")
    _out(f"wrote {args.file}")
    return EXIT_OK
