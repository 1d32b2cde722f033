"""`tl_attention.compile`: a TL kernel as a PyTorch callable.

`compile(source)` checks and translates at once (a TL with errors raises `TLError` here, with the checker's
codes and locations). The NVRTC compile goes through the on-disk cache (`runner.cache`, `$TL_CACHE_DIR`),
so a warm start runs no NVRTC. When a CUDA device is visible, `compile` also compiles for it and loads the
module on the current device; without one it stops after the translation and the compile happens on the
first call on CUDA tensors (meta and fake tensors need no binary: tracing and `torch.compile` run on a
machine without a GPU). A kernel not loaded yet on a device refuses a call made during CUDA graph capture,
because loading a module there would break the capture: call it once first.

Target: the TL's own `Target` header by default, compiled for the current device (a cubin for its own
arch, PTX the driver JIT-compiles for an older one); a target that cannot run on the device (sm_90's
wgmma code on an sm_80 GPU) raises `ValueError`. `target="auto"` retargets the TL to the device's family
(sm_90 on Hopper, sm_80 on Ampere, Ada and newer, sm_75 on Turing); `target="sm_80"` names one.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from pipeline.build import BuildError, Translated, compile_all, translate_text
from pipeline.report import format_build_error
from pipeline.variants import EXAMPLES, variant
from runner.abi import LaunchSpec
from runner.compile import CompiledKernel
from runner.toolchain import ToolchainError, compile_target
from tl_attention import checks, mask_cache
from tl_attention.backward import find_backward
from tl_attention.ops import forward_op, register_kernel, resolve


class TLError(ValueError):
    """The TL did not check or translate; `diagnostics` holds the checker's records (code, range)."""

    def __init__(self, message: str, diagnostics: list[Any]) -> None:
        super().__init__(message)
        self.diagnostics = diagnostics


@dataclass(frozen=True)
class BlockMask:
    """`Kernel.block_mask`'s answer for the kernel `key`: the forward's block classes with the order its
    tiles run in (one flat uint8 buffer, `runner.launch.block_classes`) and (None where no backward
    builds them) the backward's (batch, heads or 1, query blocks, key blocks) uint8 classes."""

    key: str
    forward: Any
    backward: Any = None


class TLBuildError(RuntimeError):
    """NVRTC rejected the generated CUDA (a translator bug, or a toolchain problem); the log is attached."""


def device_family(arch: str) -> str:
    """The TL target whose code runs best on a device of `arch` (`sm_XY`)."""
    n = int(arch.removeprefix("sm_").rstrip("af"))
    if n == 90:
        return "sm_90"
    if n >= 80:
        return "sm_80"  # sm_90a code does not run past Hopper; sm_80's PTX does
    return "sm_75"


def current_arch() -> str | None:
    """`sm_XY` of the current CUDA device; None without one."""
    if not torch.cuda.is_available():
        return None
    return _arch_of(torch.device("cuda", torch.cuda.current_device()))


def _arch_of(device: torch.device) -> str:
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


