"""The inference launch's split choice and the inference reference (paged and packed inputs gathered
per sequence), on the CPU."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from kernel_ir.program import CAUSAL_MASK, PLAIN_SCORE, Forward
from runner.decode import MAX_SPLITS, num_splits_heuristic
from runner.decode_reference import gather_pages, inference_reference
from runner.decode_verify import InferenceCase, make_inputs
from runner.ir_reference import forward_reference

PLAIN = Forward(score=PLAIN_SCORE)
CAUSAL = Forward(score=PLAIN_SCORE, masks=(CAUSAL_MASK,), header_mask="causal")


def test_no_split_when_the_tiles_fill_whole_waves() -> None:
    assert num_splits_heuristic(tiles=792, n_blocks=64, sms=132, per_sm=3) == 1
    assert num_splits_heuristic(tiles=380, n_blocks=64, sms=132, per_sm=3) == 1  # 96 % of one wave


def test_a_ragged_last_wave_is_split_away() -> None:
    assert num_splits_heuristic(tiles=512, n_blocks=64, sms=132, per_sm=3) == 3  # B 64 × 8 K/V heads


@pytest.mark.parametrize("tiles", [1, 8, 64, 100])
def test_splits_fill_most_of_a_wave(tiles: int) -> None:
    s = num_splits_heuristic(tiles=tiles, n_blocks=2048, sms=132, per_sm=3)
    slots = 132 * 3
    assert 1 < s <= MAX_SPLITS
    best = min(1.0, tiles * MAX_SPLITS / slots)  # one tile cannot fill 396 slots with 128 splits
    assert tiles * s / (math.ceil(tiles * s / slots) * slots) >= 0.8 * best


def test_never_more_splits_than_key_blocks() -> None:
    assert num_splits_heuristic(tiles=1, n_blocks=5, sms=132, per_sm=3) == 5
    assert num_splits_heuristic(tiles=1, n_blocks=1, sms=132, per_sm=3) == 1


def _inputs(case: InferenceCase, page: int, varlen: bool = False) -> dict:
    settings = {"page_size": page, "varlen": varlen}
    gen = torch.Generator().manual_seed(3)
    return make_inputs(settings, 32, 32, case, torch.float32, "cpu", gen, 1.0)


def test_pages_in_random_order_gather_back_to_the_sequence() -> None:
    case = InferenceCase(heads=4, heads_kv=2, seqlen_k=(0, 5, 33, 16), seqlen_q=(2,))
    inp = _inputs(case, page=16)
    table, k = inp["block_table"], inp["k"]
    owned = sorted(table[b, : math.ceil(n / 16)].tolist() for b, n in enumerate(case.seqlen_k))
    flat = [p for ids in owned for p in ids]
    assert len(flat) == len(set(flat))  # no page is shared
    assert flat != sorted(flat) or len(flat) < 3  # handed out in random order
    for b, n in enumerate(case.seqlen_k):
        rows = gather_pages(k, table, b, n)
        assert rows.shape == (n, 2, 32) and torch.isfinite(rows).all()  # only written rows come back


@pytest.mark.parametrize("program", [PLAIN, CAUSAL], ids=["plain", "causal"])
def test_paged_reference_equals_each_sequence_on_its_own(program: Forward) -> None:
    case = InferenceCase(heads=4, heads_kv=2, seqlen_k=(0, 7, 40), seqlen_q=(3,))
    inp = _inputs(case, page=16)
    o, lse = inference_reference(program, inp["q"], inp["k"], inp["v"], block_table=inp["block_table"],
                                 cache_seqlens=inp["cache_seqlens"])  # fmt: skip
    assert torch.isfinite(o).all()  # the NaN rows past each length and the spare pages are never read
    assert lse is not None
    assert (o[0] == 0).all() and torch.isposinf(lse[0]).all()  # an empty cache: O = 0, LSE = +inf
    for b, n in enumerate(case.seqlen_k[1:], start=1):
        k = gather_pages(inp["k"], inp["block_table"], b, n)[None]
        v = gather_pages(inp["v"], inp["block_table"], b, n)[None]
        ro, rl = forward_reference(program, inp["q"][b : b + 1], k, v)
        torch.testing.assert_close(o[b : b + 1], ro)
        assert rl is not None
        torch.testing.assert_close(lse[b : b + 1], rl)


def test_packed_batch_reference_is_causal_per_sequence() -> None:
    case = InferenceCase(heads=2, heads_kv=1, seqlen_k=(5, 0, 12), seqlen_q=(5, 0, 12))
    inp = _inputs(case, page=0, varlen=True)
    o, lse = inference_reference(CAUSAL, inp["q"], inp["k"], inp["v"], cu_seqlens_q=inp["cu_seqlens_q"],
                                 cu_seqlens_k=inp["cu_seqlens_k"])  # fmt: skip
    assert o.shape == (17, 2, 32) and lse is not None and lse.shape == (2, 17)
    # the first row of the third sequence sees only itself: O is its own V row
    torch.testing.assert_close(o[5, 0], inp["v"][5, 0])
    ro, _ = forward_reference(CAUSAL, inp["q"][None, :5], inp["k"][None, :5], inp["v"][None, :5])
    torch.testing.assert_close(o[:5], ro[0])


class _FakeDriver:
    """Stands in for cuda.bindings.driver: decodes each launch's kernelParams back into values."""

    class CUresult:
        CUDA_SUCCESS = 0

    def __init__(self) -> None:
        self.launches: list[tuple[Any, tuple[int, int, int], int, list]] = []
        self.types: dict[str, list[Any]] = {}

    def CUstream(self, handle: int) -> int:
        return handle

    def cuLaunchKernel(self, handle, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        import ctypes

        types = self.types[handle]
        pointers = (ctypes.c_void_p * len(types)).from_address(params)
        fields = [t.from_address(p) for t, p in zip(types, pointers, strict=True)]
        values = [getattr(f, "value", None) if hasattr(f, "value") else bytes(f) for f in fields]
        self.launches.append((handle, (gx, gy, gz), bx, values))
        return (0,)


PAGED = {"page_size": 64, "pack_gqa": True, "varlen": False, "combine": "k_combine", "combine_warps": 8}


def _loaded(inference: dict, **spec_kw: Any) -> Any:
    from runner.abi import INFERENCE_PARAMS, LaunchSpec
    from runner.launch import LoadedKernel

    spec = LaunchSpec(
        kernel_name="k", block_m=16, threads=32, shared_bytes=69632, dtype="bf16", head_dim_qk=64,
        head_dim_v=64, mask="none", inference=inference,
        **{"block_n": 64, "arch": "sm_80", "params": tuple(p[0] for p in INFERENCE_PARAMS), **spec_kw},
    )  # fmt: skip
    compiled: Any = None  # never compiled: the launch is recorded, not run
    return LoadedKernel(spec=spec, compiled=compiled, kernel="main", device_id=0, load_seconds=0.0,
                        combine_kernel="combine")  # fmt: skip


@pytest.fixture
def fake_driver(monkeypatch: pytest.MonkeyPatch) -> _FakeDriver:
    """cuda.bindings.driver replaced by a recorder of launches (the runner's launch path runs for real)."""
    import ctypes
    import sys
    import types

    import runner.decode as decode
    from runner.abi import COMBINE_PARAMS, INFERENCE_PARAMS

    c = {
        "uintp": ctypes.c_uint64,
        "int32": ctypes.c_int32,
        "int64": ctypes.c_int64,
        "float32": ctypes.c_float,
    }
    fake = _FakeDriver()
    fake.types = {"main": [c[t] for *_, t in INFERENCE_PARAMS], "combine": [c[t] for *_, t in COMBINE_PARAMS]}
    bindings = types.ModuleType("cuda.bindings")
    bindings.driver = fake  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cuda.bindings", bindings)
    monkeypatch.setattr(decode, "_stream_handle", lambda device: 7)
    monkeypatch.setattr(decode, "_PLANS", {})
    return fake


def test_decode_launch_passes_the_abi_and_combines_the_splits(fake_driver: _FakeDriver) -> None:
    import runner.decode as decode
    from runner.abi import COMBINE_PARAMS, INFERENCE_PARAMS

    fake = fake_driver
    loaded = _loaded(PAGED | {"splits": 0})
    batch, heads, heads_kv = 3, 8, 2
    q = torch.randn(batch, 1, heads, 64).to(torch.bfloat16)
    k = torch.randn(10, 64, heads_kv, 64).to(torch.bfloat16)
    table = torch.arange(12, dtype=torch.int32).reshape(batch, 4) % 10
    lens = torch.tensor([5, 200, 0], dtype=torch.int32)
    for scale in (0.5, 0.25):  # the second launch reuses the argument struct
        o, lse = decode.decode_attention(
            loaded, q, k, k, block_table=table, cache_seqlens=lens, num_splits=5, softmax_scale=scale
        )
    assert o.shape == (batch, 1, heads, 64) and lse.shape == (batch, heads, 1)
    assert [launch[0] for launch in fake.launches] == ["main", "combine"] * 2
    _, grid, block, args = fake.launches[2]
    assert grid == (1 * 5, batch, heads_kv) and block == 32  # packed GQA: 4 rows per K/V head, 5 splits
    named = dict(zip((p[0] for p in INFERENCE_PARAMS), args, strict=True))
    assert named["num_splits"] == 5 and named["max_pages"] == 4 and named["max_seqlen_k"] == 256
    assert named["k_batch_stride"] == k.stride(0) and named["block_table"] == table.data_ptr()
    assert named["q"] == q.data_ptr() and named["softmax_scale"] == 0.25
    assert named["cu_seqlens_q"] == 0 and named["o_accum"] != 0 and named["window_left"] == -1
    _, cgrid, cblock, cargs = fake.launches[3]
    cnamed = dict(zip((p[0] for p in COMBINE_PARAMS), cargs, strict=True))
    assert cnamed["num_splits"] == 5 and cnamed["o"] == o.data_ptr() and cnamed["o_accum"] == named["o_accum"]
    # 5 splits: two warps a row (a chunk of 4 partial rows each), so four rows to a block of eight warps
    assert cnamed["warps_per_row"] == 2 and cgrid == (math.ceil(batch * heads / 4), 1, 1) and cblock == 256


@pytest.mark.parametrize(("splits", "per_row"), [(1, 1), (3, 1), (4, 1), (5, 2), (8, 2), (9, 4), (16, 4),
                                                 (17, 8), (45, 8), (128, 8)])  # fmt: skip
def test_the_combine_gives_each_warp_about_one_chunk_of_splits(splits: int, per_row: int) -> None:
    from runner.decode import combine_warps_per_row

    assert combine_warps_per_row(splits) == per_row


def test_a_combine_built_before_warps_per_row_keeps_its_launch(fake_driver: _FakeDriver) -> None:
    """A kernel whose launch spec predates `combine_warps` (a .cu built earlier): one warp per row,
    four rows to a block of 128 threads, as it was compiled for."""
    import runner.decode as decode

    fake = fake_driver
    legacy = {k: v for k, v in PAGED.items() if k != "combine_warps"}
    loaded = _loaded(legacy | {"splits": 0})
    q = torch.randn(3, 1, 8, 64).to(torch.bfloat16)
    k = torch.randn(10, 64, 2, 64).to(torch.bfloat16)
    table = torch.arange(12, dtype=torch.int32).reshape(3, 4) % 10
    lens = torch.tensor([5, 200, 0], dtype=torch.int32)
    decode.decode_attention(loaded, q, k, k, block_table=table, cache_seqlens=lens, num_splits=5)
    _, cgrid, cblock, _ = fake.launches[-1]
    assert cgrid == (math.ceil(3 * 8 / 4), 1, 1) and cblock == 128


def test_decode_launch_refuses_a_paged_kernel_without_its_table() -> None:
    from runner.decode import decode_attention
    from runner.launch import LaunchError

    loaded = _loaded(PAGED | {"splits": 1})
    q = torch.randn(1, 1, 4, 64).to(torch.bfloat16)
    k = torch.randn(2, 64, 1, 64).to(torch.bfloat16)
    with pytest.raises(LaunchError, match="block_table and cache_seqlens"):
        decode_attention(loaded, q, k, k)


def test_a_plain_kernels_reference_keeps_its_mask_header() -> None:
    from runner.decode_verify import plain_program

    assert plain_program("causal").masks == (CAUSAL_MASK,)
    assert plain_program("none") == PLAIN


def test_the_forward_launch_refuses_an_inference_kernel() -> None:
    from runner.launch import LaunchError, launch

    loaded = _loaded(PAGED | {"splits": 0})
    q = torch.randn(1, 1, 4, 64).to(torch.bfloat16)
    with pytest.raises(LaunchError, match="inference kernel"):
        launch(loaded, q, q, q, q, torch.empty(1, 4, 1))


def test_tl_run_checks_ragged_batches_with_splits_where_the_kernel_splits() -> None:
    from runner.decode_verify import default_cases

    cases = default_cases(_loaded(PAGED | {"splits": 0}).spec)
    assert any(0 in c.seqlen_k for c in cases) and any(c.num_splits == 7 for c in cases)
    varlen = default_cases(_loaded(PAGED | {"splits": 1, "page_size": 0, "varlen": True}).spec)
    assert all(len(c.seqlen_q) == len(c.seqlen_k) for c in varlen) and not any(c.num_splits for c in varlen)


def test_a_repeated_call_signature_reuses_its_plan_with_new_pointers(fake_driver: _FakeDriver) -> None:
    import runner.decode as decode
    from runner.abi import COMBINE_PARAMS, INFERENCE_PARAMS
    from runner.launch import LaunchError

    fake = fake_driver
    loaded = _loaded(PAGED | {"splits": 2})
    table = torch.arange(4, dtype=torch.int32).reshape(2, 2)
    lens = torch.tensor([100, 3], dtype=torch.int32)
    k = torch.randn(4, 64, 2, 64).to(torch.bfloat16)
    names = [p[0] for p in INFERENCE_PARAMS]
    seen = []
    for _ in range(2):
        q = torch.randn(2, 1, 8, 64).to(torch.bfloat16)  # a new tensor of the same signature
        o, _ = decode.decode_attention(loaded, q, k, k, block_table=table, cache_seqlens=lens)
        args = dict(zip(names, fake.launches[-2][3], strict=True))
        assert args["q"] == q.data_ptr() and args["o"] == o.data_ptr() and args["num_splits"] == 2
        assert (
            dict(zip((p[0] for p in COMBINE_PARAMS), fake.launches[-1][3], strict=True))["o"] == o.data_ptr()
        )
        seen.append(args)
    assert len(decode._PLANS) == 1  # one signature, one plan
    assert {n: v for n, v in seen[0].items() if n not in ("q", "o", "lse", "o_accum", "lse_accum")} == {
        n: v for n, v in seen[1].items() if n not in ("q", "o", "lse", "o_accum", "lse_accum")
    }
    shifted = torch.randn(2 * 1 * 8 * 64 + 1).to(torch.bfloat16)[1:].view(2, 1, 8, 64)  # 2-byte offset
    with pytest.raises(LaunchError, match="q: the last dim must be contiguous with 16-byte aligned rows"):
        decode.decode_attention(loaded, shifted, k, k, block_table=table, cache_seqlens=lens)


@pytest.mark.parametrize(
    ("batch", "page", "block_n"),
    [(64, 64, 32), (8, 64, 64), (1, 64, 64), (64, 0, 64), (8, 0, 64), (1, 0, 64)],
    ids=["paged-B64x4k", "paged-B8x32k", "paged-B1x128k", "contig-B64x4k", "contig-B8x32k", "contig-B1x128k"],
)
def test_the_decode_key_block_follows_the_h200_measurements(batch: int, page: int, block_n: int) -> None:
    """docs/results/2026-12-01-h200-decode-graph.json: GQA 32/8, d 128, one query row, 132 SMs; paged BN 32
    won only at B 64 × 4k, contiguous BN 64 everywhere."""
    from runner.decode import preferred_block_n

    loaded = _loaded(PAGED | {"splits": 0, "page_size": page})
    assert loaded.spec.shared_bytes == 69632  # paged_decode.tl at d 128: 3 blocks per SM
    assert preferred_block_n(loaded.spec, batch, 1, 32, 8, 132) == block_n


def test_the_key_block_rule_leaves_other_tiles_alone() -> None:
    from runner.decode import preferred_block_n

    varlen = _loaded(PAGED | {"splits": 1, "varlen": True})
    assert preferred_block_n(varlen.spec, 64, 1, 32, 8, 132) == 64
    wide = _loaded(PAGED | {"splits": 0}, block_n=128)
    assert preferred_block_n(wide.spec, 64, 1, 32, 8, 132) == 128


def test_a_packed_prefill_on_sm90_passes_its_tensor_maps_after_the_abi(
    fake_driver: _FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wgmma packed prefill (`LaunchSpec.uses_tma` with the inference ABI): the launch struct carries
    one 128-byte descriptor per tensor after INFERENCE_PARAMS, copied from the encoded maps."""
    import ctypes

    import runner.decode as decode
    from runner.abi import INFERENCE_PARAMS, TMA_PARAMS
    from runner.struct_launch import TENSOR_MAP_BYTES

    blobs = [(ctypes.c_ubyte * TENSOR_MAP_BYTES)(*([i + 1] * TENSOR_MAP_BYTES)) for i in range(4)]

    class _Map:
        def __init__(self, blob: Any) -> None:
            self.blob = blob

        def getPtr(self) -> int:
            return ctypes.addressof(self.blob)

    seen: list[tuple] = []

    def fake_maps(spec: Any, q: Any, k: Any, v: Any, o: Any) -> list[Any]:
        seen.append(tuple(t.shape for t in (q, k, v, o)))
        return [_Map(b) for b in blobs]

    monkeypatch.setattr(decode, "_tensor_maps", fake_maps)
    tensormap = ctypes.c_ubyte * TENSOR_MAP_BYTES
    fake_driver.types["main"] += [tensormap] * len(TMA_PARAMS)
    packed = {"splits": 1, "page_size": 0, "pack_gqa": False, "varlen": True, "combine": None}
    loaded = _loaded(packed, params=tuple(p[0] for p in INFERENCE_PARAMS) + TMA_PARAMS, arch="sm_90a")
    assert loaded.spec.uses_tma
    total, heads, heads_kv = 300, 8, 2
    q = torch.randn(total, heads, 64).to(torch.bfloat16)
    k = torch.randn(total, heads_kv, 64).to(torch.bfloat16)
    cu = torch.tensor([0, 17, 17, 300], dtype=torch.int32)
    o, lse = decode.decode_attention(loaded, q, k, k, cu_seqlens_q=cu, cu_seqlens_k=cu)
    assert o.shape == (total, heads, 64) and lse.shape == (heads, total)
    (launch,) = fake_driver.launches
    _, grid, _, args = launch
    assert grid == (math.ceil(283 / 16), 3, heads)  # the longest sequence's query blocks, batch, heads
    n = len(INFERENCE_PARAMS)
    named = dict(zip((p[0] for p in INFERENCE_PARAMS), args[:n], strict=True))
    assert named["cu_seqlens_q"] == cu.data_ptr() and named["max_seqlen_q"] == 283
    assert args[n:] == [bytes([i + 1] * TENSOR_MAP_BYTES) for i in range(4)]
    assert seen == [((total, heads, 64), (total, heads_kv, 64), (total, heads_kv, 64), (total, heads, 64))]
