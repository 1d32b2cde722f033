"""tl_attention.compile_decode without a GPU: building the inference examples, argument errors that name
the argument, the op's fake kernel on meta tensors, torch.compile(fullgraph=True) and opcheck."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import tl_attention
from tl_attention.decode import inference_op

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "inference"
BF16 = torch.bfloat16


def meta(*shape: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    return torch.empty(*shape, dtype=dtype, device="meta")


@pytest.fixture(scope="module")
def paged() -> tl_attention.DecodeKernel:
    return tl_attention.compile_decode(EXAMPLES / "paged_decode.tl", lazy=True)


@pytest.fixture(scope="module")
def spec() -> tl_attention.DecodeKernel:
    return tl_attention.compile_decode(EXAMPLES / "spec_decode.tl", lazy=True)


@pytest.fixture(scope="module")
def varlen() -> tl_attention.DecodeKernel:
    return tl_attention.compile_decode(EXAMPLES / "varlen_prefill.tl", lazy=True)


def _paged_args(**over: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "q": meta(3, 1, 32, 128), "k": meta(40, 64, 8, 128), "v": meta(40, 64, 8, 128),
        "block_table": meta(3, 10, dtype=torch.int32), "cache_seqlens": meta(3, dtype=torch.int32),
    }  # fmt: skip
    return args | over


def test_the_examples_build_as_their_kinds(
    paged: tl_attention.DecodeKernel, spec: tl_attention.DecodeKernel, varlen: tl_attention.DecodeKernel
) -> None:
    assert (paged.kind, spec.kind, varlen.kind) == ("paged", "contiguous", "varlen")
    assert tl_attention.compile_decode(EXAMPLES / "paged_decode.tl", lazy=True) is paged  # one registry entry


def test_a_forward_kernel_is_refused() -> None:
    with pytest.raises(tl_attention.TLError, match="no inference Params"):
        tl_attention.compile_decode("causal_mha_fwd.tl", lazy=True)


I32 = torch.int32
BAD = [
    ({"q": meta(3, 1, 32, 128, dtype=torch.float16)}, TypeError, r"q: dtype torch.float16"),
    ({"k": meta(40, 32, 8, 128), "v": meta(40, 32, 8, 128)}, ValueError, r"k: pages of 32 tokens.*64"),
    ({"k": meta(40, 64, 8, 64), "v": meta(40, 64, 8, 64)}, ValueError, r"k: head dim 64"),
    ({"k": meta(40, 64, 5, 128), "v": meta(40, 64, 5, 128)}, ValueError, r"k: 5 key/value head"),
    ({"block_table": None}, TypeError, r"block_table: a paged-cache kernel needs"),
    ({"block_table": meta(3, 10)}, TypeError, r"block_table: dtype torch.bfloat16, expected torch.int32"),
    ({"block_table": meta(2, 10, dtype=I32)}, ValueError, r"block_table: expected shape \(3, any\)"),
    ({"cache_seqlens": meta(4, dtype=I32)}, ValueError, r"cache_seqlens: expected shape \(3,\)"),
    ({"cu_seqlens_q": meta(4, dtype=I32)}, TypeError, r"cu_seqlens_q: .* is a paged kernel"),
    ({"q": torch.empty(3, 1, 32, 128, dtype=BF16)}, ValueError, r"q: tensor is on cpu, expected a CUDA"),
    ({"q": meta(3, 32, 128)}, ValueError, r"q: expected 4 dims \(batch, seqlen_q, heads, d\)"),
    ({"num_splits": 0}, ValueError, r"num_splits: .* takes 1 to 128, got 0"),
    ({"num_splits": 2.0}, TypeError, r"num_splits: expected an int"),
    ({"scale": -1.0}, ValueError, r"scale: expected a positive"),
    ({"bias": 1.0}, TypeError, r"unexpected keyword argument\(s\) 'bias'"),
]


@pytest.mark.parametrize(
    ("over", "error", "match"), BAD, ids=[m.split(":")[0] + str(i) for i, (*_, m) in enumerate(BAD)]
)
def test_bad_arguments_name_the_argument(
    paged: tl_attention.DecodeKernel, over: dict[str, Any], error: type[Exception], match: str
) -> None:
    args = _paged_args(**over)
    with pytest.raises(error, match=match):
        paged(args.pop("q"), args.pop("k"), args.pop("v"), **args)


def test_a_packed_batch_needs_its_offsets_and_maxima(varlen: tl_attention.DecodeKernel) -> None:
    q, kv = meta(100, 32, 128), meta(100, 8, 128)
    cu = meta(4, dtype=torch.int32)
    with pytest.raises(TypeError, match="cu_seqlens_k: a packed-batch kernel needs"):
        varlen(q, kv, kv, cu_seqlens_q=cu, max_seqlen_q=50, max_seqlen_k=50)
    with pytest.raises(TypeError, match="max_seqlen_q: expected an int"):
        varlen(q, kv, kv, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=5.0, max_seqlen_k=50)
    with pytest.raises(ValueError, match=r"cu_seqlens_k: expected shape \(4,\)"):
        varlen(q, kv, kv, cu_seqlens_q=cu, cu_seqlens_k=meta(3, dtype=torch.int32), max_seqlen_q=5,
               max_seqlen_k=5)  # fmt: skip
    with pytest.raises(TypeError, match=r"block_table: .* is a varlen kernel"):
        varlen(q, kv, kv, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=5, max_seqlen_k=5,
               block_table=meta(3, 2, dtype=torch.int32))  # fmt: skip


def test_fake_kernel_shapes_on_meta_tensors(
    paged: tl_attention.DecodeKernel, spec: tl_attention.DecodeKernel, varlen: tl_attention.DecodeKernel
) -> None:
    args = _paged_args()
    o, lse = paged(args.pop("q"), args.pop("k"), args.pop("v"), return_lse=True, **args)
    assert o.shape == (3, 1, 32, 128) and o.dtype == BF16 and lse.shape == (3, 32, 1)
    assert lse.dtype == torch.float32
    o = spec(meta(2, 5, 32, 128), meta(2, 300, 8, 128), meta(2, 300, 8, 128),
             cache_seqlens=meta(2, dtype=torch.int32), num_splits=3)  # fmt: skip
    assert o.shape == (2, 5, 32, 128)
    cu = meta(4, dtype=torch.int32)
    o, lse = varlen(meta(100, 32, 128), meta(90, 8, 128), meta(90, 8, 128), cu_seqlens_q=cu, cu_seqlens_k=cu,
                    max_seqlen_q=50, max_seqlen_k=50, return_lse=True)  # fmt: skip
    assert o.shape == (100, 32, 128) and lse.shape == (32, 100)


def test_torch_compile_fullgraph_traces_the_op(paged: tl_attention.DecodeKernel) -> None:
    graphs: list[int] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(sum(n.target is torch.ops.tl_attention.inference.default for n in gm.graph.nodes))
        return gm.forward

    def step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, table: torch.Tensor, lens: torch.Tensor):
        return paged(q, k, v, block_table=table, cache_seqlens=lens).float().sum(-1)

    args = _paged_args()
    out = torch.compile(step, fullgraph=True, backend=backend)(*args.values())
    assert out.shape == (3, 1, 32) and graphs == [1]


def test_opcheck_on_meta_tensors(paged: tl_attention.DecodeKernel, varlen: tl_attention.DecodeKernel) -> None:
    a = _paged_args()
    torch.library.opcheck(
        inference_op, (paged.key, a["q"], a["k"], a["v"], a["block_table"], a["cache_seqlens"], None, None,
                       1, 640, -1, 0.1, [], []),
    )  # fmt: skip
    cu = meta(4, dtype=torch.int32)
    q, kv = meta(100, 32, 128), meta(90, 8, 128)
    torch.library.opcheck(inference_op, (varlen.key, q, kv, kv, None, None, cu, cu, 50, 50, -1, 0.1, [], []))
