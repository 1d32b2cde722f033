"""The sm_90 forward's shared layouts, wgmma operands, identity partitions and O's stmatrix written out
(`translator/backends/sm90/emit.py`, `_smem_layout`, `_desc_layouts`, `_coord_layout`, `_stsm_o`): the
shared tiles' layouts (tile_to_shape's, as types), the GMMA descriptors of Q, K and Vᵀ, the accumulator
shapes and layouts (P's as acc_to_A's), the (row, col)s of S and O (thrfrg_C's layout, sliced by
`tl::partition_C`) and O's stmatrix partitions the kernel builds without CuTe's `tile_to_shape`,
`partition_fragment_A / _B / _C`, `thrfrg_C`, `acc_to_A` and `make_tiled_copy_C` / `partition_D` /
`retile_S`, checked on the host against what those give for every consumer warp group and thread, at
tile shapes that reach each mode of the layouts."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pipeline.build import translate_text
from translator.backends.sm90.gmma import atom_definitions, pv_atom, qk_atom

ROOT = Path(__file__).resolve().parents[2]
HOPPER = ROOT / "examples" / "hopper_mha_fwd.tl"
NVCC = "/usr/local/cuda/bin/nvcc"

# Param sets of hopper_mha_fwd.tl: BN 160 and d 128 (the example: two 64-column blocks, an extended
# atom), one consumer (two 64-row wgmma tiles a warp group), three consumers at d 64 (one block), d 256
# with one stage, a 16-row key tile (one k16 slice of Vᵀ), three stages of 176 keys, fp16.
CONFIGS: dict[str, dict[str, int | str]] = {
    "example": {},
    "one_consumer": {"BM": 128, "consumers": 1, "pingpong": 0},
    "three_consumers": {"BM": 192, "consumers": 3, "d": 64, "BN": 128},
    "d256": {"BN": 64, "d": 256, "stages": 1},
    "bn16": {"BN": 16},
    "bn176_three_stages": {"BN": 176, "d": 64, "stages": 3},
    "fp16": {"dtype": "fp16"},
}

_TENSOR = re.compile(
    r"Tensor (tSrQ|tSrK|tOrV) = make_tensor\(GMMA::DescriptorIterator\{"
    r"tl::gmma_desc<GMMA::LayoutType::B128>\("
    r"(.+?), (\d+), (\d+)\)\},\s*Traits::(DescLayout\w+)\{\}\);"
)


def _source(params: dict[str, int | str]) -> str:
    text = HOPPER.read_text()
    for key, value in params.items():
        pattern = r"Dtype \w+" if key == "dtype" else rf"Param {key} = \d+"
        text, n = re.subn(pattern, f"Dtype {value}" if key == "dtype" else f"Param {key} = {value}", text)
        assert n == 1, key
    source = translate_text(text, Path(HOPPER.name)).source
    return "\n".join(line for line in source.splitlines() if not line.startswith("#line"))


def _descriptors(source: str) -> dict[str, tuple[str, str, str, str]]:
    """{tensor: (start pointer, lbo, sbo, layout)} of the emitted descriptor tensors."""
    found = {m.group(1): m.groups()[1:] for m in _TENSOR.finditer(source)}
    assert set(found) == {"tSrQ", "tSrK", "tOrV"}, found
    return found


def test_the_forward_builds_its_operand_descriptors_without_partitions():
    source = _source({})
    code = re.sub(r"//.*", "", source)
    assert "partition_fragment_" not in code and "get_thread_slice(consumer_wg" not in code
    assert "make_tiled_copy_C" not in code and "partition_D" not in code  # O's stmatrix written out
    assert ".partition_C(" not in code  # the identity partitions on the traits' thrfrg_C layouts
    desc = _descriptors(source)
    assert desc["tSrQ"][0] == "smem_q + consumer_wg % Traits::kConsumers * 64 * kBoxCols"
    assert desc["tOrV"][1:3] == ("1280", "64")  # Vᵀ: from one 64-column block of V to the next, 160 rows on
    assert "using AccShapeS = Shape<Shape<_2, _2, Int<kBlockN / 8>>, _1, _1>;" in source


_HOST = r"""
namespace tl {
using namespace cute;
GMMA_DESC
}  // namespace tl

