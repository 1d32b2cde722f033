"""The backward of a TL forward: check → plan → derive and render the backward kernels → compile → run.

    build = build_backward("examples/variants/alibi.tl", dtype="bf16", arch="sm_80")
    dq, dk, dv, dside = build.run(q, k, v, o, lse, do, scale=None, extras={"slopes": slopes})

`tl build --backward FILE.tl` writes FILE.bwd.cu and FILE.bwd.launch.json beside the forward and compiles
them (no GPU needed); `tl run --backward` verifies them against autograd of the IR reference.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.abi import BackwardSpec
from runner.cache import atomic_write
from runner.compile import CompiledKernel, CompileError, CompileJob, compile_many
from tl_language.diagnostics import Severity

ARCH_CC = {"sm_80": (8, 0), "sm_86": (8, 6), "sm_89": (8, 9), "sm_90": (9, 0)}
# "sm80": FA2's structure on mma.sync (every target); "sm90": the dQ/dK/dV kernel on wgmma (sm_90a),
# 1.2-1.3x the sm80 skeleton on the H200 (docs/results/2026-12-01-h200-backward-sm90-sweep.json);
# "auto": sm90 for a TL whose Target is sm_90 and that the sm90 skeleton covers, else sm80.
SKELETONS = ("auto", "sm80", "sm90")


class BackwardBuildError(ValueError):
    """The TL does not check, or its backward cannot be derived (message names the file and why)."""


@dataclass
class BackwardBuild:
    """One program's backward: source, launch spec, and (once compiled / loaded) the kernels."""

    tl_path: Path | None
    source: str
    spec: BackwardSpec
    compiled: CompiledKernel | None = None
    _loaded: Any = field(default=None, repr=False)

    @property
    def cu_path(self) -> Path | None:
        return self.tl_path.with_suffix(".bwd.cu") if self.tl_path else None

    def compile(self, device_arch: str | None = None) -> CompiledKernel:
        """NVRTC for the spec's arch (PTX finalised for `device_arch` when that is newer)."""
        # In a worker process, as the forward's builds are: NVRTC crashed in a torch process that had run
        # inductor (docs/results/2026-12-01-h200-torch-api-tests-segfault.log), and a crash there must
        # not take the caller's process down; a cache hit is still answered here.
        name = self.cu_path.name if self.cu_path else f"{self.spec.name}.bwd.cu"
        job = CompileJob(source=self.source, arch=self.spec.arch, device_arch=device_arch, name=name)
        (result,) = compile_many([job], max_workers=1, isolated=True)
        if isinstance(result, CompileError):
            raise result
        self.compiled = result
        return self.compiled

    def load(self) -> Any:
        from runner.backward import load_backward
        from runner.launch import require_device

        if self._loaded is None:
            device_arch = require_device()
            if self.compiled is None or (self.compiled.kind == "ptx" and device_arch != self.spec.arch):
                self.compile(device_arch)
            assert self.compiled is not None
            self._loaded = load_backward(self.compiled, self.spec)
        return self._loaded

    def run(
        self,
        q: Any,
        k: Any,
        v: Any,
        o: Any,
        lse: Any,
        do: Any,
        *,
        scale: float | None = None,
        window: tuple[int, int] | None = None,
        extras: dict[str, Any] | None = None,
        block_classes: Any = None,
    ) -> tuple[Any, Any, Any, dict[str, Any]]:
        """(dq, dk, dv, {learnable side tensor: fp32 gradient}) on torch's current stream; see
        `runner.backward.backward` (`block_classes`: this build's `block_classes`, else built per call)."""
        from runner.backward import backward

        return backward(
            self.load(), q, k, v, o, lse, do,
            softmax_scale=scale, window=window, extras=extras, block_classes=block_classes,
        )  # fmt: skip

    def block_classes(
        self, q: Any, k: Any, *, window: tuple[int, int] | None = None, extras: dict[str, Any] | None = None
    ) -> Any:
        """The backward's block classes for these lengths and side tensors, to pass to `run` for every
        layer of a batch (`runner.backward.backward_block_classes`)."""
        from runner.backward import backward_block_classes

        return backward_block_classes(self.load(), q, k, window=window, extras=extras)

    def write(self) -> tuple[Path, Path]:
        """FILE.bwd.cu and FILE.bwd.launch.json beside the TL file."""
        if self.cu_path is None:
            raise BackwardBuildError("a backward built from text has no file to write beside")
        json_path = self.cu_path.with_suffix(".launch.json")
        atomic_write(self.cu_path, self.source.encode())
        atomic_write(json_path, (self.spec.to_json() + "\n").encode())
        return self.cu_path, json_path


