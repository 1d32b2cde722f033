"""Block classes reused across calls while a kernel's side tensors are the same tensors, unchanged.

A kernel whose masks read side tensors (document ids, global-token flags) classifies its blocks before
every launch unless the call passes `block_mask=`; a model calls it on the same side tensors in every
layer, so the kernel keeps the classes of its last few distinct calls (`Kernel.block_mask_cache`). An
entry is keyed on all the classes depend on: the device and stream, batch, lengths and heads, the window
and Scalars, whether the backward's classes are in it, and for each side tensor the tensor object itself
(held by weak reference: a new tensor that reuses a freed one's `id` never matches), its shape, strides,
dtype and version counter, which every in-place write through PyTorch bumps. The stream is in the key
because the classes are built on it, and read there without another synchronisation.

Not detected: a write PyTorch does not see (another library's kernel through a raw pointer); build the
classes explicitly there (`Kernel.block_mask`) or set `block_mask_cache = 0`. The kernel skips the cache
for side tensors that are inference tensors (no version counter), during CUDA graph capture (a captured
launch would keep a pointer into an entry the cache may free) and while tracing (`torch.compile`, fake
tensors).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

Built = Any  # what `build` returns: the kernel's BlockMask


@dataclass
class _Entry:
    refs: tuple[weakref.ref, ...]
    versions: tuple[int, ...]
    value: Built

    def alive_for(self, tensors: Sequence[Any]) -> bool:
        return all(ref() is t for ref, t in zip(self.refs, tensors, strict=True))

    def stale(self) -> bool:
        """A tensor freed, or written since: the entry can never be hit again."""
        tensors = [ref() for ref in self.refs]
        return any(t is None or t._version != v for t, v in zip(tensors, self.versions, strict=True))


class BlockMaskCache:
    """At most `size` entries, least recently used evicted first; `hits` and `builds` count lookups."""

    def __init__(self) -> None:
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._lock = threading.Lock()  # calls from several threads (one stream each) share the kernel
        self.hits = 0
        self.builds = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()

    def get(
        self, key: tuple[Hashable, ...], tensors: Sequence[Any], build: Callable[[], Built], size: int
    ) -> Built:
        """The entry of `key` and `tensors` (the side tensors, by identity and state), built by `build`
        and stored when there is none."""
        with self._lock:
            return self._get((*key, *(tensor_state(t) for t in tensors)), tensors, build, size)

    def _get(
        self, full: tuple[Hashable, ...], tensors: Sequence[Any], build: Callable[[], Built], size: int
    ) -> Built:
        entry = self._entries.get(full)
        if entry is not None and entry.alive_for(tensors):
            self._entries.move_to_end(full)
            self.hits += 1
            return entry.value
        value = build()
        self.builds += 1
        for stale in [k for k, e in self._entries.items() if e.stale()]:
            del self._entries[stale]
        refs = tuple(weakref.ref(t) for t in tensors)
        self._entries[full] = _Entry(refs, tuple(t._version for t in tensors), value)
        self._entries.move_to_end(full)
        while len(self._entries) > size:
            self._entries.popitem(last=False)
        return value


def tensor_state(t: Any) -> tuple[Hashable, ...]:
    """What a side tensor's classes depend on besides its values, and the version counter for those."""
    return (id(t), t.data_ptr(), tuple(t.shape), t.stride(), t.dtype, t._version)


def stream_of(device: Any) -> int:
    """The handle of torch's current stream on `device` (0 off CUDA), for the key."""
    return int(torch.cuda.current_stream(device).cuda_stream) if device.type == "cuda" else 0


def cacheable(q: Any, tensors: Sequence[Any]) -> bool:
    """Whether classes built for a call on CUDA tensor `q` from side tensors `tensors` may be reused:
    plain tensors with version counters, eager, not being captured into a CUDA graph."""
    if torch.compiler.is_compiling() or not tensors or not q.is_cuda:
        return False
    if any(type(t) not in (torch.Tensor, torch.nn.Parameter) or t.is_inference() for t in tensors):
        return False
    return not torch.cuda.is_current_stream_capturing()