template <class Traits>
int check(char const* name) {
  using Element = typename Traits::Element;
  constexpr int kBoxCols = Traits::kBoxCols;
  static Element smem[1 << 17];
  Element *smem_q = smem, *smem_k = smem, *smem_v = smem;
  typename Traits::TiledMmaQK tiled_mma_qk;
  typename Traits::TiledMmaPV tiled_mma_pv;
  Tensor sQ = make_tensor(make_smem_ptr(smem), typename Traits::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(smem), typename Traits::SmemLayoutK{});
  Tensor sV = make_tensor(make_smem_ptr(smem), typename Traits::SmemLayoutV{});
  Tensor sVt = make_tensor(make_smem_ptr(smem), typename Traits::SmemLayoutVt{});
  // The shared tiles' layouts as written against tile_to_shape's and Vᵀ's composition
  using Atom = GMMA::Layout_K_SW128_Atom<Element>;
  constexpr int kM = Traits::kBlockM, kN = Traits::kBlockN, kS = Traits::kStages;
  constexpr int kDq = Traits::kHeadDimQK, kDv = Traits::kHeadDimV;
  using SmemQ = decltype(tile_to_shape(Atom{}, Shape<Int<kM>, Int<kDq>>{}));
  using SmemK = decltype(tile_to_shape(Atom{}, Shape<Int<kN>, Int<kDq>, Int<kS>>{}));
  using SmemV = decltype(tile_to_shape(Atom{}, Shape<Int<kN>, Int<kDv>, Int<kS>>{}));
  using SmemVt = decltype(composition(SmemV{}, make_ordered_layout(
      Shape<Int<kDv>, Int<kN>, Int<kS>>{}, Step<_2, _1, _3>{})));
  using SmemO = decltype(tile_to_shape(Atom{}, Shape<Int<kM>, Int<kDv>>{}));
  static_assert(std::is_same_v<SmemQ, typename Traits::SmemLayoutQ>);
  static_assert(std::is_same_v<SmemK, typename Traits::SmemLayoutK>);
  static_assert(std::is_same_v<SmemV, typename Traits::SmemLayoutV>);
  static_assert(std::is_same_v<SmemVt, typename Traits::SmemLayoutVt>);
  static_assert(std::is_same_v<SmemO, typename Traits::SmemLayoutO>);
  int bad = 0;
  auto same = [&](char const* what, auto const& cute_frag, auto const& ours, Element* cute_ptr,
                  Element* our_ptr, uint64_t our_desc) {
    bool ok = std::is_same_v<remove_cvref_t<decltype(cute_frag.layout())>, remove_cvref_t<decltype(ours)>>
        && cute_ptr == our_ptr
        && cute_frag.data().desc_.desc_ == our_desc;
    if (!ok) {
      printf("%s %s: CuTe ", name, what); print(cute_frag.layout());
      printf(" %016llx +%ld, ours ", (unsigned long long)cute_frag.data().desc_.desc_, long(cute_ptr - smem));
      print(ours); printf(" %016llx +%ld\n", (unsigned long long)our_desc, long(our_ptr - smem));
    }
    bad += !ok;
  };
  for (int consumer_wg = 0; consumer_wg < Traits::kConsumers; ++consumer_wg) {
    auto wg_mma_qk = tiled_mma_qk.get_thread_slice(consumer_wg * 128);
    auto wg_mma_pv = tiled_mma_pv.get_thread_slice(consumer_wg * 128);
    same("Q", wg_mma_qk.partition_fragment_A(sQ), typename Traits::LAYOUT_Q{},
         raw_pointer_cast(wg_mma_qk.partition_A(sQ).data()), PTR_Q,
         tl::gmma_desc<GMMA::LayoutType::B128>(PTR_Q, ARGS_Q).desc_);
    same("K", wg_mma_qk.partition_fragment_B(sK), typename Traits::LAYOUT_K{},
         raw_pointer_cast(wg_mma_qk.partition_B(sK).data()), PTR_K,
         tl::gmma_desc<GMMA::LayoutType::B128>(PTR_K, ARGS_K).desc_);
    same("Vt", wg_mma_pv.partition_fragment_B(sVt), typename Traits::LAYOUT_V{},
         raw_pointer_cast(wg_mma_pv.partition_B(sVt).data()), PTR_V,
         tl::gmma_desc<GMMA::LayoutType::B128>(PTR_V, ARGS_V).desc_);
  }
  // The identity tensors' partitions (tScS, tOcO): thrfrg_C's layout as written, and for every consumer
  // thread tl::partition_C's slice of it the type and (row, col) of CuTe's partition_C
  constexpr int kBlockM_ = Traits::kBlockM, kBlockN_ = Traits::kBlockN, kHeadDimV_ = Traits::kHeadDimV;
  auto id_s = make_identity_tensor(Shape<Int<kBlockM_>, Int<kBlockN_>>{});
  auto id_o = make_identity_tensor(Shape<Int<kBlockM_>, Int<kHeadDimV_>>{});
  using CuteS = decltype(tiled_mma_qk.thrfrg_C(id_s.layout()));
  using CuteO = decltype(tiled_mma_pv.thrfrg_C(id_o.layout()));
  static_assert(std::is_same_v<CuteS, typename Traits::CoordLayoutS>);
  static_assert(std::is_same_v<CuteO, typename Traits::CoordLayoutO>);
  for (int ctid = 0; ctid < Traits::kConsumerThreads; ++ctid) {
    auto thr_qk = tiled_mma_qk.get_thread_slice(ctid);
    auto thr_pv = tiled_mma_pv.get_thread_slice(ctid);
    auto cute_s = thr_qk.partition_C(id_s);
    auto cute_o = thr_pv.partition_C(id_o);
    auto ours_s = tl::partition_C(thr_qk, id_s, typename Traits::CoordLayoutS{});
    auto ours_o = tl::partition_C(thr_pv, id_o, typename Traits::CoordLayoutO{});
    static_assert(std::is_same_v<decltype(cute_s), decltype(ours_s)>);
    static_assert(std::is_same_v<decltype(cute_o), decltype(ours_o)>);
    bool ok = *cute_s.data() == *ours_s.data() && *cute_o.data() == *ours_o.data();
    if (!ok && bad < 8) {
      printf("%s (row, col)s of thread %d: CuTe ", name, ctid); print(cute_s.data()); print(cute_o.data());
      printf(", ours "); print(ours_s.data()); print(ours_o.data()); printf("\n");
    }
    bad += !ok;
  }
  // STSM: O's stmatrix, every consumer thread's partition_D of sO and retile_S of its registers
  auto stsm = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, tiled_mma_pv);
  Tensor sO = make_tensor(make_smem_ptr(smem), typename Traits::SmemLayoutO{});
  Tensor rO = make_tensor<Element>(typename Traits::AccShapeO{});
  for (int ctid = 0; ctid < Traits::kConsumerThreads; ++ctid) {
    auto thr = stsm.get_thread_slice(ctid);
    Tensor cute_d = thr.partition_D(sO);
    Tensor cute_s = thr.retile_S(rO);
    O_OFFSET
    Tensor tOsO = make_tensor(sO.data() + o_offset, typename Traits::StsmLayoutO{});
    Tensor tOrO = make_tensor(rO.data(), typename Traits::StsmLayoutR{});
    bool ok = cute_d.data() == tOsO.data() && cute_s.data() == tOrO.data()
        && std::is_same_v<remove_cvref_t<decltype(cute_d.layout())>, typename Traits::StsmLayoutO>
        && std::is_same_v<remove_cvref_t<decltype(cute_s.layout())>, typename Traits::StsmLayoutR>;
    if (!ok && bad < 8) {
      printf("%s stmatrix of thread %d: CuTe ", name, ctid); print(cute_d); print(cute_s.layout());
      printf(", ours "); print(tOsO); print(tOrO.layout()); printf("\n");
    }
    bad += !ok;
  }
  // END STSM
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kHeadDimV = Traits::kHeadDimV;
  using S = decltype(partition_fragment_C(tiled_mma_qk, Shape<Int<kBlockM>, Int<kBlockN>>{}));
  using O = decltype(partition_fragment_C(tiled_mma_pv, Shape<Int<kBlockM>, Int<kHeadDimV>>{}));
  bool acc = std::is_same_v<S, decltype(make_tensor<float>(typename Traits::AccShapeS{}))>
      && std::is_same_v<O, decltype(make_tensor<float>(typename Traits::AccShapeO{}))>;
  acc = acc && std::is_same_v<S, decltype(make_tensor<float>(typename Traits::AccLayoutS{}))>
      && std::is_same_v<O, decltype(make_tensor<float>(typename Traits::AccLayoutO{}))>;
  using P = decltype(tl::acc_to_A(typename Traits::AccLayoutS{}));
  static_assert(std::is_same_v<P, typename Traits::PLayoutA>);
  if (!acc) printf("%s: accumulator shapes differ\n", name);
  return bad + !acc;
}
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None and not Path(NVCC).exists(), reason="needs nvcc")
def test_operand_descriptors_and_accumulators_match_cute_partitions(tmp_path):
    """Every config's traits (renamed apart) in one host program: for each consumer warp group, CuTe's
    partition_fragment_A / _B of Q, K (every stage) and Vᵀ have the emitted layout type, start at the
    emitted pointer and hold the emitted descriptor bits (the start address reads 0 on the host for both);
    partition_fragment_C's types are those of the emitted accumulator shapes."""
    import cutlass_library

    parts, calls, atoms, gmma_desc = [], [], set(), ""
    for name, params in CONFIGS.items():
        source = _source(params)
        traits = re.search(r"struct (\w+_traits) \{", source)
        assert traits
        dtype = "fp16" if "using Element = cute::half_t;" in source else "bf16"
        block_n = int(re.search(r"kBlockN = (\d+);", source).group(1))
        head_dim_v = int(re.search(r"kHeadDimV = (\d+);", source).group(1))
        atoms |= {qk_atom(dtype, block_n), pv_atom(dtype, head_dim_v)}
        renamed = f"traits_{name}"
        tile = source[source.index("// Tile constants") : source.index("\n};\n", traits.start()) + 4]
        parts.append(tile.replace(traits.group(1), renamed))
        start = "  template <GMMA::LayoutType kLayout>\n  CUTE_DEVICE GmmaDescriptor gmma_desc("
        fn = source[source.index(start) :]
        gmma_desc = fn[: fn.index("\n  }\n") + 4].replace("CUTE_DEVICE", "CUTE_HOST_DEVICE")
        helpers = (
            "  template <class ThrMma, class CTensor, class ThrFrg>",
            "  template <class Layout>\n  CUTE_DEVICE constexpr auto acc_to_A",
        )
        for start in helpers:
            fn = source[source.index(start) :]
            gmma_desc += fn[: fn.index("\n  }\n") + 4].replace("CUTE_DEVICE", "CUTE_HOST_DEVICE")
        host = _HOST.split("template <class Traits>", 1)[1]
        for tensor, key in (("tSrQ", "Q"), ("tSrK", "K"), ("tOrV", "V")):
            ptr, lbo, sbo, layout = _descriptors(source)[tensor]
            host = host.replace(f"PTR_{key}", f"({ptr})").replace(f"ARGS_{key}", f"{lbo}, {sbo}")
            host = host.replace(f"LAYOUT_{key}", layout)
        offset = re.search(r"const int o_offset = [^;]*;", source)
        if offset:
            host = host.replace("O_OFFSET", offset.group(0))
        else:  # two wgmma tiles a warp group: CuTe's tiled copy stays
            assert "make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N" in source and name == "one_consumer"
            host = host[: host.index("  // STSM:")] + host[host.index("  // END STSM\n") :]
        calls.append(f'  bad += check_{name}<{renamed}>("{name}");')
        parts.append("template <class Traits>" + host.replace("int check(", f"int check_{name}(", 1))
    includes = source[source.index("#include") : source.index("using namespace cute;")]
    program = "#include <cstdio>\n#include <type_traits>\n" + includes + "using namespace cute;\n"
    program += "\n".join(atom_definitions(*sorted(atoms, key=repr))) + "\n"
    program += _HOST.split("template <class Traits>", 1)[0].replace("GMMA_DESC", gmma_desc)
    program += "\n".join(parts)
    program += "\nint main() {\n  int bad = 0;\n" + "\n".join(calls)
    program += '\n  printf("mismatches %d\\n", bad);\n  return bad != 0;\n}\n'
    cu = tmp_path / "desc.cu"
    cu.write_text(program)
    include = Path(cutlass_library.__file__).parent / "source" / "include"
    nvcc = shutil.which("nvcc") or NVCC
    exe = tmp_path / "desc"
    cmd = [nvcc, "-std=c++17", "-arch=sm_90a", f"-I{include}", "-o", str(exe), str(cu)]
    built = subprocess.run(cmd, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    ran = subprocess.run([str(exe)], capture_output=True, text=True)
    assert ran.returncode == 0 and "mismatches 0" in ran.stdout, ran.stdout[-3000:]
