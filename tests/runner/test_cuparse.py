"""Entry point and ABI checks of hand-edited CUDA, on generated-like sources."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.abi import ATTENTION_PARAMS, LaunchSpec
from runner.cuparse import (
    CuParseError,
    _scan_entries,
    check_abi,
    find_entry_point,
    find_entry_points,
    load_cuda_file,
)

NAIVE = (Path(__file__).parent / "data" / "naive_attention.cu").read_text()


def abi_signature(name: str = "mha_fwd", params: list[str] | None = None) -> str:
    params = params or [f"{ctype} {pname}" for pname, ctype, _ in ATTENTION_PARAMS]
    return ",\n    ".join(params).join(
        [f'extern "C" __global__ void __launch_bounds__(128, 1) {name}(\n    ', ")"]
    )


# Template-heavy CuTe-like code around the entry point, as the translator emits it.
GENERATED = """\
// Generated from mha_fwd.tl by tl build
#include <cute/tensor.hpp>
using namespace cute;
template <class Element, int kBlockM, int kHeadDim>
struct Traits {
  using SmemLayoutQ = decltype(composition(Swizzle<3, 3, 3>{},
                                           Layout<Shape<Int<8>, Int<64>>, Stride<Int<64>, _1>>{}));
  static constexpr int kSmem = int(cosize(SmemLayoutQ{})) * sizeof(Element);
};
{SIG} {
  extern __shared__ char smem[];
  auto tile = local_tile(make_tensor(make_gmem_ptr((half_t const*)q), make_shape(seqlen_q, Int<128>{})),
                         Shape<Int<128>, Int<128>>{}, make_coord(blockIdx.x, 0));
}
"""


def test_naive_kernel_entry_point_matches_abi():
    entry = find_entry_point(NAIVE)
    assert entry.name == "naive_attention" and entry.via == "tree-sitter"
    assert [p.name for p in entry.params][:5] == ["q_ptr", "k_ptr", "v_ptr", "o_ptr", "lse_ptr"]
    assert [p.name for p in entry.params][5:] == [p[0] for p in ATTENTION_PARAMS][5:]
    assert entry.params[0].type == "const void*" and entry.params[10].type == "long long"
    check_abi(entry)


def test_generated_like_source_with_template_noise():
    src = GENERATED.replace("{SIG}", abi_signature())
    entry = find_entry_point(src, "mha_fwd")
    assert entry.name == "mha_fwd" and len(entry.params) == len(ATTENTION_PARAMS)
    check_abi(entry)


def test_typed_pointers_restrict_and_aliases_are_accepted():
    params = [f"{ctype} {pname}" for pname, ctype, _ in ATTENTION_PARAMS]
    params[0] = "cute::half_t const* __restrict__ q"
    params[5] = "int32_t batch"
    params[10] = "int64_t q_batch_stride"
    params[22] = "const float softmax_scale"
    check_abi(find_entry_point(abi_signature(params=params) + "{}"))


def test_wrong_type_names_the_parameter():
    params = [f"{ctype} {pname}" for pname, ctype, _ in ATTENTION_PARAMS]
    params[11] = "int q_row_stride"
    src = abi_signature(params=params) + "{}"
    with pytest.raises(CuParseError) as info:
        check_abi(find_entry_point(src), path="k.cu")
    msg = str(info.value)
    assert "parameter 12" in msg and "`int q_row_stride`" in msg and "long long q_row_stride" in msg
    assert info.value.line == 13


def test_missing_and_extra_parameters():
    params = [f"{ctype} {pname}" for pname, ctype, _ in ATTENTION_PARAMS]
    with pytest.raises(CuParseError, match="missing `int window_right`"):
        check_abi(find_entry_point(abi_signature(params=params[:-1]) + "{}"))
    with pytest.raises(CuParseError, match="remove `int extra`"):
        check_abi(find_entry_point(abi_signature(params=[*params, "int extra"]) + "{}"))


def test_no_entry_point_and_several_entry_points():
    with pytest.raises(CuParseError, match='no `extern "C" __global__`'):
        find_entry_point("__global__ void k(int a) {}")
    two = abi_signature("a") + "{}\n" + abi_signature("b") + "{}\n"
    with pytest.raises(CuParseError, match="several"):
        find_entry_point(two)
    assert find_entry_point(two, "b").name == "b"
    with pytest.raises(CuParseError, match="names `mha_fwd`"):
        find_entry_point(abi_signature("renamed") + "{}", "mha_fwd")


def test_extern_c_block_form():
    src = 'extern "C" {\n' + abi_signature().replace('extern "C" ', "") + "{}\n}\n"
    assert [e.name for e in find_entry_points(src)] == ["mha_fwd"]


def test_text_scan_fallback_agrees_with_tree_sitter():
    scanned = _scan_entries(NAIVE)
    parsed = find_entry_point(NAIVE)
    assert len(scanned) == 1 and scanned[0].name == parsed.name
    assert [(p.name, p.type) for p in scanned[0].params] == [(p.name, p.type) for p in parsed.params]
    check_abi(scanned[0])


def test_load_cuda_file_reads_launch_json(tmp_path):
    cu = tmp_path / "k.cu"
    cu.write_text(NAIVE)
    with pytest.raises(CuParseError, match=r"no launch description k\.launch\.json"):
        load_cuda_file(cu)
    spec = LaunchSpec(
        kernel_name="naive_attention",
        block_m=128,
        threads=128,
        shared_bytes=0,
        dtype="fp16",
        head_dim_qk=64,
        head_dim_v=64,
        mask="none",
        arch="sm_80",
    )
    (tmp_path / "k.launch.json").write_text(spec.to_json())
    source, loaded, entry = load_cuda_file(cu)
    assert loaded == spec and entry.name == "naive_attention" and source == NAIVE


# ---- the sm_90 path: four TMA descriptors after the attention ABI ---------------------------------------


def tma_spec(**kw: object) -> LaunchSpec:
    from runner.abi import TMA_PARAMS

    base = dict(
        kernel_name="mha_fwd", block_m=128, threads=384, shared_bytes=200_000, dtype="bf16", head_dim_qk=128,
        head_dim_v=128, mask="none", arch="sm_90a", block_n=128,
        params=tuple(p[0] for p in ATTENTION_PARAMS) + TMA_PARAMS,
    )
    return LaunchSpec(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "ctype", ["const __grid_constant__ cute::TmaDescriptor", "const __grid_constant__ CUtensorMap"]
)
def test_tma_descriptors_are_accepted_when_the_spec_lists_them(ctype: str) -> None:
    params = [f"{c} {n}" for n, c, _ in ATTENTION_PARAMS] + [f"{ctype} tma_{x}" for x in "qkvo"]
    src = GENERATED.replace("{SIG}", abi_signature(params=params))
    for entry in (find_entry_point(src), _scan_entries(src)[0]):
        check_abi(entry, spec=tma_spec())
        with pytest.raises(CuParseError, match="remove `const __grid_constant__"):
            check_abi(entry)  # an sm_80 spec: the descriptors are extra parameters
    short = GENERATED.replace("{SIG}", abi_signature(params=params[:-1]))
    with pytest.raises(CuParseError, match="missing `const __grid_constant__ cute::TmaDescriptor tma_o`"):
        check_abi(find_entry_point(short), spec=tma_spec())
    wrong = GENERATED.replace("{SIG}", abi_signature(params=[*params[:-1], "const void* tma_o"]))
    with pytest.raises(CuParseError, match="tensormap, got pointer"):
        check_abi(find_entry_point(wrong), spec=tma_spec())


def test_generated_sm90_kernel_and_its_spec_load(tmp_path: Path) -> None:
    from tl_language import analyze
    from translator.backends import backend_for
    from translator.plan import make_plan

    text = (Path(__file__).parents[2] / "examples" / "mha_fwd.tl").read_text().replace("sm_80", "sm_90")
    plan = make_plan(analyze(text).model, text)
    source, _, spec = backend_for(plan)(plan, tl_file="mha_fwd.tl")
    (tmp_path / "mha_fwd.cu").write_text(source)
    (tmp_path / "mha_fwd.launch.json").write_text(spec.to_json())
    _, loaded_spec, entry = load_cuda_file(tmp_path / "mha_fwd.cu")
    assert loaded_spec == spec and loaded_spec.uses_tma
    assert len(entry.params) == len(ATTENTION_PARAMS) + 4


def test_generated_sm90_packed_prefill_and_its_spec_load(tmp_path: Path) -> None:
    """The wgmma packed prefill takes the inference ABI, then the four TMA descriptors."""
    from pipeline.build import translate_text
    from runner.abi import INFERENCE_PARAMS

    path = Path(__file__).parents[2] / "examples" / "inference" / "varlen_prefill.tl"
    t = translate_text(path.read_text().replace("Target sm_80", "Target sm_90"), Path("varlen_prefill.tl"))
    (tmp_path / "varlen_prefill.cu").write_text(t.source)
    (tmp_path / "varlen_prefill.launch.json").write_text(t.spec.to_json())
    _, loaded_spec, entry = load_cuda_file(tmp_path / "varlen_prefill.cu")
    assert loaded_spec == t.spec and loaded_spec.uses_tma
    assert [p.name for p in entry.params] == [p[0] for p in INFERENCE_PARAMS] + [f"tma_{x}" for x in "qkvo"]
