"""`tl build --backward`, `tl run --backward`, `tl bench --backward` (dispatched from `pipeline.cli`)."""

from __future__ import annotations

import argparse

from pipeline.backward import BackwardBuild, BackwardBuildError, translate_backward
from pipeline.cli import EXIT_FAILED, EXIT_NO_DEVICE, EXIT_OK, EXIT_USAGE, _err, _out


def skeleton(args: argparse.Namespace) -> tuple[str | None, str]:
    """(arch, skeleton) for `translate_backward`: `--backward-skeleton sm90` the wgmma one (arch sm_90),
    `sm80` the mma.sync one (arch sm_80), `auto` (the default) the TL Target's choice."""
    chosen = getattr(args, "backward_skeleton", None) or "auto"
    return {"sm90": "sm_90", "sm80": "sm_80"}.get(chosen), chosen


def cmd_build_backward(args: argparse.Namespace) -> int:
    """FILE.bwd.cu + FILE.bwd.launch.json beside each FILE.tl, compiled through NVRTC (no GPU needed)."""
    from runner.compile import CompileError

    status = EXIT_OK
    for path in args.files:
        if path.suffix != ".tl":
            _err(f"{path}: error: `tl build --backward` takes .tl files")
            status = max(status, EXIT_USAGE)
            continue
        try:
            arch, skel = skeleton(args)
            build = translate_backward(
                path, arch=arch, deterministic=getattr(args, "deterministic", False), skeleton=skel
            )
            cu, js = build.write()
            c = build.compile()
        except BackwardBuildError as exc:
            _err(f"error: {exc}")
            status = max(status, EXIT_FAILED)
            continue
        except CompileError as exc:
            _err(f"{path}: error: the backward does not compile: {exc}")
            status = max(status, EXIT_FAILED)
            continue
        how = "cached" if c.cached else f"compiled in {c.seconds:.1f} s"
        _out(f"{path} → {cu} (+ {js.name}): {c.kind} for {c.target}, {how}")
    return status


def _load(args: argparse.Namespace) -> BackwardBuild | int:
    from runner.launch import LoadError, NoDeviceError, require_device

    if args.file.suffix != ".tl":
        _err(f"{args.file}: error: `--backward` takes a .tl file")
        return EXIT_USAGE
    try:
        require_device()
    except NoDeviceError as exc:
        _err(f"{exc}: `tl {args.tl_command} --backward` needs a GPU (`tl build --backward` does not)")
        return EXIT_NO_DEVICE
    try:
        arch, skel = skeleton(args)
        build = translate_backward(
            args.file,
            dtype=getattr(args, "dtype", None),
            arch=arch,
            deterministic=getattr(args, "deterministic", False),
            skeleton=skel,
        )
        build.load()
    except BackwardBuildError as exc:
        _err(f"error: {exc}")
        return EXIT_FAILED
    except LoadError as exc:
        _err(f"{args.file}: error: {exc}")
        return EXIT_FAILED
    return build


def cmd_run_backward(args: argparse.Namespace) -> int:
    from runner.backward_verify import verify_backward
    from runner.launch import LaunchError
    from runner.verify import Shape

    build = _load(args)
    if isinstance(build, int):
        return build
    try:
        shape = Shape.parse(args.shape or "2,8,8,1000,1000")
        result = verify_backward(build.load(), shape, seed=args.seed)
    except (ValueError, LaunchError) as exc:
        _err(f"{args.file}: error: {exc}")
        return EXIT_USAGE
    _out(result.line())
    return EXIT_OK if result.passed else EXIT_FAILED


def cmd_bench_backward(args: argparse.Namespace) -> int:
    """Verify, then time the backward (alone) against SDPA's flash and cuDNN backward where they run the
    program (the plain forward, no mask or causal), same process, balanced order."""
    import torch

    from pipeline.backward_bench import CANDIDATES, backward_tflops
    from runner.backward_verify import verify_backward
    from runner.verify import Shape

    build = _load(args)
    if isinstance(build, int):
        return build
    loaded = build.load()
    spec = build.spec
    status = EXIT_OK
    try:
        seqlens = [int(s) for s in args.seqlens.split(",") if s]
    except ValueError:
        _err(f"--seqlens: expected comma-separated integers, got {args.seqlens!r}")
        return EXIT_USAGE
    _out(f"{'seqlen':>7} {'batch':>5} " + " ".join(f"{n:>12}" for n in CANDIDATES))
    for s in seqlens:
        b, h = max(1, 16384 // s), 16
        res = verify_backward(loaded, Shape(b, h, h, s, s))
        _out(res.line())
        if not res.passed:
            status = EXIT_FAILED
        rates = backward_tflops(loaded, b, h, s, s)
        cells = [f"{r:9.1f} TF" if (r := rates[n]) is not None else f"{'n/a':>12}" for n in CANDIDATES]
        _out(f"{s:>7} {b:>5} " + " ".join(cells))
    gpu = torch.cuda.get_device_name()
    _out(f"backward TFLOPS (2.5x forward FLOPs), {spec.dtype}, d {spec.head_dim}, {gpu}")
    return status