def translate_backward(
    tl: str | Path,
    *,
    dtype: str | None = None,
    arch: str | None = None,
    learnable: tuple[str, ...] | None = None,
    deterministic: bool = False,
    skeleton: str = "auto",
    options: dict[str, Any] | None = None,
) -> BackwardBuild:
    """The backward of the TL file (a Path, or a str naming an existing .tl file) or TL text (any other
    str). `dtype` overrides the TL's Dtype. `learnable`: side tensors whose gradient the kernels compute
    (default: those the TL marks `with learnable`). `deterministic`: dQ, dK and dV bit-identical from
    run to run (dQ without cross-block atomics). `skeleton`: "sm80" (FA2's structure on mma.sync, built
    for `arch`, default sm_80, whose PTX runs on sm_90 too), "sm90" (the dQ/dK/dV kernel on wgmma for
    sm_90a, `translator.backends.sm90_bwd`; arch sm_90) or "auto" (the default: sm90 where the TL's
    Target, or `arch`, is sm_90 and that skeleton covers the program, else sm80). `options`: keywords
    for the named skeleton's generator (an A/B variant such as sm90's `overlap_p`; not with "auto").
    Raises BackwardBuildError."""
    from tl_language import analyze
    from translator.errors import TranslateError
    from translator.plan import make_plan

    path: Path | None = None
    if isinstance(tl, Path) or (isinstance(tl, str) and tl.endswith(".tl") and "\n" not in tl):
        path = Path(tl)
        try:
            text = path.read_text()
        except OSError as exc:
            raise BackwardBuildError(f"{path}: cannot read: {exc.strerror}") from None
    else:
        text = str(tl)
    where = str(path) if path else "<text>"
    if skeleton not in SKELETONS:
        raise BackwardBuildError(
            f"{where}: the backward skeletons are {', '.join(SKELETONS)}, not {skeleton}"
        )
    if skeleton == "sm90" and arch not in (None, "sm_90"):
        raise BackwardBuildError(f"{where}: the sm90 backward skeleton needs arch sm_90, not {arch}")
    if options and skeleton == "auto":
        raise BackwardBuildError(f"{where}: generator options need a named skeleton, not auto")
    if arch is not None and arch not in ARCH_CC:
        raise BackwardBuildError(f"{where}: the backward targets {', '.join(ARCH_CC)}, not {arch}")
    analysis = analyze(text)
    errors = [d for d in analysis.diagnostics if d.severity == Severity.ERROR]
    if errors:
        first = errors[0]
        raise BackwardBuildError(
            f"{where}:{first.range.start.line + 1}: {first.code} {first.message} ({len(errors)} error(s))"
        )
    names = tuple(learnable) if learnable is not None else marked_learnable(analysis.model)
    try:
        plan = make_plan(analysis.model, analysis.text)
        if dtype is not None:
            plan = dataclasses.replace(plan, dtype=dtype)
        tries = _skeleton_tries(skeleton, arch, plan.arch)
        for n, (target, generate) in enumerate(tries):
            at = dataclasses.replace(plan, arch=target, compute_capability=ARCH_CC[target])
            try:
                source, spec = generate(
                    at,
                    learnable=names,
                    tl_file=str(path) if path else None,
                    deterministic=deterministic,
                    **(options or {}),
                )
                break
            except TranslateError:
                if n == len(tries) - 1:
                    raise
    except TranslateError as exc:
        d = exc.diagnostics[0]
        raise BackwardBuildError(f"{where}:{d.range.start.line + 1}: {d.code} {d.message}") from None
    return BackwardBuild(tl_path=path, source=source, spec=spec)


