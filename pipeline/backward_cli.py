"""`tl build --backward`, `tl run --backward`, `tl bench --backward` (dispatched from `pipeline.cli`)."""

from __future__ import annotations

import argparse
import functools
import math
from typing import Any

from pipeline.backward import BackwardBuild, BackwardBuildError, translate_backward
from pipeline.cli import EXIT_FAILED, EXIT_NO_DEVICE, EXIT_OK, EXIT_USAGE, _err, _out


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
            build = translate_backward(path, deterministic=getattr(args, "deterministic", False))
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
        build = translate_backward(
            args.file, dtype=getattr(args, "dtype", None), deterministic=getattr(args, "deterministic", False)
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

    from runner.backward import backward
    from runner.backward_verify import verify_backward
    from runner.bench import time_interleaved
    from runner.flops import attention_flops, tflops
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
    plain = spec.program is None and spec.mask in ("none", "causal")
    d = spec.head_dim
    _out(f"{'seqlen':>7} {'batch':>5} " + " ".join(f"{n:>12}" for n in ("tl", "sdpa-flash", "sdpa-cudnn")))
    for s in seqlens:
        b, h = max(1, 16384 // s), 16
        res = verify_backward(loaded, Shape(b, h, h, s, s))
        _out(res.line())
        if not res.passed:
            status = EXIT_FAILED
        q, k, v, do = (torch.randn(b, s, h, d, device="cuda").to(q_dtype(spec.dtype)) for _ in range(4))
        scale = 1.0 / math.sqrt(d)
        causal = spec.mask == "causal"
        extras = _side(spec, b, h, s)
        o, lse = _forward_reference_outputs(spec, q, k, v, scale, extras)
        cands: dict[str, Any] = {
            "tl": functools.partial(
                _drop_index, backward, loaded, q, k, v, o, lse, do, softmax_scale=scale, extras=extras
            )
        }
        if plain:
            cands.update(_sdpa_backward(q, k, v, do, causal, scale))
        timings = time_interleaved(cands, target_s=1.0)
        flops = 2.5 * attention_flops(b, h, s, s, d, mask=spec.mask if spec.mask != "window" else "none")
        cells = []
        for name in ("tl", "sdpa-flash", "sdpa-cudnn"):
            t = timings.get(name)
            cells.append(
                f"{tflops(flops, t.median_ms / 1e3):9.1f} TF"
                if t is not None and not isinstance(t, Exception)
                else f"{'n/a':>12}"
            )
        _out(f"{s:>7} {b:>5} " + " ".join(cells))
    _out(f"backward TFLOPS (2.5x forward FLOPs), {spec.dtype}, d {d}, {torch.cuda.get_device_name()}")
    return status


def _drop_index(fn: Any, *args: Any, **kw: Any) -> Any:
    """`fn(*args, **kw)` as a timing callable `run(i)` (the run index comes last and is ignored)."""
    return fn(*args[:-1], **kw)


def q_dtype(name: str) -> Any:
    from runner.launch import torch_dtype

    return torch_dtype(name)


def _side(spec: Any, b: int, h: int, s: int) -> dict[str, Any]:
    if not spec.program:
        return {}
    from kernel_ir.program import Forward
    from runner.ir_reference import make_side_tensors

    return make_side_tensors(
        Forward.from_dict(spec.program), batch=b, heads=h, heads_kv=h, seqlen_q=s, seqlen_k=s, device="cuda"
    )


def _forward_reference_outputs(
    spec: Any, q: Any, k: Any, v: Any, scale: float, extras: dict[str, Any]
) -> tuple[Any, Any]:
    import torch

    from kernel_ir.program import CAUSAL_MASK, PLAIN_SCORE, Forward
    from runner.ir_reference import forward_reference

    masks = (CAUSAL_MASK,) if spec.mask == "causal" else ()
    prog = (
        Forward.from_dict(spec.program)
        if spec.program
        else Forward(PLAIN_SCORE, masks, header_mask=spec.mask)
    )
    o, lse = forward_reference(prog, q, k, v, softmax_scale=scale, tensors=extras)
    return o.to(q.dtype), (lse.float().contiguous() if lse is not None else torch.zeros(1, device=q.device))


def _sdpa_backward(q: Any, k: Any, v: Any, do: Any, causal: bool, scale: float) -> dict[str, Any]:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    out: dict[str, Any] = {}
    for name, backend in (
        ("sdpa-flash", SDPBackend.FLASH_ATTENTION),
        ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION),
    ):
        leaves = [t.detach().transpose(1, 2).requires_grad_(True) for t in (q, k, v)]
        try:
            with sdpa_kernel([backend]):
                o = scaled_dot_product_attention(*leaves, is_causal=causal, scale=scale)
        except RuntimeError:
            continue

        def run(i: int, o: Any = o, leaves: Any = leaves) -> Any:
            return torch.autograd.grad(o, leaves, do.transpose(1, 2), retain_graph=True)

        out[name] = run
    return out
