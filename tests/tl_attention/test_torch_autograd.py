"""The autograd wiring and the backward seam, end to end on the CPU.

The ops' real kernels are CUDA-only; the `on_cpu` fixture (conftest.py) registers CPU kernels for them
(cpu_reference.py): the forward is the kernel IR's own reference, the backward is the ops' real body
(`ops.run_backward`), which asks the registered backward provider (the fixture `provider`). So what runs
is the op, its autograd formula, the layouts and the side-tensor gradients; only the arithmetic is the
reference's. Gradients are compared with autograd through an independent eager softcap/ALiBi attention.
"""

from __future__ import annotations

import pytest
import torch
from cpu_reference import eager_attention

import tl_attention
from tl_attention import ops
from tl_attention.backward import (
    BackwardUnavailable,
)

BF16 = torch.bfloat16


def inputs(*shapes: tuple[int, ...], seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=gen).to(BF16).requires_grad_() for s in shapes]


@pytest.mark.usefixtures("on_cpu", "provider")
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_gradients_through_the_seam(layout: str) -> None:
    kernel = tl_attention.compile("softcap.tl")
    shape_q, shape_kv = ((1, 4, 24, 128), (1, 2, 40, 128))
    if layout == "bshd":
        shape_q, shape_kv = (1, 24, 4, 128), (1, 40, 2, 128)
    q, k, v = inputs(shape_q, shape_kv, shape_kv)
    o = kernel(q, k, v, layout=layout, scale=0.2, cap=5.0)
    grad_o = torch.randn_like(o.float()).to(BF16)
    o.backward(grad_o)

    def bhsd(t: torch.Tensor) -> torch.Tensor:
        return (t if layout == "bhsd" else t.transpose(1, 2)).detach().float().requires_grad_()

    qr, kr, vr = bhsd(q), bhsd(k), bhsd(v)
    ref = eager_attention(qr, kr, vr, 0.2, cap=5.0)
    ref.backward(bhsd(grad_o))
    back = (lambda t: t) if layout == "bhsd" else (lambda t: t.transpose(1, 2))
    torch.testing.assert_close(o.float(), back(ref), atol=2e-2, rtol=2e-2)
    for got, want in ((q.grad, qr.grad), (k.grad, kr.grad), (v.grad, vr.grad)):
        assert got is not None and want is not None and got.shape == back(want).shape
        torch.testing.assert_close(got.float(), back(want), atol=3e-2, rtol=3e-2)


@pytest.mark.usefixtures("on_cpu", "provider")
def test_side_tensor_gradients_reach_their_tensor() -> None:
    """Routing: the provider's gradient of a float32 side tensor lands in that tensor's .grad."""
    kernel = tl_attention.compile("alibi.tl")
    q, k, v = inputs((1, 4, 16, 128), (1, 2, 16, 128), (1, 2, 16, 128), seed=1)
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625], requires_grad=True)
    kernel(q, k, v, slopes=slopes).float().sum().backward()
    qr, kr, vr = (t.detach().float().requires_grad_() for t in (q, k, v))
    sr = slopes.detach().requires_grad_()
    eager_attention(qr, kr, vr, 128**-0.5, slopes=sr).sum().backward()
    assert slopes.grad is not None and sr.grad is not None
    torch.testing.assert_close(slopes.grad, sr.grad, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(k.grad.float(), kr.grad, atol=3e-2, rtol=3e-2)


@pytest.mark.usefixtures("on_cpu", "no_providers")
def test_without_a_provider_the_backward_names_what_is_missing() -> None:
    kernel = tl_attention.compile("softcap.tl")
    q, k, v = inputs((1, 4, 8, 128), (1, 4, 8, 128), (1, 4, 8, 128))
    o = kernel(q, k, v)  # the forward runs
    with pytest.raises(BackwardUnavailable, match=r"no backward for kernel softcap_fwd \(softcap\.tl\)"):
        o.float().sum().backward()
    with torch.no_grad():
        assert kernel(q, k, v).grad_fn is None


@pytest.mark.usefixtures("on_cpu", "provider")
def test_opcheck_with_real_cpu_kernels() -> None:
    kernel = tl_attention.compile("alibi.tl")
    q, k, v = (
        t.detach().transpose(1, 2).requires_grad_()
        for t in inputs((1, 4, 16, 128), (1, 2, 16, 128), (1, 2, 16, 128))
    )
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625], requires_grad=True)
    torch.library.opcheck(ops.forward_op, (kernel.key, q, k, v, 0.1, [-1, -1], [slopes], []))


def record_block_classes() -> list[object]:
    """Registers a backward provider that returns zero gradients and records the `block_classes` each
    backward is handed (None when none is): the list it appends to."""
    from tl_attention.backward import register_backward_provider

    seen: list[object] = []

    def provider(kernel: object) -> object:
        def fn(q, k, v, o, lse, grad_o, **kw):  # type: ignore[no-untyped-def]
            seen.append(kw.get("block_classes"))
            return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v), {}

        return fn

    register_backward_provider(provider)
    return seen


