"""An inference kernel from a TL file, ready to call on PyTorch tensors: check → translate → compile →
load, then `runner.decode.decode_attention` per call.

    kernel = build_inference("examples/inference/paged_decode.tl")
    o, lse = kernel(q, k_cache, v_cache, block_table=table, cache_seqlens=lens)

The public entry point for split-KV decode, paged KV and packed (varlen) batches; `tl_attention` builds
on it. Compiles go through the runner's cache, so a second build of the same file and target is a load.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.build import Translated, translate_text


class InferenceBuildError(ValueError):
    """The TL file is no inference kernel (it sets none of splits, page_size, pack_gqa, varlen)."""


@dataclass
class InferenceKernel:
    translated: Translated
    block_n: str | None = None  # "auto": a paged decode may run its BN-32 twin where that is faster
    _loaded: Any = field(default=None, repr=False)
    _twins: dict[int, InferenceKernel] = field(default_factory=dict, repr=False)

    @property
    def spec(self) -> Any:
        return self.translated.spec

    def load(self) -> Any:
        """Compile for the current device (PTX of an older target is finalised for it) and load."""
        if self._loaded is None:
            from runner.compile import compile_source
            from runner.launch import load, require_device

            device_arch = require_device()
            t = self.translated
            compiled = compile_source(
                t.source, arch=t.spec.arch, device_arch=device_arch, name=f"{t.spec.kernel_name}.cu",
                source_map=t.source_map, tl_file=t.spec.tl_file,
            )  # fmt: skip
            self._loaded = load(compiled, t.spec)
        return self._loaded

    def for_shape(self, q: Any, k: Any) -> InferenceKernel:
        """The build a call on q and k runs: this one, or with `block_n="auto"` the key block
        `runner.decode.preferred_block_n` picks for the shape (its twin translated on first use)."""
        if self.block_n != "auto" or self.spec.inference.get("varlen"):
            return self
        from runner.decode import preferred_block_n
        from runner.launch import sm_count

        bn = preferred_block_n(self.spec, q.shape[0], q.shape[1], q.shape[-2], k.shape[-2],
                               sm_count(q.device.index))  # fmt: skip
        if bn == self.spec.block_n:
            return self
        if bn not in self._twins:
            text = re.sub(r"(?m)^Param BN = \d+", f"Param BN = {bn}", self.translated.text)
            path = Path(self.spec.tl_file or "inference.tl")
            self._twins[bn] = InferenceKernel(translate_text(text, path.with_name(f"{path.stem}_bn{bn}.tl")))
        return self._twins[bn]

    def __call__(self, q: Any, k: Any, v: Any, **options: Any) -> tuple[Any, Any]:
        """(o, lse). `options` are `runner.decode.decode_attention`'s keywords (block_table,
        cache_seqlens, cu_seqlens_q / _k, max_seqlen_q / _k, num_splits, softmax_scale, window, extras,
        out); its docstring gives the layouts."""
        from runner.decode import decode_attention

        return decode_attention(self.for_shape(q, k).load(), q, k, v, **options)


def build_inference(
    source: str | Path, *, dtype: str | None = None, target: str | None = None, block_n: str | None = None
) -> InferenceKernel:
    """Check and translate a TL inference kernel (a path, or TL text); `dtype` / `target` rewrite its
    `Dtype` / `Target` lines; `block_n="auto"` lets each call's shape pick the key block of a paged decode
    (`InferenceKernel.for_shape`), otherwise the TL's `Param BN` holds. Raises `pipeline.build.BuildError`
    (with diagnostics) for a file that does not check, InferenceBuildError for a forward kernel without
    inference Params."""
    path = Path(source) if isinstance(source, Path) or str(source).endswith(".tl") else None
    text = path.read_text(encoding="utf-8") if path is not None else str(source)
    if dtype is not None:
        text = re.sub(r"(?m)^Dtype .*$", f"Dtype {dtype}", text)
    if target is not None:
        text = re.sub(r"(?m)^Target .*$", f"Target {target}", text)
    translated = translate_text(text, path if path is not None else Path("inference.tl"))
    if translated.spec.inference is None:
        raise InferenceBuildError(
            f"{translated.spec.kernel_name}: no inference Params (splits, page_size, pack_gqa, varlen); "
            "use runner.launch.attention for a forward kernel"
        )
    if block_n not in (None, "auto"):
        raise ValueError(f"block_n: expected None (the TL's Param BN) or 'auto', got {block_n!r}")
    return InferenceKernel(translated, block_n=block_n)


def run_inference_checks(args: Any, loaded: Any, out: Any, err: Any) -> int:
    """`tl run` on an inference kernel: its verification cases (`runner.decode_verify.default_cases`,
    or one uniform batch from `--shape B,H,Hkv,Sq,Sk`) against the IR reference; exit 0 when all pass."""
    from runner.decode_verify import InferenceCase, default_cases, verify_inference
    from runner.launch import LaunchError
    from runner.verify import Shape

    try:
        if args.shape:
            s = Shape.parse(args.shape)
            varlen = bool(loaded.spec.inference["varlen"])
            sq = (s.seqlen_q,) * s.batch if varlen else (s.seqlen_q,)
            cases = [InferenceCase(s.heads, s.heads_kv, (s.seqlen_k,) * s.batch, seqlen_q=sq)]
        else:
            cases = default_cases(loaded.spec)
        results = [verify_inference(loaded, c, seed=args.seed + i) for i, c in enumerate(cases)]
    except (ValueError, LaunchError) as exc:
        err(f"{args.file}: error: {exc}")
        return 2
    for r in results:
        out(str(r))
    return 0 if all(r.passed for r in results) else 1
