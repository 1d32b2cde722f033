"""The float32 reference against torch SDPA (no mask, square causal) and a naive per-row loop."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from runner.reference import allowed_mask, attention_reference  # noqa: E402


def naive(q, k, v, mask, window, scale):
    """Row by row, key by key: the definition, no vectorisation to get wrong."""
    b, sq, h, _ = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    group = h // hkv
    out = torch.zeros(b, sq, h, v.shape[3], dtype=torch.float64)
    lse = torch.full((b, h, sq), math.inf, dtype=torch.float64)
    for bi in range(b):
        for hi in range(h):
            for i in range(sq):
                diag = i + sk - sq
                keys = []
                for j in range(sk):
                    if mask == "causal" and j > diag:
                        continue
                    if mask == "window":
                        if window[0] >= 0 and j < diag - window[0]:
                            continue
                        if window[1] >= 0 and j > diag + window[1]:
                            continue
                    keys.append(j)
                if not keys:
                    continue
                kk = k[bi, keys, hi // group].double()
                s = (kk @ q[bi, i, hi].double()) * scale
                m = s.max()
                p = torch.exp(s - m)
                out[bi, i, hi] = (p / p.sum()) @ v[bi, keys, hi // group].double()
                lse[bi, hi, i] = m + torch.log(p.sum())
    return out, lse


def rand(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


@pytest.mark.parametrize("causal", [False, True])
def test_matches_sdpa_mha(causal):
    q, k, v = rand(2, 33, 4, 16, seed=0), rand(2, 33, 4, 16, seed=1), rand(2, 33, 4, 16, seed=2)
    o, lse = attention_reference(q, k, v, mask="causal" if causal else "none")
    want = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal
    ).transpose(1, 2)
    torch.testing.assert_close(o, want, atol=1e-5, rtol=1e-5)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) / 4.0
    if causal:
        s = s.masked_fill(torch.ones(33, 33, dtype=torch.bool).triu(1), -math.inf)
    torch.testing.assert_close(lse, torch.logsumexp(s, -1), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("mask", "window", "sq", "sk"),
    [
        ("none", (-1, -1), 5, 9),
        ("causal", (-1, -1), 5, 9),  # bottom-right: row 0 sees keys 0..4
        ("causal", (-1, -1), 9, 5),  # more queries than keys: the first 4 rows see nothing
        ("window", (2, 1), 7, 7),
        ("window", (3, -1), 6, 10),
        ("window", (-1, 0), 10, 6),
        ("window", (0, 0), 4, 4),
    ],
)
def test_matches_naive_loop_gqa(mask, window, sq, sk):
    q, k, v = rand(1, sq, 4, 8, seed=3), rand(1, sk, 2, 8, seed=4), rand(1, sk, 2, 6, seed=5)
    o, lse = attention_reference(q, k, v, mask=mask, window=window, softmax_scale=0.3, chunk=3)
    want_o, want_lse = naive(q, k, v, mask, window, 0.3)
    torch.testing.assert_close(o.double(), want_o, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse.double(), want_lse, atol=1e-5, rtol=1e-5)


def test_rows_without_keys_are_zero_with_infinite_lse():
    q, k, v = rand(1, 6, 1, 8, seed=6), rand(1, 2, 1, 8, seed=7), rand(1, 2, 1, 8, seed=8)
    o, lse = attention_reference(q, k, v, mask="causal")
    assert torch.equal(o[0, :4], torch.zeros(4, 1, 8))
    assert torch.isposinf(lse[0, 0, :4]).all() and torch.isfinite(lse[0, 0, 4:]).all()


def test_allowed_mask_bottom_right():
    m = allowed_mask(2, 4, "causal")
    assert m.tolist() == [[True, True, True, False], [True, True, True, True]]
    assert allowed_mask(3, 3, "none") is None
    with pytest.raises(ValueError, match="unknown mask"):
        allowed_mask(3, 3, "diagonal")