@pytest.mark.usefixtures("on_cpu", "no_providers")
def test_a_block_mask_reaches_the_forward_and_the_backward() -> None:
    """`block_mask=`: its forward classes go to the forward op and its backward classes, saved for the
    backward, reach the provider as `block_classes` (and nothing when no mask is given)."""
    from tl_attention.kernel import BlockMask

    kernel = tl_attention.compile("document_mask.tl")
    seen = record_block_classes()
    q, k, v = inputs((1, 2, 16, 128), (1, 2, 16, 128), (1, 2, 16, 128), seed=3)
    doc = torch.tensor([[0] * 9 + [1] * 7], dtype=torch.int32)
    back = torch.ones(1, 1, 1, 1, dtype=torch.uint8)
    mask = BlockMask(kernel.key, torch.zeros(1, 1, 1, 1, dtype=torch.uint8), back)
    kernel(q, k, v, doc=doc, block_mask=mask).float().sum().backward()
    kernel(q, k, v, doc=doc).float().sum().backward()
    assert seen[0] is not None and torch.equal(seen[0], back) and seen[1] is None
    other = tl_attention.compile("softcap.tl")
    with pytest.raises(ValueError, match="another kernel"):
        kernel(q, k, v, doc=doc, block_mask=BlockMask(other.key, back))
    with pytest.raises(ValueError, match="no side tensor"):
        other.block_mask(q, k, v, cap=5.0)


def test_the_mask_cache_reuses_classes_until_a_side_tensor_changes() -> None:
    """`BlockMaskCache`: a hit for the same tensor object unchanged; a build after an in-place write (the
    version counter), for an equal but new tensor, or another key; entries of freed tensors are dropped,
    and the least recently used goes first past the size."""
    from tl_attention.mask_cache import BlockMaskCache

    cache, built = BlockMaskCache(), []

    def get(key: tuple, *tensors: torch.Tensor, size: int = 4) -> object:
        return cache.get(key, tensors, lambda: built.append(key) or len(built), size)

    doc = torch.zeros(2, 16, dtype=torch.int32)
    assert get((1,), doc) == 1 and get((1,), doc) == 1 and cache.hits == 1
    doc[0, 3] = 1  # in place: the version counter moves
    assert get((1,), doc) == 2 and get((1,), doc) == 2
    assert get((1,), doc.clone()) == 3  # equal values, another tensor
    assert get((2,), doc) == 4 and cache.builds == 4
    gone = torch.ones(4, dtype=torch.int32)
    get((3,), gone)
    del gone
    get((4,), doc)  # the insert drops the entries of freed tensors and of written ones
    assert len(cache) == 3  # (1,), (2,) and (4,) of doc as it is now
    last = [get((n,), doc, size=2) for n in range(5, 9)]
    hits = cache.hits
    assert len(cache) == 2 and [get((7,), doc, size=2), get((8,), doc, size=2)] == last[2:]
    assert cache.hits == hits + 2
    assert get((5,), doc, size=2) == cache.builds == last[-1] + 1  # evicted, built again


def test_the_cache_keys_only_plain_cuda_tensors_outside_capture_and_tracing() -> None:
    from tl_attention.mask_cache import cacheable

    doc = torch.zeros(2, dtype=torch.int32)
    assert not cacheable(torch.zeros(2), [doc])  # CPU: the classes are built on the GPU
    assert not cacheable(torch.zeros(2, device="meta"), [doc])
    with torch.inference_mode():
        assert not cacheable(torch.zeros(2, device="meta"), [torch.zeros(2, dtype=torch.int32)])


@pytest.mark.usefixtures("on_cpu", "no_providers")
def test_a_kernel_reuses_its_block_classes_across_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without `block_mask=`, a side-tensor mask's classes are built at the first call and reused while
    the side tensors stay the same, unchanged; a call that needs gradients builds the backward's too, and
    they reach the provider; `block_mask_cache = 0` turns it off."""
    from tl_attention import mask_cache
    from tl_attention.kernel import BlockMask, Kernel

    monkeypatch.setattr(mask_cache, "cacheable", lambda q, tensors: True)  # the op runs on CPU here
    builds: list[bool] = []

    def build(self: Kernel, q, k, v, scale, win, tensors, scalars, backward) -> BlockMask:  # type: ignore[no-untyped-def]
        builds.append(backward)
        marker = torch.full((1,), len(builds), dtype=torch.uint8)
        return BlockMask(self.key, marker, marker.clone() if backward else None)

    monkeypatch.setattr(Kernel, "_build_block_mask", build)
    seen = record_block_classes()
    kernel = tl_attention.compile("document_mask.tl")
    q, k, v = inputs((1, 2, 16, 128), (1, 2, 16, 128), (1, 2, 16, 128), seed=3)
    doc = torch.tensor([[0] * 9 + [1] * 7], dtype=torch.int32)
    with torch.no_grad():
        kernel(q, k, v, doc=doc)
        kernel(q, k, v, doc=doc)
    assert builds == [False]
    for _ in range(2):
        kernel(q, k, v, doc=doc).float().sum().backward()
    assert builds == [False, True] and all(s is not None and int(s[0]) == 2 for s in seen)
    doc[0, 8] = 1  # an in-place write: classified again
    kernel(q, k, v, doc=doc).float().sum().backward()
    assert builds == [False, True, True] and int(seen[-1][0]) == 3  # type: ignore[index]
    kernel(q[:, :, :8], k[:, :, :8], v[:, :, :8], doc=doc[:, :8].contiguous()).float().sum().backward()
    assert len(builds) == 4  # other lengths, another tensor
    kernel.block_mask_cache = 0
    kernel(q, k, v, doc=doc).float().sum().backward()
    assert len(builds) == 4 and seen[-1] is None  # the kernels classify at their launch
    assert (
        kernel(q, k, v, doc=doc, block_mask=BlockMask(kernel.key, torch.zeros(1, dtype=torch.uint8)))
        is not None
    )
