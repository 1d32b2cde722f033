"""tl_attention on a GPU: the kernel against an eager float32 reference in both layouts with GQA, under
torch.compile(fullgraph=True) with inductor, captured in a CUDA graph and replayed, opcheck on CUDA
tensors, the missing-backward error (or, once a backward provider covers the kernel, its gradients, and
learnable ALiBi slopes trained through the op); and
transformers models (Llama-like GQA, Qwen2-like, Gemma-2-like
with softcap and sliding window; random weights) against transformers' own attention.

Every kernel of the module is compiled once, in parallel, by the `kernels` fixture (`load_many`).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch

import tl_attention
from tl_attention import hf
from tl_attention.backward import BackwardUnavailable, find_backward
from tl_attention.ops import forward_op

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16
CAP = 20.0
SHARPEN = 6.0  # random weights give near-uniform attention; sharpened logits let the softcap and window show


def model_configs() -> dict[str, Any]:
    from transformers import Gemma2Config, LlamaConfig, Qwen2Config

    common = {
        "vocab_size": 256,
        "hidden_size": 512,
        "intermediate_size": 1024,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    }
    return {
        "llama": LlamaConfig(**common, head_dim=128),
        "qwen2": Qwen2Config(**common),
        "gemma2": Gemma2Config(**common, head_dim=128, sliding_window=64, attn_logit_softcapping=5.0),
    }


def suite_kernels() -> list[tl_attention.Kernel]:
    """Every kernel of this module (softcap.tl, alibi.tl and the models' layers), translated, not
    compiled."""
    hf.register()
    softcap = tl_attention.compile("softcap.tl", lazy=True)
    alibi = tl_attention.compile("alibi.tl", lazy=True)
    documents = tl_attention.compile("document_mask.tl", lazy=True)
    layers = [k for cfg in model_configs().values() for k in hf.kernels_for(cfg, BF16)]
    return list(dict.fromkeys([softcap, alibi, documents, *layers]))


@pytest.fixture(scope="module")
def kernels() -> dict[str, Any]:
    every = suite_kernels()
    start = time.perf_counter()
    tl_attention.load_many(every)
    print(f"\ntl_attention GPU suite: {len(every)} kernels ready in {time.perf_counter() - start:.1f} s")
    return {"softcap": every[0], "alibi": every[1], "documents": every[2]}


def reference(q: Any, k: Any, v: Any, scale: float, cap: float) -> tuple[Any, Any]:
    """Softcapped attention in float32, (batch, heads, seqlen, dim); GQA by repeating K/V heads."""
    group = q.shape[1] // k.shape[1]
    k, v = (t.float().repeat_interleave(group, 1) for t in (k, v))
    s = q.float() @ k.transpose(-1, -2) * scale
    s = cap * torch.tanh(s / cap)
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)


def qkv(batch: int = 2, heads: int = 8, heads_kv: int = 2, seqlen: int = 300, seed: int = 0) -> list[Any]:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    shapes = [(batch, heads, seqlen, 128), (batch, heads_kv, seqlen, 128), (batch, heads_kv, seqlen, 128)]
    return [torch.randn(*s, generator=gen, device="cuda", dtype=BF16) for s in shapes]


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_kernel_matches_reference(kernels: dict[str, Any], layout: str) -> None:
    q, k, v = qkv()
    ref_o, ref_lse = reference(q, k, v, 0.1, CAP)
    if layout == "bshd":
        q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    o, lse = kernels["softcap"](q, k, v, scale=0.1, cap=CAP, layout=layout, return_lse=True)
    assert o.shape == q.shape and o.dtype == BF16
    o = o if layout == "bhsd" else o.transpose(1, 2)
    torch.testing.assert_close(o.float(), ref_o, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse, ref_lse, atol=1e-3, rtol=1e-3)


def test_wrong_dtype_is_a_type_error_before_any_launch(kernels: dict[str, Any]) -> None:
    q, k, v = qkv()
    with pytest.raises(TypeError, match=r"q: dtype torch.float16"):
        kernels["softcap"](q.half(), k, v)


def test_torch_compile_fullgraph_inductor(kernels: dict[str, Any]) -> None:
    kernel = kernels["softcap"]

    def block(q: Any, k: Any, v: Any) -> Any:
        return kernel(q * 0.5, k, v, cap=CAP).float().square().sum(-1)

    q, k, v = qkv(seed=1)
    compiled = torch.compile(block, fullgraph=True)
    torch.testing.assert_close(compiled(q, k, v), block(q, k, v), atol=1e-2, rtol=1e-2)


def test_cuda_graph_capture_and_replay(kernels: dict[str, Any]) -> None:
    kernel = kernels["softcap"]
    static = qkv(seed=2)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        kernel(*static, cap=CAP)  # warm-up off the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # capture_error_mode "global": any sync or cudaMalloc fails the capture
        out = kernel(*static, cap=CAP)
    fresh = qkv(seed=3)
    for s, f in zip(static, fresh, strict=True):
        s.copy_(f)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, kernel(*fresh, cap=CAP))


def test_opcheck_on_cuda_tensors(kernels: dict[str, Any]) -> None:
    q, k, v = (t.transpose(1, 2) for t in qkv(seqlen=130))
    torch.library.opcheck(forward_op, (kernels["softcap"].key, q, k, v, 0.1, [-1, -1], [], [CAP]))


def test_backward_without_a_provider_names_the_missing_piece(kernels: dict[str, Any]) -> None:
    kernel = kernels["softcap"]
    if find_backward(kernel) is not None:
        pytest.skip("a backward provider covers this kernel")
    q, k, v = (t.requires_grad_() for t in qkv(seqlen=64))
    with pytest.raises(BackwardUnavailable, match=r"no backward for kernel softcap_fwd"):
        kernel(q, k, v).float().sum().backward()


def test_kernel_gradients_match_reference(kernels: dict[str, Any]) -> None:
    kernel = kernels["softcap"]
    if find_backward(kernel) is None:
        pytest.skip("no backward provider covers softcap_fwd yet")
    q, k, v = (t.requires_grad_() for t in qkv(seqlen=256, seed=5))
    grad_o = torch.randn_like(q)
    kernel(q, k, v, scale=0.1, cap=CAP).backward(grad_o)
    leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
    reference(*leaves, 0.1, CAP)[0].backward(grad_o.float())
    for name, got, want in zip("qkv", (q.grad, k.grad, v.grad), (t.grad for t in leaves), strict=True):
        assert got is not None and want is not None, name
        torch.testing.assert_close(got.float(), want, atol=5e-2, rtol=5e-2, msg=f"d{name}")


def test_a_prebuilt_block_mask_gives_the_per_call_results(kernels: dict[str, Any]) -> None:
    """document_mask.tl with its block classes built once (`Kernel.block_mask`) and passed to the call,
    or kept by the kernel between calls (its mask cache): the output bit for bit and the gradients (dQ's
    float32 atomics aside) as when every kernel classifies the blocks itself; classes for other lengths
    are refused before any launch."""
    kernel = kernels["documents"]
    q, k, v = (t.requires_grad_() for t in qkv(seqlen=1000, seed=7))
    gen = torch.Generator(device="cuda").manual_seed(7)
    doc = torch.sort(torch.randint(0, 6, (2, 1000), generator=gen, device="cuda"), dim=1).values.int()
    grad_o = torch.randn(q.shape, generator=gen, device="cuda", dtype=BF16)
    runs = []
    kernel._mask_cache.clear()
    counts = (kernel._mask_cache.builds, kernel._mask_cache.hits)
    for cache, mask in ((0, None), (4, None), (4, None), (4, kernel.block_mask(q, k, v, doc=doc))):
        kernel.block_mask_cache = cache
        for t in (q, k, v):
            t.grad = None
        o = kernel(q, k, v, scale=0.1, doc=doc, block_mask=mask)
        o.backward(grad_o)
        runs.append((o.detach(), *(t.grad for t in (q, k, v))))
    assert (kernel._mask_cache.builds, kernel._mask_cache.hits) == (counts[0] + 1, counts[1] + 1)
    o1, dq1, dk1, dv1 = runs[0]
    assert not o1.isnan().any()
    for o2, dq2, dk2, dv2 in runs[1:]:
        assert torch.equal(o1, o2)
        if find_backward(kernel) is not None:
            assert torch.equal(dk1, dk2) and torch.equal(dv1, dv2)
            torch.testing.assert_close(dq1, dq2, atol=1e-2, rtol=1e-2)
    if find_backward(kernel) is not None:
        assert kernel.block_mask(q, k, v, doc=doc).backward is not None
    short = kernel.block_mask(q[:, :, :500], k[:, :, :500], v[:, :, :500], doc=doc[:, :500])
    with pytest.raises(ValueError, match="block_classes"):
        kernel(q, k, v, doc=doc, block_mask=short)


def test_the_kept_block_classes_follow_an_in_place_write(kernels: dict[str, Any]) -> None:
    """The kernel's mask cache after `doc` is rewritten in place (one document instead of six): the
    call classifies again and gives what the kernel gives with its classes built per launch."""
    kernel = kernels["documents"]
    kernel.block_mask_cache = 4
    kernel._mask_cache.clear()
    counts = (kernel._mask_cache.builds, kernel._mask_cache.hits)
    q, k, v = qkv(seqlen=700, seed=11)
    gen = torch.Generator(device="cuda").manual_seed(11)
    doc = torch.sort(torch.randint(0, 6, (2, 700), generator=gen, device="cuda"), dim=1).values.int()
    with torch.no_grad():
        before = kernel(q, k, v, doc=doc)
        doc.zero_()
        after = kernel(q, k, v, doc=doc)
        kernel.block_mask_cache = 0
        fresh = kernel(q, k, v, doc=doc)
    kernel.block_mask_cache = 4
    assert (kernel._mask_cache.builds, kernel._mask_cache.hits) == (counts[0] + 2, counts[1])
    assert torch.equal(after, fresh) and not torch.equal(before, after)


def alibi_reference(q: Any, k: Any, v: Any, scale: float, slopes: Any) -> Any:
    """alibi.tl in float32, (batch, heads, seqlen, dim): S·scale + slope·(j − i'), causal with i' = i +
    seqlen_k − seqlen_q (bottom-right); GQA by repeating K/V heads."""
    group = q.shape[1] // k.shape[1]
    k, v = (t.repeat_interleave(group, 1) for t in (k, v))
    s = q @ k.transpose(-1, -2) * scale
    i = torch.arange(q.shape[2], device=q.device)[:, None] + k.shape[2] - q.shape[2]
    j = torch.arange(k.shape[2], device=q.device)[None, :]
    s = s + slopes[None, :, None, None] * (j - i)
    return torch.softmax(s.masked_fill(j > i, -float("inf")), -1) @ v


def test_learnable_alibi_slopes_train_through_the_op(kernels: dict[str, Any]) -> None:
    """ALiBi's slopes as an nn.Parameter of a module calling the op: the op's gradient of the slopes
    (the derived backward's, row-sum corrected) and of q, k, v match autograd of the float32 reference,
    and three SGD steps move the slopes as the reference's do."""
    kernel = kernels["alibi"]
    if find_backward(kernel) is None:
        pytest.skip("no backward provider covers alibi_fwd yet")
    heads = 8
    q0, k0, v0 = qkv(batch=2, heads=heads, heads_kv=2, seqlen=1000, seed=11)
    # dO as the kernel sees it (the bf16 output's gradient): the slopes' gradient Σ dS·(j − i) weighs each
    # row by up to seqlen, so a float32 dO on the reference's side alone moves it by up to 4 %.
    gen = torch.Generator(device="cuda").manual_seed(12)
    grad_o = torch.randn(q0.shape, generator=gen, device="cuda", dtype=BF16).float()
    start = torch.exp2(-8.0 * torch.arange(1, heads + 1, device="cuda") / heads)
    slopes = torch.nn.Parameter(start.clone())
    ref_slopes = torch.nn.Parameter(start.clone())
    opt, ref_opt = torch.optim.SGD([slopes], lr=1e-3), torch.optim.SGD([ref_slopes], lr=1e-3)
    scale = 128**-0.5
    for step in range(3):
        q, k, v = (t.clone().requires_grad_() for t in (q0, k0, v0))
        out = kernel(q, k, v, scale=scale, slopes=slopes)
        (out.float() * grad_o).sum().backward()
        leaves = [t.detach().float().requires_grad_() for t in (q0, k0, v0)]
        (alibi_reference(*leaves, scale, ref_slopes) * grad_o).sum().backward()
        assert slopes.grad is not None and ref_slopes.grad is not None
        torch.testing.assert_close(
            slopes.grad, ref_slopes.grad, atol=1e-2, rtol=1e-2, msg=lambda m, s=step: f"dslopes {s}: {m}"
        )
        for name, got, want in zip("qkv", (q.grad, k.grad, v.grad), (t.grad for t in leaves), strict=True):
            assert got is not None and want is not None
            torch.testing.assert_close(got.float(), want, atol=5e-2, rtol=5e-2, msg=f"d{name} {step}")
        for o in (opt, ref_opt):
            o.step()
            o.zero_grad()
    torch.testing.assert_close(slopes.detach(), ref_slopes.detach(), atol=1e-4, rtol=1e-3)
    assert not torch.equal(slopes.detach(), start)  # the steps did move them


# ---- transformers models ----------------------------------------------------------------------------------


def model(name: str, attn: str) -> Any:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    with torch.device("cuda"):
        m = AutoModelForCausalLM.from_config(model_configs()[name], attn_implementation=attn, dtype=BF16)
    with torch.no_grad():
        for layer in m.model.layers:
            layer.self_attn.q_proj.weight.mul_(SHARPEN)
            layer.self_attn.k_proj.weight.mul_(SHARPEN)
    return m.eval()


def tokens(batch: int = 2, seqlen: int = 200) -> Any:
    gen = torch.Generator(device="cuda").manual_seed(4)
    return torch.randint(0, 256, (batch, seqlen), device="cuda", generator=gen)


@pytest.mark.parametrize(("name", "baseline"), [("llama", "sdpa"), ("qwen2", "sdpa"), ("gemma2", "eager")])
def test_model_logits_match_transformers_attention(kernels: dict[str, Any], name: str, baseline: str) -> None:
    ids = tokens()
    with torch.no_grad():
        got = model(name, "tl")(ids, use_cache=False).logits.float()
        want = model(name, baseline)(ids, use_cache=False).logits.float()
    err = (got - want).abs().max().item()
    print(
        f"\n{name}: max |logits(tl) - logits({baseline})| = {err:.4f} (|logits| max {want.abs().max():.2f})"
    )
    torch.testing.assert_close(got, want, atol=6e-2, rtol=6e-2)


def test_model_in_a_cuda_graph(kernels: dict[str, Any]) -> None:
    """The whole model, captured in a CUDA graph (capture_error_mode "global": no sync, no cudaMalloc),
    replays the eager logits exactly."""
    m = model("llama", "tl")
    ids = tokens()
    with torch.no_grad():
        eager = m(ids, use_cache=False).logits
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            m(ids, use_cache=False)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = m(ids, use_cache=False).logits
        graph.replay()
        torch.cuda.synchronize()
    assert torch.equal(captured, eager)


def test_model_under_inductor_drifts_no_more_than_with_sdpa(kernels: dict[str, Any]) -> None:
    """torch.compile(model, fullgraph=True) with inductor: the compiled TL model moves the logits away from
    the eager ones by no more than inductor moves the same model on SDPA (the bf16 rounding of the ops it
    fuses around the attention: on the H200, 0.147 max and 0.011 mean of logits up to 2 with TL)."""
    ids = tokens()
    drift: dict[str, tuple[float, float]] = {}
    for attn in ("tl", "sdpa"):
        m = model("llama", attn)
        with torch.no_grad():
            eager = m(ids, use_cache=False).logits.float()
            compiled = torch.compile(m, fullgraph=True)(ids, use_cache=False).logits.float()
        diff = (compiled - eager).abs()
        drift[attn] = (diff.max().item(), diff.mean().item())
    print(f"\ninductor vs eager logits (max, mean |diff|): {drift}")
    (tl_max, tl_mean), (sdpa_max, sdpa_mean) = drift["tl"], drift["sdpa"]
    assert tl_max <= 2 * sdpa_max + 2e-2 and tl_mean <= 2 * sdpa_mean + 1e-3, drift


@pytest.mark.parametrize(("name", "baseline"), [("llama", "sdpa"), ("qwen2", "sdpa"), ("gemma2", "eager")])
def test_model_gradients_and_training_steps_track_transformers(
    kernels: dict[str, Any], name: str, baseline: str
) -> None:
    """With a backward for every layer kernel of the model: the first step's gradients (the first layer's
    q_proj and the embedding) match transformers' own attention, and a few AdamW steps' losses track it."""
    cfg = model_configs()[name]
    missing = [k.name for k in hf.kernels_for(cfg, BF16) if find_backward(k) is None]
    if missing:
        pytest.skip(f"no backward provider covers {missing} yet")
    ids = tokens()
    losses: dict[str, list[float]] = {}
    grads: dict[str, list[Any]] = {}
    for attn in ("tl", baseline):
        m = model(name, attn).train()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        losses[attn] = []
        for step in range(4):
            loss = m(ids, labels=ids, use_cache=False).loss
            loss.backward()
            if step == 0:
                watched = (m.model.layers[0].self_attn.q_proj.weight, m.model.embed_tokens.weight)
                grads[attn] = [w.grad.float().clone() for w in watched]
            opt.step()
            opt.zero_grad()
            losses[attn].append(loss.item())
    print(f"\n{name} losses: {losses}")
    for got, want in zip(grads["tl"], grads[baseline], strict=True):
        scale = want.abs().max().item()
        torch.testing.assert_close(got, want, atol=5e-2 * scale, rtol=5e-2)
    for a, b in zip(losses["tl"], losses[baseline], strict=True):
        assert abs(a - b) < 0.02 * b, losses
