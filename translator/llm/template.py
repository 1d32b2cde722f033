"""The offline generator's template: the attention forward kernel all bundled examples share.

MHA, GQA, MQA and MLA differ only in their header Params and head-dimension names; causal and sliding
window only in `Mask`. The template renders a *sketch* (tiles and tuning Params left as `?` and untiled
copies), which the planner then fills, exactly as the LLM's two stages would.
"""

from __future__ import annotations

from translator.llm.request import Request

_BODY = """\
Allocate Q in global (seqlen_q, {dqk}) with offset q_offset
Allocate K in global (seqlen_k, {dqk}) with offset kv_offset
Allocate V in global (seqlen_k, {dv}) with offset kv_offset
Allocate O in global (seqlen_q, {dv}) with offset o_offset

Copy Q in coordinate [L = block_m] from global to shared
Copy Q from shared to register
Allocate S in register (BM, BN)
Allocate acc_o in register (BM, {dv})
for j = 0: seqlen_k / BN
    Copy K in coordinate [L = j] from global to shared
    Copy K from shared to register
    Compute GEMM Q, K and get S                 # S = Q·Kᵀ
    Compute Multiply S, scale and get new S
    Compute Softmax S                           # running row max and sum; rescales acc_o
    Reshape S from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_N_new)
    Copy V in coordinate [L = j] from global to shared
    Copy V from shared to register
    Compute GEMM S, V and accumulate acc_o      # acc_o += P·V
end
Compute Divide acc_o, rowsum and get new acc_o
Copy acc_o in coordinate [L = block_m] from register to global as O
"""

_VARIANT = {
    "mha": "multi-head attention",
    "gqa": "grouped-query attention",
    "mqa": "multi-query attention",
    "mla": "MLA-shaped attention",
}


def render_sketch(r: Request) -> str:
    mask = {"none": "non-causal", "causal": "causal"}.get(r.mask, f"mask {r.mask}")
    dims = f"head dim {r.d_qk}" if r.d_qk == r.d_v else f"head dims {r.d_qk}/{r.d_v}"
    lines = [
        f"# {_VARIANT[r.variant][0].upper()}{_VARIANT[r.variant][1:]} forward ({mask}, {r.dtype}, {dims}), "
        "generated offline from the request:",
        f"#   {' '.join(r.text.split())}",
        f"Kernel {r.kernel_name}",
        f"Target {r.arch}",
        f"Dtype {r.dtype}",
        "Param BM = ?         # query rows per thread block",
        "Param BN = ?         # key/value rows per loop iteration",
    ]
    if r.d_qk == r.d_v:
        lines.append(f"Param d = {r.d_qk:<11}# head dimension of Q, K and V")
        dqk = dv = "d"
    else:
        lines.append(f"Param d_qk = {r.d_qk:<8}# head dimension of Q and K")
        lines.append(f"Param d_v = {r.d_v:<9}# head dimension of V and O")
        dqk, dv = "d_qk", "d_v"
    lines += [
        "Param warps = ?      # each warp owns BM / warps query rows",
        "Param stages = ?     # shared-memory buffers for the K/V pipeline",
    ]
    if r.variant == "gqa":
        lines.append(f"Param group = {r.group:<7}# query heads per key/value head (GQA)")
    elif r.variant == "mqa":
        lines.append("Param heads_kv = 1   # one key/value head for all query heads (MQA)")
    lines.append(f"Mask {r.mask}")
    return "\n".join(lines) + "\n\n" + _BODY.format(dqk=dqk, dv=dv)
