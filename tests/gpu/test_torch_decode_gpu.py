"""tl_attention.compile_decode on a GPU: a paged decode step and a packed prefill against the IR reference
(ragged lengths, an empty sequence, pages in random order, NaN where the kernel must not read), and the
decode step captured in a CUDA graph and replayed on a new query."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tl_attention
from runner.decode_reference import inference_reference
from runner.decode_verify import InferenceCase, make_inputs, plain_program
from runner.verify import TOLERANCES, compare

pytestmark = [pytest.mark.gpu, pytest.mark.nvrtc]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "inference"


def _inputs(kernel: tl_attention.DecodeKernel, case: InferenceCase, seed: int) -> dict:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    spec = kernel.spec
    return make_inputs(
        spec.inference, spec.head_dim_qk, spec.head_dim_v, case, torch.bfloat16, "cuda", gen, 1.0
    )


def _check(kernel: tl_attention.DecodeKernel, case: InferenceCase) -> None:
    spec = kernel.spec
    inp = _inputs(kernel, case, 0)
    q, k, v = inp.pop("q"), inp.pop("k"), inp.pop("v")
    if kernel.kind == "varlen":
        lens_q = [int(x) for x in (inp["cu_seqlens_q"][1:] - inp["cu_seqlens_q"][:-1]).tolist()]
        inp.update(max_seqlen_q=max(lens_q), max_seqlen_k=max(case.seqlen_k))
    o, lse = kernel(q, k, v, return_lse=True, **inp)
    layout = {n: t for n, t in inp.items() if isinstance(t, torch.Tensor)}
    ref_o, ref_lse = inference_reference(plain_program(spec.mask), q, k, v, **layout)
    result = compare(o, lse, ref_o, ref_lse, TOLERANCES[spec.dtype], str(case))
    assert result.passed, str(result)


def test_paged_decode_matches_the_reference() -> None:
    kernel = tl_attention.compile_decode(EXAMPLES / "paged_decode.tl", target="auto")
    _check(kernel, InferenceCase(heads=32, heads_kv=8, seqlen_k=(0, 1, 63, 1000, 4097)))


def test_varlen_prefill_matches_the_reference() -> None:
    kernel = tl_attention.compile_decode(EXAMPLES / "varlen_prefill.tl", target="auto")
    _check(kernel, InferenceCase(heads=8, heads_kv=2, seqlen_k=(17, 0, 300), seqlen_q=(17, 0, 300)))


def test_a_decode_step_replays_in_a_cuda_graph() -> None:
    kernel = tl_attention.compile_decode(EXAMPLES / "paged_decode.tl", target="auto")
    inp = _inputs(kernel, InferenceCase(heads=32, heads_kv=8, seqlen_k=(500, 2000)), 1)
    q, k, v = inp.pop("q"), inp.pop("k"), inp.pop("v")
    eager = kernel(q, k, v, **inp)  # loads the module: a capture cannot
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = kernel(q, k, v, **inp)
    q.copy_(torch.randn_like(q))  # the next step's query, written into the captured buffer
    graph.replay()
    ref = kernel(q, k, v, **inp)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    assert not torch.equal(out, eager)