@dataclass(eq=False)
class Kernel:
    """A checked, translated TL kernel; compiled and loaded per device on demand. Call it on tensors."""

    translated: Translated
    origin: str  # the path given, or "<TL text>"
    key: str  # the op registry key
    # The block classes of this many recent calls whose masks read side tensors, reused while those
    # tensors are unchanged (`tl_attention.mask_cache`); 0: classify at every call.
    block_mask_cache: int = 4
    _loaded: dict[int, Any] = field(default_factory=dict, repr=False)
    _mask_cache: mask_cache.BlockMaskCache = field(default_factory=mask_cache.BlockMaskCache, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def spec(self) -> LaunchSpec:
        return self.translated.spec

    @property
    def name(self) -> str:
        return self.spec.kernel_name

    @property
    def text(self) -> str:
        return self.translated.text

    @property
    def scalar_names(self) -> list[str]:
        return [name for name, _, _ in (self.spec.program or {}).get("scalars", ())]

    @property
    def tensor_names(self) -> list[str]:
        return [name for name, _, _ in (self.spec.program or {}).get("tensors", ())]

    # ---- the call ----------------------------------------------------------------------------------

    def __call__(
        self,
        q: Any,
        k: Any,
        v: Any,
        *,
        scale: float | None = None,
        return_lse: bool = False,
        layout: str = "bhsd",
        window: tuple[int, int] | None = None,
        block_mask: BlockMask | None = None,
        **extras: Any,
    ) -> Any:
        """Attention of q, k, v in `layout` ('bhsd' like SDPA, 'bshd' like FlashAttention); GQA when k and
        v have fewer heads than q. `extras`: the TL's runtime Scalars and side tensors by name. Returns o in
        `layout`, and with `return_lse` also lse float32 (batch, heads, seqlen_q). `block_mask`: this
        kernel's `block_mask(...)` for the same side tensors, scalars and lengths; without it a kernel whose
        masks read side tensors reuses the classes of an earlier call on the same, unchanged side tensors
        (`tl_attention.mask_cache`, `block_mask_cache`) and classifies its blocks otherwise."""
        q, k, v, softmax_scale, win, tensors, scalars = self._checked(q, k, v, layout, scale, window, extras)
        if return_lse and not self.spec.writes_lse:
            raise ValueError(f"return_lse: {self.name} has no softmax, so it has no log-sum-exp to return")
        if block_mask is not None and block_mask.key != self.key:
            raise ValueError(f"block_mask: built by another kernel ({block_mask.key}), not {self.name}")
        if block_mask is None:
            block_mask = self._cached_block_mask(q, k, v, softmax_scale, win, tensors, scalars)
        classes = (block_mask.forward, block_mask.backward) if block_mask is not None else (None, None)
        o, lse = forward_op(self.key, q, k, v, softmax_scale, win, tensors, scalars, *classes)
        if layout == "bhsd":
            o = o.transpose(1, 2)
        return (o, lse) if return_lse else o

    def block_mask(
        self,
        q: Any,
        k: Any,
        v: Any,
        *,
        layout: str = "bhsd",
        window: tuple[int, int] | None = None,
        backward: bool = True,
        **extras: Any,
    ) -> BlockMask:
        """The block classes of this kernel's masks for these side tensors and scalars (`extras`, as the
        call takes them) and q's and k's lengths, built once and passed to every call of a batch as
        `block_mask=` (FlexAttention's `create_block_mask`): the forward's at its tiles and, with
        `backward` and a backward provider that builds them, the backward's at its own. Valid while the
        side tensors, scalars, window, batch, heads and lengths stay; q, k and v give the shapes only. Only
        for a kernel whose masks read side tensors (documents, flags), on CUDA tensors."""
        from runner.abi import block_mask_kind

        if not block_mask_kind(self.spec.program):
            raise ValueError(f"block_mask: {self.name}'s masks read no side tensor: it has no block classes")
        q, k, v, softmax_scale, win, tensors, scalars = self._checked(q, k, v, layout, None, window, extras)
        if q.device.type != "cuda":
            raise ValueError(f"block_mask: the classes are built on the GPU; q is on {q.device}")
        return self._build_block_mask(q, k, v, softmax_scale, win, tensors, scalars, backward)

    def _build_block_mask(
        self, q: Any, k: Any, v: Any, softmax_scale: float, win: list[int], tensors: list[Any],
        scalars: list[float], backward: bool,
    ) -> BlockMask:  # fmt: skip
        """`block_mask`'s classes from the call's checked arguments (`_checked`)."""
        from runner.launch import block_classes

        named = dict(zip(self.tensor_names, tensors, strict=True))
        typed = self._scalars(scalars)
        forward = block_classes(
            self.load(q.device), q, k, v, softmax_scale=softmax_scale, window=(win[0], win[1]),
            extras={**named, **typed},
        )  # fmt: skip
        grads = find_backward(self) if backward else None
        build = getattr(grads, "block_classes", None)
        back = build(q, k, window=(win[0], win[1]), tensors=named, scalars=typed) if build else None
        return BlockMask(self.key, forward, back)

    def _cached_block_mask(
        self, q: Any, k: Any, v: Any, softmax_scale: float, win: list[int], tensors: list[Any],
        scalars: list[float],
    ) -> BlockMask | None:  # fmt: skip
        """The classes of an earlier call on the same side tensors, unchanged, or built now and kept
        (`tl_attention.mask_cache`); None where the kernel classifies at its launch: masks that read no
        side tensor, the cache off, tensors it cannot key (inference tensors, graph capture, tracing)."""
        from runner.abi import block_mask_kind

        if self.block_mask_cache <= 0 or not block_mask_kind(self.spec.program):
            return None
        if not mask_cache.cacheable(q, tensors):
            return None
        backward = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, *tensors))
        key = (
            q.device.index,
            mask_cache.stream_of(q.device),
            *q.shape[:3],
            *k.shape[1:3],
            *win,
            *scalars,
            backward,
        )

        def build() -> BlockMask:
            return self._build_block_mask(q, k, v, softmax_scale, win, tensors, scalars, backward)

        return self._mask_cache.get(key, tensors, build, self.block_mask_cache)

    def _checked(
        self, q: Any, k: Any, v: Any, layout: str, scale: Any, window: Any, extras: dict[str, Any]
    ) -> tuple[Any, Any, Any, float, list[int], list[Any], list[float]]:
        """The call's arguments checked (`checks`; errors before anything reaches a GPU) and as the kernels
        take them: q, k, v in (batch, seqlen, heads, dim) with unit stride in dim, the softmax scale, the
        window, the side tensors (contiguous) and the Scalars in the kernel's order."""
        spec = self.spec
        shapes = checks.check_qkv(spec, q, k, v, layout)
        softmax_scale = checks.check_scale(scale, spec)
        win = checks.check_window(window, spec)
        tensors, scalars = checks.check_extras(spec, shapes, q.device, extras)
        if layout == "bhsd":
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
        return q, k, v, softmax_scale, win, [t.contiguous() for t in tensors], scalars

    def _scalars(self, scalars: list[float]) -> dict[str, Any]:
        """The runtime Scalars by name, int32 ones as ints (the op carries every scalar as a float)."""
        out: dict[str, Any] = {}
        for (name, ty, _), value in zip((self.spec.program or {}).get("scalars", ()), scalars, strict=True):
            out[name] = value if ty == "f32" else int(value)
        return out

    # ---- build and load ----------------------------------------------------------------------------

    def build(self, device_arch: str | None = None) -> CompiledKernel:
        """Compile (through the disk cache) for `device_arch`, or build-only for the TL's arch when None."""
        if device_arch is not None:
            self.check_runs_on(device_arch)
        (result,) = compile_all([self.translated], device_arch=device_arch, max_workers=1)
        if isinstance(result, BuildError):
            raise TLBuildError(format_build_error(result))
        return result.compiled

    def check_runs_on(self, device_arch: str) -> None:
        try:
            compile_target(self.spec.arch, device_arch)
        except ToolchainError as exc:
            raise ValueError(
                f"{self.origin}: {self.name} is code for {self.spec.arch}, which cannot run on this "
                f"{device_arch} device ({exc}); compile with target='auto' to retarget the TL for the "
                "device, or name a target (target='sm_80')"
            ) from None

    def load(self, device: torch.device | int | None = None) -> Any:
        """The module loaded on `device` (default: the current CUDA device), compiled first if needed."""
        from runner.launch import load

        index = torch.device(device).index if device is not None else None
        index = torch.cuda.current_device() if index is None else index
        loaded = self._loaded.get(index)
        if loaded is not None:
            return loaded
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError(
                f"{self.name} is not loaded on cuda:{index} yet, and loading a module during CUDA graph "
                "capture would break the capture: call the kernel once (or kernel.load()) before capturing"
            )
        with self._lock:
            if index not in self._loaded:
                compiled = self.build(_arch_of(torch.device("cuda", index)))
                with torch.cuda.device(index):
                    self._loaded[index] = load(compiled, self.spec)
            return self._loaded[index]

    def launch(
        self,
        q: Any,
        k: Any,
        v: Any,
        scale: float,
        window: list[int],
        tensors: list[Any],
        scalars: list[float],
        classes: Any = None,
    ) -> tuple[Any, Any]:
        """The op's CUDA kernel: tensors already checked, in (batch, seqlen, heads, dim); `classes`: the
        forward's prebuilt block classes, or None."""
        from runner.launch import attention

        loaded = self.load(q.device)
        extras = {**dict(zip(self.tensor_names, tensors, strict=True)), **self._scalars(scalars)}
        win = (window[0], window[1])
        kw = {"softmax_scale": scale, "window": win, "extras": extras, "block_classes": classes}
        o, lse = attention(loaded, q, k, v, **kw)
        if not self.spec.writes_lse:
            lse.fill_(float("nan"))  # no softmax, no log-sum-exp: never hand out uninitialised memory
        return o, lse


