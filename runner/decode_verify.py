"""Verification of inference kernels against the reference derived from their kernel IR.

A case is a ragged batch: per-sequence cache (key) lengths, empty ones included, and for a packed batch
per-sequence query lengths too. Inputs are poisoned where the kernel must not read: every K/V row past
a sequence's length and every page no sequence owns is NaN, pages are handed out in random order and the
unused block-table entries point at NaN pages; outputs start as NaN, so a row never written fails. Every
element of O and LSE is compared (`runner.verify.compare`, the forward's tolerances), with normal and ×8
inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from kernel_ir.program import CAUSAL_MASK, PLAIN_SCORE, WINDOW_MASKS, Forward
from runner.decode import decode_attention
from runner.decode_reference import inference_reference
from runner.ir_reference import make_side_tensors
from runner.launch import LoadedKernel, torch_dtype
from runner.verify import INPUT_SCALES, TOLERANCES, CaseResult, case_lines, compare


@dataclass(frozen=True)
class InferenceCase:
    heads: int
    heads_kv: int
    seqlen_k: tuple[int, ...]  # per sequence: cache length (decode) or key length (packed batch)
    seqlen_q: tuple[int, ...] = (1,)  # decode: one value for every sequence; packed: per sequence
    num_splits: int | None = None  # None: the kernel's own choice
    label: str = ""

    def __str__(self) -> str:
        sq = self.seqlen_q[0] if len(self.seqlen_q) == 1 else list(self.seqlen_q)
        splits = "auto" if self.num_splits is None else self.num_splits
        return f"H={self.heads}/{self.heads_kv} Sq={sq} Sk={list(self.seqlen_k)} splits={splits}"


@dataclass
class InferenceResult:
    kernel: str
    case: InferenceCase
    cases: list[CaseResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.cases)

    def __str__(self) -> str:
        head = f"{'PASS' if self.passed else 'FAIL'} {self.kernel} [{self.case}]"
        return "\n".join([head, *case_lines(self.cases)])


def make_inputs(
    spec_inference: dict,
    d_qk: int,
    d_v: int,
    case: InferenceCase,
    dtype: torch.dtype,
    device: Any,
    gen: torch.Generator,
    scale: float,
) -> dict[str, Any]:
    """q, k, v and the layout tensors of `case` for a kernel with these inference settings."""
    page = int(spec_inference["page_size"])
    varlen = bool(spec_inference["varlen"])
    lens_k = list(case.seqlen_k)
    batch = len(lens_k)

    def rand(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen, device=device) * scale).to(dtype)

    if varlen:
        lens_q = list(case.seqlen_q)
        cu_q = torch.tensor([0, *itertools_accumulate(lens_q)], dtype=torch.int32, device=device)
        cu_k = torch.tensor([0, *itertools_accumulate(lens_k)], dtype=torch.int32, device=device)
        return {
            "q": rand(sum(lens_q), case.heads, d_qk),
            "k": rand(sum(lens_k), case.heads_kv, d_qk),
            "v": rand(sum(lens_k), case.heads_kv, d_v),
            "cu_seqlens_q": cu_q,
            "cu_seqlens_k": cu_k,
        }
    sq = case.seqlen_q[0]
    out: dict[str, Any] = {
        "q": rand(batch, sq, case.heads, d_qk),
        "cache_seqlens": torch.tensor(lens_k, dtype=torch.int32, device=device),
    }
    if not page:
        rows = max([*lens_k, 1])
        k, v = rand(batch, rows, case.heads_kv, d_qk), rand(batch, rows, case.heads_kv, d_v)
        for b, n in enumerate(lens_k):  # the cache past each length is never read
            k[b, n:] = math.nan
            v[b, n:] = math.nan
        out.update(k=k, v=v)
        return out
    need = [math.ceil(n / page) for n in lens_k]
    max_pages = max([*need, 1]) + 1  # one spare column: entries past a sequence's pages
    spare = 3  # pages no sequence owns: NaN, and what the unused table entries point at
    n_pages = sum(need) + spare
    k = torch.full((n_pages, page, case.heads_kv, d_qk), math.nan, dtype=dtype, device=device)
    v = torch.full((n_pages, page, case.heads_kv, d_v), math.nan, dtype=dtype, device=device)
    order = torch.randperm(n_pages, generator=torch.Generator().manual_seed(int(gen.initial_seed())))
    table = torch.empty(batch, max_pages, dtype=torch.int32)
    it = 0
    for b, n in enumerate(lens_k):
        ids = order[it : it + need[b]]
        it += need[b]
        table[b, : need[b]] = ids.to(torch.int32)
        table[b, need[b] :] = order[sum(need) : sum(need) + 1].to(torch.int32)  # a NaN page
        for j, pid in enumerate(ids.tolist()):
            rows = min(page, n - j * page)
            k[pid, :rows] = rand(rows, case.heads_kv, d_qk)
            v[pid, :rows] = rand(rows, case.heads_kv, d_v)
    out.update(k=k, v=v, block_table=table.to(device))
    return out


def itertools_accumulate(xs: list[int]) -> list[int]:
    total, out = 0, []
    for x in xs:
        total += x
        out.append(total)
    return out


def verify_inference(
    loaded: LoadedKernel,
    case: InferenceCase,
    *,
    seed: int = 0,
    scales: tuple[tuple[str, float], ...] = INPUT_SCALES,
) -> InferenceResult:
    spec = loaded.spec
    assert spec.inference is not None
    program = Forward.from_dict(spec.program) if spec.program else plain_program(spec.mask)
    dtype = torch_dtype(spec.dtype)
    device = torch.device("cuda", loaded.device_id)
    result = InferenceResult(spec.kernel_name, case)
    for label, scale in scales:
        gen = torch.Generator(device=device).manual_seed(seed)
        inp = make_inputs(spec.inference, spec.head_dim_qk, spec.head_dim_v, case, dtype, device, gen, scale)
        batch = len(case.seqlen_k)
        max_sq, max_sk = max((*case.seqlen_q, 0)), max((*case.seqlen_k, 0))
        tensors = make_side_tensors(program, batch, case.heads, case.heads_kv, max_sq, max_sk, device=device,
                                    generator=torch.Generator().manual_seed(seed))  # fmt: skip
        q = inp["q"]
        o = torch.full((*q.shape[:-1], spec.head_dim_v), math.nan, dtype=dtype, device=device)
        varlen = bool(spec.inference["varlen"])
        lse = torch.full((case.heads, q.shape[0]) if varlen else (batch, case.heads, q.shape[1]), math.nan,
                         dtype=torch.float32, device=device)  # fmt: skip
        layout = {n: inp.get(n) for n in ("block_table", "cache_seqlens", "cu_seqlens_q", "cu_seqlens_k")}
        decode_attention(loaded, inp["q"], inp["k"], inp["v"], **layout, num_splits=case.num_splits,
                         extras=tensors, out=(o, lse))  # fmt: skip
        torch.cuda.synchronize()
        ref_o, ref_lse = inference_reference(program, inp["q"], inp["k"], inp["v"], **layout, tensors=tensors)
        if ref_lse is None:
            ref_lse = lse = torch.zeros(1, device=device)
        result.cases.append(compare(o, lse, ref_o, ref_lse, TOLERANCES[spec.dtype], label))
    return result


def plain_program(mask: str) -> Forward:
    """The IR of a plain kernel (its launch spec carries no program): s · scale under its `Mask` header."""
    masks = {"none": (), "causal": (CAUSAL_MASK,), "window": WINDOW_MASKS}[mask]
    return Forward(score=PLAIN_SCORE, masks=masks, header_mask=mask)


def default_cases(spec: Any) -> list[InferenceCase]:
    """What `tl run` checks an inference kernel on: a ragged batch with an empty sequence and lengths
    around the block sizes (per-sequence query lengths for a packed batch; 4 draft rows for a causal
    decode), GQA 32/8 and 7/1, automatic and forced splits."""
    inf = spec.inference or {}
    ragged = (0, 1, 63, 64, 65, 1000, 4097)
    if inf.get("varlen"):
        return [
            InferenceCase(4, 2, ragged, seqlen_q=ragged),
            InferenceCase(7, 1, (129, 300), seqlen_q=(129, 300)),
        ]
    sq = (4,) if spec.mask == "causal" else (1,)
    cases = [InferenceCase(32, 8, ragged, seqlen_q=sq), InferenceCase(7, 1, (17, 300, 0), seqlen_q=sq)]
    if spec.combine_name:
        cases.append(InferenceCase(32, 8, ragged, seqlen_q=sq, num_splits=7))
    return cases
