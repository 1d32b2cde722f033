"""`tl build`, `tl run`, `tl bench`: registered into the `tl` command by `register(subparsers)`.

Exit codes: 0 success; 1 the TL has errors, the CUDA does not compile, or verification failed;
2 usage errors (bad arguments, a file that cannot be read, a hand-edited .cu in the way);
3 no CUDA device (`run` and `bench` only; `build` compiles through NVRTC without a GPU).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NO_DEVICE = 3


def register(subparsers: Any) -> None:
    b = subparsers.add_parser("build", help="check, translate to CuTe (FILE.cu) and compile through NVRTC")
    b.add_argument("files", nargs="+", type=Path, metavar="FILE", help=".tl files")
    b.add_argument("--force", action="store_true", help="overwrite a FILE.cu that was edited by hand")
    b.add_argument("--jobs", type=int, default=None, help="parallel compiles (default: all cores)")
    b.add_argument("--backward", action="store_true", help="the derived backward instead: FILE.bwd.cu")
    b.set_defaults(func=cmd_build, tl_command="build")

    r = subparsers.add_parser("run", help="build and verify against the float32 reference on the GPU")
    r.add_argument(
        "file", type=Path, metavar="FILE", help="a .tl file, or a (hand-edited) .cu from `tl build`"
    )
    r.add_argument(
        "--shape",
        default=None,
        metavar="B,H,Hkv,Sq,Sk",
        help="problem shape (default: 2,8,8,1000,1000, heads adjusted to the kernel's GQA group)",
    )
    r.add_argument(
        "--dtype",
        choices=("fp16", "bf16"),
        default=None,
        help="input dtype (a .tl is translated for it; a .cu must have been built for it)",
    )
    r.add_argument("--strided", action="store_true", help="non-contiguous batch/seqlen/head strides")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--force", action="store_true", help="overwrite a FILE.cu that was edited by hand")
    r.add_argument("--backward", action="store_true", help="verify the derived backward (dQ, dK, dV)")
    r.set_defaults(func=cmd_run, tl_command="run")

    c = subparsers.add_parser(
        "bench", help="build, verify, and time against PyTorch SDPA, FlexAttention, FA4"
    )
    c.add_argument("file", type=Path, metavar="FILE", help="a .tl file or a .cu from `tl build`")
    c.add_argument("--seqlens", default="1024,4096,16384", help="comma-separated (16k tokens per config)")
    c.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    c.add_argument("--force", action="store_true", help="overwrite a FILE.cu that was edited by hand")
    c.add_argument("--backward", action="store_true", help="time the derived backward")
    c.set_defaults(func=cmd_bench, tl_command="bench")
    for sub in (b, r, c):
        sub.add_argument(
            "--deterministic",
            action="store_true",
            help="with --backward: dQ without cross-block atomics, the same bits every run",
        )
        sub.add_argument(
            "--backward-skeleton",
            choices=("auto", "sm80", "sm90"),
            default="auto",
            help="with --backward: sm90 = dQ/dK/dV on wgmma for sm_90a, sm80 = FlashAttention-2's mma.sync "
            "kernels (PTX that runs on sm_80 and later), auto = sm90 for a Target sm_90 program it covers",
        )


def _err(msg: str) -> None:
    sys.stderr.write(msg + "\n")


def _out(msg: str) -> None:
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()


def cmd_build(args: argparse.Namespace) -> int:
    from pipeline.build import BuildError, Built, compile_all, prepare
    from pipeline.report import format_build_error

    if getattr(args, "backward", False):
        from pipeline.backward_cli import cmd_build_backward

        return cmd_build_backward(args)
    status = EXIT_OK
    ready = []
    for path in args.files:
        if path.suffix != ".tl":
            _err(f"{path}: error: `tl build` takes .tl files (use `tl run {path}` for a .cu)")
            status = max(status, EXIT_USAGE)
            continue
        try:
            t = prepare(path, force=args.force)
        except BuildError as exc:
            if exc.stage == "sketch":  # holes are information, not errors: say what to do and go on
                _out(f"{path}: skipped: {exc.message}")
                continue
            _err(format_build_error(exc))
            status = max(status, EXIT_USAGE if exc.stage in ("read", "overwrite") else EXIT_FAILED)
            continue
        for w in t.warnings:
            from pipeline.report import format_diagnostic

            _err(format_diagnostic(path, w, t.text))
        ready.append(t)
    if ready:
        _out(f"compiling {len(ready)} kernel(s) through NVRTC ...")
    for result in compile_all(ready, max_workers=args.jobs):
        if isinstance(result, BuildError):
            _err(format_build_error(result))
            status = max(status, EXIT_FAILED)
        elif isinstance(result, Built):
            c = result.compiled
            how = f"cached (compiled in {c.seconds:.1f} s)" if c.cached else f"compiled in {c.seconds:.1f} s"
            _out(f"{result.translated.path} → {result.translated.cu_path}: {c.kind} for {c.target}, {how}")
    return status


def _default_shape(group: int) -> str:
    heads = max(8, group)
    return f"2,{heads},{heads // group if group else heads},1000,1000"


def _prepare_for_device(args: argparse.Namespace) -> tuple[Any, Any] | int:
    """Check/translate (or ABI-check a .cu), then the device check, compile and load.

    Returns (Built, LoadedKernel) or an exit code. File errors come first: they are fast and need no GPU.
    """
    from pipeline.build import BuildError, Built, compile_all, prepare
    from pipeline.report import format_build_error
    from runner.launch import LoadError, NoDeviceError, load, require_device

    path: Path = args.file
    if path.suffix not in (".tl", ".cu"):
        _err(f"{path}: error: expected a .tl or .cu file")
        return EXIT_USAGE
    dtype = getattr(args, "dtype", None)
    try:
        if dtype and path.suffix == ".tl":
            translated = _translate_dtype_variant(path, dtype)
        else:
            translated = prepare(path, force=args.force)
    except BuildError as exc:
        _err(format_build_error(exc))
        return EXIT_USAGE if exc.stage in ("read", "overwrite") else EXIT_FAILED
    if dtype and translated.spec.dtype != dtype:
        _err(f"{path}: error: the kernel was built for {translated.spec.dtype}, not {dtype}")
        return EXIT_USAGE
    try:
        device_arch = require_device()
    except NoDeviceError as exc:
        _err(f"{exc}: `tl {args.tl_command}` needs a GPU (`tl build` compiles without one)")
        return EXIT_NO_DEVICE
    (built,) = compile_all([translated], device_arch=device_arch, max_workers=1)
    if isinstance(built, BuildError):
        _err(format_build_error(built))
        return EXIT_FAILED
    assert isinstance(built, Built)
    c = built.compiled
    _out(f"{path}: {c.kind} for {c.target} ({'cached' if c.cached else f'compiled in {c.seconds:.1f} s'})")
    try:
        loaded = load(c, built.spec)
    except LoadError as exc:
        _err(f"{path}: error: {exc}")
        return EXIT_FAILED
    return built, loaded


def _translate_dtype_variant(path: Path, dtype: str) -> Any:
    """Translate the TL with its Dtype replaced, in memory (the .cu on disk stays the TL's own)."""
    import tempfile

    from pipeline.build import BuildError, translate_file
    from pipeline.variants import variant

    try:
        text = variant(path.read_text(), dtype=dtype)
    except OSError as exc:
        raise BuildError(stage="read", path=path, message=f"cannot read: {exc.strerror}") from None
    with tempfile.TemporaryDirectory() as tmp:
        tl = Path(tmp) / path.name
        tl.write_text(text)
        return translate_file(tl)


def cmd_run(args: argparse.Namespace) -> int:
    from runner.launch import LaunchError
    from runner.verify import Shape, verify

    if getattr(args, "backward", False):
        from pipeline.backward_cli import cmd_run_backward

        return cmd_run_backward(args)
    prepared = _prepare_for_device(args)
    if isinstance(prepared, int):
        return prepared
    built, loaded = prepared
    if built.spec.inference:
        from pipeline.inference import run_inference_checks

        return run_inference_checks(args, loaded, _out, _err)
    try:
        shape = Shape.parse(args.shape or _default_shape(built.spec.group))
        result = verify(loaded, shape, seed=args.seed, strided=args.strided)
    except (ValueError, LaunchError) as exc:
        _err(f"{args.file}: error: {exc}")
        return EXIT_USAGE
    _out(str(result))
    return EXIT_OK if result.passed else EXIT_FAILED


def cmd_bench(args: argparse.Namespace) -> int:
    import torch

    from pipeline.benchmark import KernelEntry, format_table, run_case, sweep_shape, to_json
    from runner.baselines import BASELINES
    from runner.bench import BenchCase
    from runner.verify import verify

    if getattr(args, "backward", False):
        from pipeline.backward_cli import cmd_bench_backward

        return cmd_bench_backward(args)
    prepared = _prepare_for_device(args)
    if isinstance(prepared, int):
        return prepared
    built, loaded = prepared
    spec = built.spec
    if spec.inference:
        _err(f"{args.file}: an inference kernel; time it with benchmarks/decode.py or benchmarks/varlen.py")
        return EXIT_USAGE
    try:
        seqlens = [int(s) for s in args.seqlens.split(",") if s]
    except ValueError:
        _err(f"--seqlens: expected comma-separated integers, got {args.seqlens!r}")
        return EXIT_USAGE
    cases, status = [], EXIT_OK
    for s in seqlens:
        shape = sweep_shape(s, spec.head_dim_qk)
        if spec.group:
            shape = type(shape)(shape.batch, shape.heads, max(1, shape.heads // spec.group), s, s)
        entry = KernelEntry(name=spec.kernel_name, loaded=loaded, verified=verify(loaded, shape))
        _out(str(entry.verified))
        if not entry.verified.passed:
            status = EXIT_FAILED
        case = BenchCase.for_spec(spec, shape)
        cases.append(run_case(case, [entry]))
    gpu = torch.cuda.get_device_name()
    _out(format_table(cases, [spec.kernel_name], [b.name for b in BASELINES], gpu))
    if args.json:
        args.json.write_text(to_json(cases, gpu))
    return status


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (`python -m pipeline.cli`), for when the `tl` command is not installed."""
    parser = argparse.ArgumentParser(prog="tl")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
