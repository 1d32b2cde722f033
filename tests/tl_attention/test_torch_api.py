"""tl_attention without a GPU: compile (check + translate), the call's argument errors, the fake kernel on
meta and fake CUDA tensors, torch.compile(fullgraph=True) tracing, and opcheck on meta tensors."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import tl_attention
from pipeline.variants import EXAMPLES
from tl_attention.ops import forward_op

BF16 = torch.bfloat16


def meta(*shape: int, dtype: torch.dtype = BF16, **kw: Any) -> torch.Tensor:
    return torch.empty(*shape, dtype=dtype, device="meta", **kw)


@pytest.fixture(scope="module")
def softcap() -> tl_attention.Kernel:
    return tl_attention.compile("softcap.tl")


@pytest.fixture(scope="module")
def alibi() -> tl_attention.Kernel:
    return tl_attention.compile(EXAMPLES / "variants" / "alibi.tl")


# ---- compile -------------------------------------------------------------------------------------------


def test_compile_takes_a_path_an_example_name_or_text(softcap: tl_attention.Kernel) -> None:
    path = EXAMPLES / "variants" / "softcap.tl"
    by_path = tl_attention.compile(str(path))
    by_text = tl_attention.compile(path.read_text())
    assert softcap.name == by_path.name == by_text.name == "softcap_fwd"
    assert softcap.scalar_names == ["cap"] and softcap.tensor_names == []
    assert by_text.origin == "<TL text>"
    # The same source is one registry entry, whichever way it was named.
    assert tl_attention.compile("softcap.tl") is softcap


def test_compile_retargets_on_request() -> None:
    assert tl_attention.compile("softcap.tl").spec.arch == "sm_90a"
    assert tl_attention.compile("softcap.tl", target="sm_80").spec.arch == "sm_80"


def test_a_tl_with_errors_raises_with_codes_and_locations() -> None:
    text = (EXAMPLES / "mha_fwd.tl").read_text().replace("Compute Softmax S", "Compute Softmax Z")
    with pytest.raises(tl_attention.TLError) as info:
        tl_attention.compile(text)
    err = info.value
    assert isinstance(err, ValueError) and err.diagnostics
    assert all(re.fullmatch(r"TL\d{3}", d.code) for d in err.diagnostics)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "Compute Softmax Z" in t)
    assert re.search(rf"inline\.tl:{line}:\d+: error TL\d{{3}}: ", str(err)), str(err)


def test_a_missing_file_is_named() -> None:
    with pytest.raises(FileNotFoundError, match=r"nope\.tl"):
        tl_attention.compile("nope.tl")


def test_without_a_device_compile_stops_after_translation(softcap: tl_attention.Kernel) -> None:
    if torch.cuda.is_available():
        pytest.skip("a device is visible: compile loads the kernel at once")
    assert softcap._loaded == {}


def test_device_family() -> None:
    archs = ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100")
    assert [tl_attention.device_family(a) for a in archs] == [
        "sm_75", "sm_80", "sm_80", "sm_80", "sm_90", "sm_80",
    ]  # fmt: skip


# ---- argument errors, before any launch -----------------------------------------------------------------


def _call(kernel: tl_attention.Kernel, **over: Any) -> Any:
    args: dict[str, Any] = {"q": meta(2, 8, 64, 128), "k": meta(2, 2, 80, 128), "v": meta(2, 2, 80, 128)}
    args.update(over)
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
    return kernel(q, k, v, **args)


BAD_CALLS: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    (
        "dtype",
        {"q": meta(2, 8, 64, 128, dtype=torch.float16)},
        TypeError,
        r"q: dtype torch.float16.*bfloat16",
    ),
    ("float32", {"v": meta(2, 2, 80, 128, dtype=torch.float32)}, TypeError, r"v: dtype torch.float32"),
    ("not a tensor", {"k": [1, 2]}, TypeError, r"k: expected a torch.Tensor, got list"),
    (
        "cpu",
        {"q": torch.empty(2, 8, 64, 128, dtype=BF16)},
        ValueError,
        r"q: tensor is on cpu, expected a CUDA",
    ),
    ("rank", {"q": meta(8, 64, 128)}, ValueError, r"q: expected 4 dims \(batch, heads, seqlen, dim\)"),
    ("head dim", {"k": meta(2, 2, 80, 64), "v": meta(2, 2, 80, 64)}, ValueError, r"k: head dim 64.*128"),
    (
        "gqa",
        {"k": meta(2, 3, 80, 128), "v": meta(2, 3, 80, 128)},
        ValueError,
        r"3 key/value head\(s\) do not",
    ),
    ("batch", {"k": meta(1, 2, 80, 128)}, ValueError, r"k, v: batch sizes"),
    ("kv seqlen", {"v": meta(2, 2, 81, 128)}, ValueError, r"k, v: \(seqlen, heads\) differ"),
    ("layout", {"layout": "sbhd"}, ValueError, r"layout: expected 'bhsd'"),
    ("scale sign", {"scale": -1.0}, ValueError, r"scale: expected a positive"),
    ("scale type", {"scale": "0.1"}, TypeError, r"scale: expected a float"),
    ("unknown", {"softcap": 30.0}, TypeError, r"unexpected keyword argument\(s\) 'softcap'.*takes cap"),
    ("scalar type", {"cap": "30"}, TypeError, r"cap: the kernel's Scalar cap takes a number"),
    ("window", {"window": (4, 0)}, TypeError, r"window: softcap_fwd has `Mask none`"),
]


@pytest.mark.parametrize(("over", "exc", "match"), [c[1:] for c in BAD_CALLS], ids=[c[0] for c in BAD_CALLS])
def test_bad_arguments_name_the_argument(
    softcap: tl_attention.Kernel, over: dict[str, Any], exc: type[Exception], match: str
) -> None:
    with pytest.raises(exc, match=match):
        _call(softcap, **over)


def test_side_tensor_errors(alibi: tl_attention.Kernel) -> None:
    with pytest.raises(TypeError, match=r"slopes: missing side tensor \(float32, dims \('heads',\)\)"):
        _call(alibi)
    with pytest.raises(ValueError, match=r"slopes: shape \(4,\), expected \(8,\)"):
        _call(alibi, slopes=meta(4, dtype=torch.float32))
    with pytest.raises(
        TypeError, match=r"slopes: dtype torch.bfloat16, the kernel declares it torch.float32"
    ):
        _call(alibi, slopes=meta(8))
    assert _call(alibi, slopes=meta(8, dtype=torch.float32)).shape == (2, 8, 64, 128)


def test_int_scalars_must_be_integers() -> None:
    window = tl_attention.compile("sliding_window.tl")
    with pytest.raises(TypeError, match=r"window_size: the kernel's Scalar window_size is an integer"):
        _call(window, window_size=10.5)
    assert _call(window, window_size=100).shape == (2, 8, 64, 128)


def test_return_lse_needs_a_softmax() -> None:
    sigmoid = tl_attention.compile("sigmoid_attention.tl")
    with pytest.raises(ValueError, match=r"return_lse: sigmoid_attention_fwd has no softmax"):
        _call(sigmoid, return_lse=True)


# ---- shapes: meta tensors and fake CUDA tensors ---------------------------------------------------------


def test_layouts_and_gqa_on_meta_tensors(softcap: tl_attention.Kernel) -> None:
    o, lse = softcap(meta(2, 8, 64, 128), meta(2, 2, 80, 128), meta(2, 2, 80, 128), return_lse=True)
    assert o.shape == (2, 8, 64, 128) and lse.shape == (2, 8, 64) and lse.dtype == torch.float32
    o = softcap(meta(2, 64, 8, 128), meta(2, 80, 2, 128), meta(2, 80, 2, 128), layout="bshd", cap=50.0)
    assert o.shape == (2, 64, 8, 128) and o.is_contiguous()


def test_fake_cuda_tensors(softcap: tl_attention.Kernel) -> None:
    with FakeTensorMode():
        q = torch.empty(1, 4, 32, 128, dtype=BF16, device="cuda")
        kv = torch.empty(1, 2, 32, 128, dtype=BF16, device="cuda")
        o = softcap(q, kv, kv)
    assert o.device.type == "cuda" and o.shape == (1, 4, 32, 128)


# ---- torch.compile and opcheck --------------------------------------------------------------------------


class OpCounter:
    """A torch.compile backend that counts the tl_attention ops in the captured graph and runs it as is."""

    def __init__(self) -> None:
        self.graphs = 0
        self.ops = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        self.graphs += 1
        self.ops += sum(n.target is torch.ops.tl_attention.forward.default for n in gm.graph.nodes)
        return gm.forward


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_torch_compile_fullgraph_traces_the_op(softcap: tl_attention.Kernel, layout: str) -> None:
    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return softcap(q, k, v, layout=layout, cap=50.0, scale=0.1).float().sum(-1)

    counter = OpCounter()
    compiled = torch.compile(attend, fullgraph=True, backend=counter)
    shape = (2, 8, 64, 128) if layout == "bhsd" else (2, 64, 8, 128)
    out = compiled(meta(*shape), meta(*shape), meta(*shape))
    assert out.shape == shape[:3]
    assert (counter.graphs, counter.ops) == (1, 1)


def test_opcheck_on_meta_tensors(softcap: tl_attention.Kernel, alibi: tl_attention.Kernel) -> None:
    q, k = meta(2, 64, 8, 128, requires_grad=True), meta(2, 80, 2, 128, requires_grad=True)
    v = meta(2, 80, 2, 128, requires_grad=True)
    torch.library.opcheck(forward_op, (softcap.key, q, k, v, 0.1, [-1, -1], [], [30.0]))
    slopes = meta(8, dtype=torch.float32, requires_grad=True)
    torch.library.opcheck(forward_op, (alibi.key, q, k, v, 0.1, [-1, -1], [slopes], []))
