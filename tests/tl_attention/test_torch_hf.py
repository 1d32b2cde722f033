"""The transformers integration without a GPU: registration, the kernel chosen per layer from the config,
whole models traced by torch.compile(fullgraph=True) on meta tensors, argument errors, and logits and
gradients of real model classes (random weights, no downloads) against transformers' own attention, with
the ops' CPU reference kernels (conftest.py `on_cpu`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")

from tl_attention import hf  # noqa: E402
from tl_attention.model_kernels import LayerKind  # noqa: E402

BF16 = torch.bfloat16
SHARPEN = 6.0


def configs() -> dict[str, Any]:
    from transformers import Gemma2Config, LlamaConfig, Qwen2Config

    common = {
        "vocab_size": 96,
        "hidden_size": 256,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    }
    return {
        "llama": LlamaConfig(**common, head_dim=64),
        "qwen2": Qwen2Config(**common),
        # Gemma 2's layers alternate sliding (window 16 here, shorter than the inputs) and global; every
        # layer softcaps its logits.
        "gemma2": Gemma2Config(**common, head_dim=64, sliding_window=16, attn_logit_softcapping=5.0),
    }


@pytest.fixture(scope="module", autouse=True)
def registered() -> Iterator[None]:
    hf.register()
    yield


def model(name: str, attn: str, dtype: torch.dtype = BF16, device: str = "cpu", seed: int = 0) -> Any:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    with torch.device(device):
        m = AutoModelForCausalLM.from_config(configs()[name], attn_implementation=attn, dtype=dtype)
    # Random weights give near-uniform attention, where neither a softcap nor a window shows: sharpen the
    # logits (to |s| of several units) by scaling the query and key projections.
    with torch.no_grad():
        for layer in m.model.layers:
            layer.self_attn.q_proj.weight.mul_(SHARPEN)
            layer.self_attn.k_proj.weight.mul_(SHARPEN)
    return m.eval()


def test_registration() -> None:
    from transformers import AttentionInterface

    assert AttentionInterface._global_mapping["tl"] is hf.attention_forward
    assert model("llama", "tl", device="meta").config._attn_implementation == "tl"


def test_layer_kinds_follow_the_config() -> None:
    cfg = configs()
    assert [k.key for k in hf.layer_kinds(cfg["llama"], BF16)] == ["hf:bf16:64:1:0:0"]
    assert [k.key for k in hf.layer_kinds(cfg["qwen2"], torch.float16)] == ["hf:fp16:64:1:0:0"]
    assert [k.key for k in hf.layer_kinds(cfg["gemma2"], BF16)] == ["hf:bf16:64:1:1:0", "hf:bf16:64:1:1:1"]
    assert LayerKind.from_key("hf:bf16:64:1:1:1") == LayerKind("bf16", 64, True, True, True)


def test_prepare_without_a_device_translates_each_layer_kind() -> None:
    if torch.cuda.is_available():
        pytest.skip("a device is visible: prepare compiles")
    kernels = hf.prepare(configs()["gemma2"])
    assert [k.scalar_names for k in kernels] == [["cap"], ["cap", "window_size"]]
    assert all(k.spec.mask == "causal" for k in kernels)


class OpKeys:
    """A torch.compile backend that records the kernel key of every tl_attention op in the graph."""

    def __init__(self) -> None:
        self.graphs = 0
        self.keys: list[str] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        self.graphs += 1
        op = torch.ops.tl_attention.forward.default
        self.keys += [n.args[0] for n in gm.graph.nodes if n.target is op]
        return gm.forward


@pytest.mark.parametrize("name", ["llama", "qwen2", "gemma2"])
def test_torch_compile_fullgraph_traces_every_layer(name: str) -> None:
    m = model(name, "tl", device="meta")
    ids = torch.zeros(2, 32, dtype=torch.long, device="meta")
    backend = OpKeys()
    logits = torch.compile(m, fullgraph=True, backend=backend)(ids, use_cache=False).logits
    assert logits.shape == (2, 32, 96)
    want = {
        "llama": ["hf:bf16:64:1:0:0"] * 2,
        "qwen2": ["hf:bf16:64:1:0:0"] * 2,
        "gemma2": ["hf:bf16:64:1:1:1", "hf:bf16:64:1:1:0"],  # sliding, then global
    }[name]
    assert (backend.graphs, backend.keys) == (1, want)


def test_argument_errors() -> None:
    m = model("llama", "tl", dtype=torch.float32, device="meta")
    ids = torch.zeros(1, 8, dtype=torch.long, device="meta")
    with pytest.raises(TypeError, match=r"query: dtype torch.float32; the tl kernels run in bfloat16"):
        m(ids, use_cache=False)
    attn = model("llama", "tl", device="meta").model.layers[0].self_attn
    q = torch.empty(1, 4, 8, 64, dtype=BF16, device="meta")
    mask = torch.ones(1, 1, 8, 8, dtype=torch.bool, device="meta")
    with pytest.raises(ValueError, match=r"attention_mask: the tl attention applies the model's"):
        hf.attention_forward(attn, q, q, q, mask)
    attn.train()
    with pytest.raises(ValueError, match=r"dropout: the tl kernels have no attention dropout"):
        hf.attention_forward(attn, q, q, q, None, dropout=0.1)


# ---- numbers: the CPU reference kernels in real model classes -------------------------------------------


@pytest.mark.usefixtures("on_cpu")
@pytest.mark.parametrize(("name", "baseline"), [("llama", "sdpa"), ("qwen2", "sdpa"), ("gemma2", "eager")])
def test_logits_match_transformers_attention(name: str, baseline: str) -> None:
    """Same weights, same tokens: the model on the kernels chosen for its layers against transformers' own
    attention (Gemma 2 against eager: sdpa takes no softcap). Inputs longer than Gemma's window."""
    ids = torch.randint(0, 96, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got = model(name, "tl")(ids, use_cache=False).logits.float()
        want = model(name, baseline)(ids, use_cache=False).logits.float()
    torch.testing.assert_close(got, want, atol=5e-2, rtol=5e-2)


@pytest.mark.usefixtures("on_cpu")
def test_gemma2_window_and_softcap_matter() -> None:
    """The comparison above can tell: dropping the window or the softcap moves the logits past it."""
    ids = torch.randint(0, 96, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model("gemma2", "eager")(ids, use_cache=False).logits.float()
        for override in ({"sliding_window": 4096}, {"attn_logit_softcapping": None}):
            m = model("gemma2", "tl")
            for layer in m.model.layers:
                for attr, value in override.items():
                    name = "sliding_window" if attr == "sliding_window" else "attn_logit_softcapping"
                    if getattr(layer.self_attn, name, None) is not None:
                        setattr(layer.self_attn, name, value)
            got = m(ids, use_cache=False).logits.float()
            assert (got - want).abs().max() > 5e-2, override


@pytest.mark.usefixtures("on_cpu", "provider")
@pytest.mark.parametrize(("name", "baseline"), [("llama", "sdpa"), ("gemma2", "eager")])
def test_gradients_and_training_steps_track_transformers_attention(name: str, baseline: str) -> None:
    """Backward through the seam (the reference provider) inside a real model: the first step's gradients
    match, and the losses of a few AdamW steps track the baseline's."""
    ids = torch.randint(0, 96, (2, 40), generator=torch.Generator().manual_seed(2))
    losses: dict[str, list[float]] = {}
    grads: dict[str, torch.Tensor] = {}
    for attn in ("tl", baseline):
        m = model(name, attn).train()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        losses[attn] = []
        for step in range(4):
            loss = m(ids, labels=ids, use_cache=False).loss
            loss.backward()
            if step == 0:
                grads[attn] = m.model.layers[0].self_attn.q_proj.weight.grad.float().clone()
            opt.step()
            opt.zero_grad()
            losses[attn].append(loss.item())
    scale = grads[baseline].abs().max().item()
    torch.testing.assert_close(grads["tl"], grads[baseline], atol=5e-2 * scale, rtol=5e-2)
    assert losses["tl"][-1] < losses["tl"][0]
    for a, b in zip(losses["tl"], losses[baseline], strict=True):
        assert abs(a - b) < 0.02 * b, (losses["tl"], losses[baseline])
