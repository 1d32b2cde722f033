"""`runner.launch.launch` picks the TMA launch (runner/tma.py) by the spec, without a GPU: the device
calls are replaced by recorders; tensor checks (heads_kv fixed by the TL) run for real on CPU tensors."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from runner import launch as rl  # noqa: E402
from runner import tma  # noqa: E402
from runner.abi import ATTENTION_PARAMS, TILE_ORDER_ALIGN, TMA_PARAMS, LaunchSpec  # noqa: E402

ABI = tuple(p[0] for p in ATTENTION_PARAMS)


def spec(**kw: Any) -> LaunchSpec:
    base: dict[str, Any] = dict(
        kernel_name="k", block_m=128, threads=384, shared_bytes=1024, dtype="bf16", head_dim_qk=64,
        head_dim_v=64, mask="none", arch="sm_90a", block_n=176, params=ABI + TMA_PARAMS,
    )
    return LaunchSpec(**{**base, **kw})


def tensors(heads_kv: int = 2) -> tuple[Any, ...]:
    q = torch.zeros(2, 300, 4, 64, dtype=torch.bfloat16)
    k = torch.zeros(2, 500, heads_kv, 64, dtype=torch.bfloat16)
    v = torch.zeros(2, 500, heads_kv, 64, dtype=torch.bfloat16)
    o = torch.empty_like(q)
    lse = torch.empty(2, 4, 300, dtype=torch.float32)
    return q, k, v, o, lse


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """Record what would reach the driver; CPU tensors pass the device checks."""
    seen: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(rl, "_check_tensor", lambda *a, **k: None)
    monkeypatch.setattr(rl, "_torch_stream_handle", lambda device: 7)
    monkeypatch.setattr(rl, "_torch_stream", lambda device: "stream")
    def maps(*ts: Any, block_m: int, block_n: int) -> list[Any]:
        return [("map", t.shape, block_m, block_n) for t in ts]

    monkeypatch.setattr(tma, "cached_tensor_maps", maps)
    monkeypatch.setattr(tma, "launch_with_tensor_maps", lambda kernel, **kw: seen.append(("tma", kw)))
    import cuda.core

    monkeypatch.setattr(cuda.core, "launch", lambda stream, config, kernel, *args: seen.append(("core", {})))
    monkeypatch.setattr(cuda.core, "LaunchConfig", lambda **kw: kw)
    return seen


def loaded(s: LaunchSpec) -> rl.LoadedKernel:
    return rl.LoadedKernel(spec=s, compiled=None, kernel="kernel", device_id=None, load_seconds=0.0)  # type: ignore[arg-type]


def test_a_spec_listing_tma_params_launches_through_runner_tma(calls: list[Any]) -> None:
    q, k, v, o, lse = tensors()
    rl.launch(loaded(spec()), q, k, v, o, lse)
    [(kind, kw)] = calls
    assert kind == "tma"
    assert kw["grid"] == (3, 2, 4) and kw["block"] == 384 and kw["stream_handle"] == 7
    # scalars in ABI order with their numpy kinds, then the four descriptors with the spec's boxes
    assert [a[0] for a in kw["args"]] == [p[2] for p in ATTENTION_PARAMS]
    names = dict(zip(ABI, (a[1] for a in kw["args"]), strict=True))
    assert (names["seqlen_q"], names["seqlen_k"], names["heads"], names["heads_kv"]) == (300, 500, 4, 2)
    assert [m[2:] for m in kw["tensor_maps"]] == [(128, 176)] * 4


def test_given_tensor_maps_are_passed_through(calls: list[Any]) -> None:
    q, k, v, o, lse = tensors()
    rl.launch(loaded(spec()), q, k, v, o, lse, tensor_maps=["a", "b", "c", "d"])
    assert calls[0][1]["tensor_maps"] == ["a", "b", "c", "d"]


def test_an_abi_only_spec_launches_through_cuda_core(calls: list[Any]) -> None:
    q, k, v, o, lse = tensors()
    rl.launch(loaded(spec(params=ABI, arch="sm_80", threads=128)), q, k, v, o, lse)
    assert [c[0] for c in calls] == ["core"]


def test_a_tma_spec_without_block_n_is_refused(calls: list[Any]) -> None:
    q, k, v, o, lse = tensors()
    with pytest.raises(rl.LaunchError, match="no block_n"):
        rl.launch(loaded(spec(block_n=0)), q, k, v, o, lse)
    assert calls == []


def test_heads_kv_fixed_by_the_tl_must_match_the_tensors(calls: list[Any]) -> None:
    q, k, v, o, lse = tensors(heads_kv=2)
    with pytest.raises(rl.LaunchError, match=r"1 key/value head\(s\) \(Param heads_kv\), but k and v have 2"):
        rl.launch(loaded(spec(heads_kv=1)), q, k, v, o, lse)
    q, k, v, o, lse = tensors(heads_kv=1)
    rl.launch(loaded(spec(heads_kv=1)), q, k, v, o, lse)
    assert [c[0] for c in calls] == ["tma"]


@pytest.mark.parametrize("mask_kind", ["shared", "per_head"])
def test_prebuilt_block_classes_are_checked_against_the_kernels_tiles(mask_kind: str) -> None:
    """`check_block_classes`, the forward's and the backward's check of prebuilt classes: a kernel without
    side-tensor masks takes none; the classes must be contiguous uint8 (batch, heads or 1, query blocks,
    key blocks) at the kernel's tiles, on q's device."""
    q, k = tensors()[:2]
    planes = q.shape[2] if mask_kind == "per_head" else 1
    good = torch.zeros(2, planes, 3, 4, dtype=torch.uint8)  # 300 rows / 128, 500 keys / 128
    rl.check_block_classes(good, q, k, tiles=(128, 128), mask_kind=mask_kind, kernel="k")
    with pytest.raises(rl.LaunchError, match="no side tensor"):
        rl.check_block_classes(good, q, k, tiles=(128, 128), mask_kind="", kernel="k")
    for bad in (good.float(), torch.zeros(2, planes, 3, 2, dtype=torch.uint8), good.transpose(2, 3)):
        with pytest.raises(rl.LaunchError, match="block_classes: expected contiguous uint8"):
            rl.check_block_classes(bad, q, k, tiles=(128, 128), mask_kind=mask_kind, kernel="k")


@pytest.mark.parametrize("mask_kind", ["shared", "per_head"])
def test_the_forwards_classes_carry_its_tile_order(mask_kind: str) -> None:
    """The forward's prebuilt classes are one flat buffer: the classes' bytes rounded up to
    TILE_ORDER_ALIGN, then batch · heads · m_blocks int32 tile ids; the 4-D classes alone are refused."""
    q, k = tensors()[:2]
    planes = q.shape[2] if mask_kind == "per_head" else 1
    classes = 2 * planes * 3 * 4  # 300 rows / 128, 500 keys / 128
    offset = -(-classes // TILE_ORDER_ALIGN) * TILE_ORDER_ALIGN
    flat = torch.zeros(offset + 4 * 2 * q.shape[2] * 3, dtype=torch.uint8)
    kw = {"tiles": (128, 128), "mask_kind": mask_kind, "kernel": "k", "tile_order": True}
    rl.check_block_classes(flat, q, k, **kw)
    for bad in (flat[:-4], torch.zeros(2, planes, 3, 4, dtype=torch.uint8)):
        with pytest.raises(rl.LaunchError, match="block_classes: expected contiguous uint8"):
            rl.check_block_classes(bad, q, k, **kw)


def test_tiles_run_longest_first_ties_in_index_order() -> None:
    """`longest_first`: (batch · heads + head) · m_blocks + m_block by non-empty key blocks, descending,
    stably; classes shared by the heads count for each head."""
    classes = torch.tensor(
        [[[[2, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]]], [[[0, 2, 0, 0], [2, 2, 0, 1], [0, 0, 0, 0]]]],
        dtype=torch.uint8,
    )  # (batch 2, shared, 3 query blocks, 4 key blocks): counts 2 0 4 / 1 3 0
    order = rl.longest_first(classes, heads=2)
    assert order.dtype == torch.int32
    # tile ids: batch 0 heads 0, 1 → 0-2, 3-5; batch 1 → 6-8, 9-11
    assert order.tolist() == [2, 5, 7, 10, 0, 3, 6, 9, 1, 4, 8, 11]