def _skeleton_tries(skeleton: str, requested: str | None, target: str) -> list[tuple[str, Any]]:
    """(arch, generator) to try in order: `requested` is the caller's arch, `target` the TL's Target."""
    from translator.backends.sm80_bwd import generate_backward
    from translator.backends.sm90_bwd import generate_backward_sm90

    sm80 = (requested or "sm_80", generate_backward)
    if skeleton == "sm90":
        return [("sm_90", generate_backward_sm90)]
    if skeleton == "auto" and (requested or target) == "sm_90":
        return [("sm_90", generate_backward_sm90), sm80]
    return [sm80]


def marked_learnable(model: Any) -> tuple[str, ...]:
    """The side tensors the TL marks `with learnable` (none where the language has no such mark yet)."""
    out = []
    for name, t in model.side_tensors().items():
        stmt = t.placements["global"].stmt
        if getattr(stmt, "learnable", None) is not None:
            out.append(name)
    return tuple(out)


def build_backward(
    tl: str | Path,
    dtype: str | None = None,
    arch: str | None = None,
    *,
    learnable: tuple[str, ...] | None = None,
    device_arch: str | None = None,
    deterministic: bool = False,
    skeleton: str = "auto",
) -> BackwardBuild:
    """`translate_backward`, then compiled (for `device_arch`, or the current device's when one is
    visible, or build-only)."""
    from runner.launch import cuda_device_arch

    build = translate_backward(
        tl, dtype=dtype, arch=arch, learnable=learnable, deterministic=deterministic, skeleton=skeleton
    )
    build.compile(device_arch or cuda_device_arch())
    return build


_BUILDS: dict[tuple[str, str], BackwardBuild] = {}


def backward_provider(kernel: Any) -> Any:
    """A `tl_attention.backward` provider: for a compiled forward (`kernel.text`, `kernel.spec`) the
    function `fn(q, k, v, o, lse, grad_o, *, scale, window, tensors, scalars) -> (dq, dk, dv,
    side_grads)` backed by the derived kernels, with every float32 side tensor the regions read
    learnable (side_grads names each; the others are not differentiable). None when the program has no
    derivable backward (unequal head dims, a head dim that is not a multiple of 64, …). The skeleton is
    `translate_backward`'s choice: the wgmma one for a forward that targets sm_90. Builds once per
    (TL text, dtype) and process."""
    key = (kernel.text, kernel.spec.dtype)
    build = _BUILDS.get(key)
    if build is None:
        program = kernel.spec.program or {}
        learn = tuple(n for n, _dims, dt in program.get("tensors", ()) if dt == "float32")
        try:
            build = translate_backward(kernel.text, dtype=kernel.spec.dtype, learnable=learn)
        except BackwardBuildError:
            return None
        _BUILDS[key] = build

    return _Provided(build)


@dataclass(frozen=True)
class _Provided:
    """`backward_provider`'s answer: the `tl_attention.backward.BackwardFn` of one build, which also
    builds its block classes once for a batch (`tl_attention.Kernel.block_mask`)."""

    build: BackwardBuild

    def __call__(
        self,
        q: Any,
        k: Any,
        v: Any,
        o: Any,
        lse: Any,
        grad_o: Any,
        *,
        scale: float,
        window: tuple[int, int],
        tensors: dict[str, Any],
        scalars: dict[str, float],
        block_classes: Any = None,
    ) -> tuple[Any, Any, Any, dict[str, Any]]:
        extras = {**tensors, **scalars}
        return self.build.run(
            q, k, v, o, lse, grad_o, scale=scale, window=window, extras=extras, block_classes=block_classes
        )

    def block_classes(
        self, q: Any, k: Any, *, window: tuple[int, int], tensors: dict[str, Any], scalars: dict[str, float]
    ) -> Any:
        return self.build.block_classes(q, k, window=window, extras={**tensors, **scalars})