def load_many(kernels: list[Kernel]) -> None:
    """Load every kernel on the current device, compiling the missing ones together (NVRTC runs in
    parallel worker processes, one per core): what a model's first call would otherwise do one by one."""
    from runner.launch import load

    index = torch.cuda.current_device()
    arch = _arch_of(torch.device("cuda", index))
    todo = [kn for kn in dict.fromkeys(kernels) if index not in kn._loaded]
    for kn in todo:
        kn.check_runs_on(arch)
    for kn, result in zip(todo, compile_all([kn.translated for kn in todo], device_arch=arch), strict=True):
        if isinstance(result, BuildError):
            raise TLBuildError(format_build_error(result))
        with kn._lock:
            kn._loaded.setdefault(index, load(result.compiled, kn.spec))


def _read(source: str | Path, name: str | None = None) -> tuple[str, Path, str]:
    """(TL text, the path diagnostics name, origin). A str is a path when it names a file (or, not found,
    a file of examples/ or examples/variants/) and TL text otherwise, named `name` (default inline.tl)."""
    if isinstance(source, Path) or ("\n" not in source and source.endswith(".tl")):
        path = Path(source)
        if not path.exists() and not path.is_absolute():
            for folder in (EXAMPLES, EXAMPLES / "variants"):
                if (folder / path).exists():
                    path = folder / path
                    break
        try:
            return path.read_text(), path, str(source)
        except OSError as exc:
            raise FileNotFoundError(f"{source}: cannot read the TL file ({exc.strerror})") from None
    return source, Path(name or "inline.tl"), "<TL text>"


def compile(
    source: str | Path, *, target: str | None = None, lazy: bool = False, name: str | None = None
) -> Kernel:
    """A TL kernel from a path or TL text, ready to call on tensors (see the module docstring). `lazy`:
    stop after the translation even with a device (the first call, or `load_many`, compiles). `name`:
    the file name TL text goes by in diagnostics and the generated source (default inline.tl)."""
    text, path, origin = _read(source, name)
    device_arch = current_arch()
    if target == "auto":
        target = device_family(device_arch) if device_arch else None
    if target is not None:
        text = variant(text, target=target)
    try:
        translated = translate_text(text, path)
    except BuildError as err:
        raise TLError(f"{origin}: {err.message}\n{format_build_error(err)}", err.diagnostics) from None
    digest = hashlib.sha256(f"{translated.source}\0{translated.spec.to_json()}".encode()).hexdigest()[:16]
    kernel = Kernel(translated=translated, origin=origin, key=f"tl:{translated.spec.kernel_name}:{digest}")
    # An earlier compile of the same source keeps its entry, and with it the modules it loaded.
    kernel = resolve(register_kernel(kernel))
    if device_arch is not None and not lazy:
        kernel.load()
    return kernel
