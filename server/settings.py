"""The server's settings, read from `workspace/configuration` section `tl` (or initializationOptions)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from server.worker.manager import DEFAULT_CANCEL_GRACE
from tl_language import gpu

log = logging.getLogger(__name__)

ON_SAVE_CHOICES = ("off", "check", "compile", "verify")


@dataclass(frozen=True)
class BenchmarkShape:
    batch: int
    heads: int
    seqlen_q: int
    seqlen_k: int

    def to_json(self) -> dict[str, int]:
        return {
            "batch": self.batch,
            "heads": self.heads,
            "seqlen_q": self.seqlen_q,
            "seqlen_k": self.seqlen_k,
        }


DEFAULT_SHAPES = (BenchmarkShape(4, 16, 4096, 4096),)


@dataclass(frozen=True)
class Settings:
    target: str = gpu.DEFAULT_TARGET  # for documents without a `Target` line
    on_save: str = "verify"  # off | check | compile | verify (verify degrades to compile without a GPU)
    benchmark_shapes: tuple[BenchmarkShape, ...] = field(default=DEFAULT_SHAPES)
    worker_timeout: float = 300.0  # seconds for one worker job (an NVRTC compile takes ~30 s)
    # Seconds the worker has to answer the cancel of a (e.g. superseded) job before it is killed; the job
    # then stops at its next step boundary, a compile under way finishing first. 0 kills at once.
    worker_cancel_grace: float = DEFAULT_CANCEL_GRACE
    debounce_ms: int = 10  # didChange → analysis delay (coalesces bursts of typing)

    @staticmethod
    def from_json(data: Any) -> Settings:
        """Settings from a client's `tl` section; unknown or ill-typed values keep the default (logged)."""
        s = Settings()
        if not isinstance(data, dict):
            return s
        values: dict[str, Any] = {}
        target = data.get("target")
        if isinstance(target, str) and gpu.target(target) is not None:
            values["target"] = target.lower()
        elif target not in (None, ""):
            log.warning("tl.target %r is not a known target; keeping %s", target, s.target)
        on_save = data.get("onSave")
        if on_save in ON_SAVE_CHOICES:
            values["on_save"] = on_save
        elif on_save is not None:
            log.warning("tl.onSave %r is not one of %s", on_save, ON_SAVE_CHOICES)
        shapes = _shapes(data.get("benchmarkShapes"))
        if shapes:
            values["benchmark_shapes"] = shapes
        timeout = _worker_value(data, "timeoutSeconds")
        if isinstance(timeout, int | float) and timeout > 0:
            values["worker_timeout"] = float(timeout)
        grace = _worker_value(data, "cancelGraceSeconds")
        if isinstance(grace, int | float) and not isinstance(grace, bool) and grace >= 0:
            values["worker_cancel_grace"] = float(grace)
        elif grace is not None:
            log.warning("tl.worker.cancelGraceSeconds %r is not a number ≥ 0", grace)
        debounce = data.get("debounceMs")
        if isinstance(debounce, int) and 0 <= debounce <= 2000:
            values["debounce_ms"] = debounce
        return Settings(**{**s.__dict__, **values})


def _worker_value(data: dict[str, Any], key: str) -> Any:
    """`tl.worker.<key>`, nested (as VS Code sends it) or dotted."""
    worker = data.get("worker")
    return worker.get(key) if isinstance(worker, dict) else data.get(f"worker.{key}")


def _shapes(raw: Any) -> tuple[BenchmarkShape, ...]:
    """Shapes as dicts {batch, heads, seqlen_q, seqlen_k} or strings "BxHxSQxSK" (or "BxHxS")."""
    if not isinstance(raw, list):
        return ()
    out: list[BenchmarkShape] = []
    for item in raw:
        try:
            if isinstance(item, str):
                nums = [int(x) for x in item.lower().split("x")]
                if len(nums) == 3:
                    nums.append(nums[2])
                b, h, sq, sk = nums
            elif isinstance(item, dict):
                b, h = int(item["batch"]), int(item["heads"])
                sq = int(item.get("seqlen_q", item.get("seqlen", 0)))
                sk = int(item.get("seqlen_k", item.get("seqlen", sq)))
            else:
                raise ValueError(item)
            if min(b, h, sq, sk) <= 0:
                raise ValueError(item)
            out.append(BenchmarkShape(b, h, sq, sk))
        except (ValueError, KeyError, TypeError):
            log.warning(
                "ignoring benchmark shape %r (want {batch, heads, seqlen_q, seqlen_k} or 'BxHxS')", item
            )
    return tuple(out)
