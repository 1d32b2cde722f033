"""The sm_80 forward's register fragments and copy partitions written out
(`translator/backends/sm80_steps.py`, `fragment_layouts`, `copy_layouts`): the layouts the kernel builds
without CuTe's `partition_fragment_A / _B / _C`, the ldmatrix copies' `retile_D` and the tiled copies'
`tidfrg_S / _D`, checked on the host against what those give (the layouts are fully static: the same type
for every thread; the kernel slices the thread layouts at its thread as CuTe's partitions do), at tile
shapes that reach each mode: one and two atoms of 64 columns, 32-column atoms (d 96), one MMA_M (BM 64,
8 warps), four (2 warps), one warp, d_qk ≠ d_v (mla), long key tiles, d 256."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pipeline.build import translate_text
from pipeline.variants import variant

ROOT = Path(__file__).resolve().parents[2]
NVCC = "/usr/local/cuda/bin/nvcc"

CONFIGS: dict[str, tuple[str, dict[str, int]]] = {
    "c_mha": ("mha_fwd.tl", {}),
    "c_d64": ("mha_fwd.tl", {"d": 64}),
    "c_mla": ("mla_fwd.tl", {}),
    "c_d96": ("mha_fwd.tl", {"d": 96}),
    "c_bm64": ("mha_fwd.tl", {"BM": 64, "BN": 128}),
    "c_d256": ("mha_fwd.tl", {"d": 256, "BN": 32, "stages": 1}),
    "c_w8": ("mha_fwd.tl", {"warps": 8, "BN": 32}),
    "c_bn160": ("mha_fwd.tl", {"warps": 8, "BN": 160, "stages": 1}),  # softcap's tile: Int<20> n8 tiles
    "c_w2": ("mha_fwd.tl", {"warps": 2, "BN": 48}),  # four MMA_M tiles a warp, three k16 slices a key block
    "c_w1": ("mha_fwd.tl", {"BM": 16, "warps": 1}),  # paged_decode's tile: no warp mode
}

CHECK = r"""
template <class Traits> void check() {
  using Element = typename Traits::Element;
  static Element buf[1 << 17];
  Tensor sQ = make_tensor(make_smem_ptr(buf), typename Traits::SmemLayoutQ{});
  Tensor sK = make_tensor(sQ.data() + size(sQ), typename Traits::SmemLayoutK{});
  Tensor sV = make_tensor(sK.data() + size(sK), typename Traits::SmemLayoutV{});
  typename Traits::TiledMma tiled_mma;
  auto thr_mma = tiled_mma.get_thread_slice(0);
  Tensor tSrQ = thr_mma.partition_fragment_A(
      make_tensor(sQ.data().get(), typename Traits::SmemLayoutQNoSwizzle{}));
  auto copy_Q = make_tiled_copy_A(typename Traits::SmemCopyAtom{}, tiled_mma).get_thread_slice(0);
  Tensor tSrK = thr_mma.partition_fragment_B(
      make_tensor(sK.data().get(), typename Traits::SmemLayoutKNoSwizzle{})(_, _, 0));
  auto copy_K = make_tiled_copy_B(typename Traits::SmemCopyAtom{}, tiled_mma).get_thread_slice(0);
  Tensor sVtNoSwizzle = make_tensor(sV.data().get(), typename Traits::SmemLayoutVtNoSwizzle{});
  Tensor tOrVt = thr_mma.partition_fragment_B(sVtNoSwizzle(_, _, 0));
  auto copy_V = make_tiled_copy_B(typename Traits::SmemCopyAtomTransposed{}, tiled_mma).get_thread_slice(0);
  Tensor acc_o = partition_fragment_C(tiled_mma, Shape<Int<Traits::kBlockM>, Int<Traits::kHeadDimV>>{});
  Tensor acc_s = partition_fragment_C(tiled_mma, Shape<Int<Traits::kBlockM>, Int<Traits::kBlockN>>{});
  using std::is_same_v;
  static_assert(is_same_v<decltype(tSrQ.layout()), typename Traits::FragLayoutQ>);
  static_assert(is_same_v<decltype(copy_Q.retile_D(tSrQ).layout()), typename Traits::FragLayoutQView>);
  static_assert(is_same_v<decltype(tSrK.layout()), typename Traits::FragLayoutK>);
  static_assert(is_same_v<decltype(copy_K.retile_D(tSrK).layout()), typename Traits::FragLayoutKView>);
  static_assert(is_same_v<decltype(tOrVt.layout()), typename Traits::FragLayoutVt>);
  static_assert(is_same_v<decltype(copy_V.retile_D(tOrVt).layout()), typename Traits::FragLayoutVtView>);
  static_assert(is_same_v<decltype(acc_o.layout()), typename Traits::AccLayoutO>);
  static_assert(is_same_v<decltype(acc_s.layout()), typename Traits::AccLayoutS>);
  // The ldmatrix sources' thread layouts (tl::thr_partition slices them as ThrCopy::partition_S does).
  using CopyQ = decltype(make_tiled_copy_A(typename Traits::SmemCopyAtom{}, tiled_mma));
  using CopyK = decltype(make_tiled_copy_B(typename Traits::SmemCopyAtom{}, tiled_mma));
  using CopyV = decltype(make_tiled_copy_B(typename Traits::SmemCopyAtomTransposed{}, tiled_mma));
  static_assert(is_same_v<decltype(CopyQ::tidfrg_S(sQ.layout())), typename Traits::LdsmLayoutQ>);
  static_assert(is_same_v<decltype(CopyK::tidfrg_S(sK.layout())), typename Traits::LdsmLayoutK>);
  Tensor sVt = make_tensor(sV.data(), typename Traits::SmemLayoutVt{});
  static_assert(is_same_v<decltype(CopyV::tidfrg_S(sVt.layout())), typename Traits::LdsmLayoutVt>);
  // The global <-> shared copies' thread layouts, of the shared tiles and of the identity tensors.
  using GQK = typename Traits::GmemTiledCopyQK;
  using GV = typename Traits::GmemTiledCopyV;
  using GO = typename Traits::GmemTiledCopyO;
  constexpr int M = Traits::kBlockM, N = Traits::kBlockN, DQK = Traits::kHeadDimQK, DV = Traits::kHeadDimV;
  Tensor sO = make_tensor(sQ.data(), typename Traits::SmemLayoutO{});
  static_assert(is_same_v<decltype(GQK::tidfrg_D(sQ.layout())), typename Traits::CopyLayoutQ>);
  static_assert(is_same_v<decltype(GQK::tidfrg_D(sK.layout())), typename Traits::CopyLayoutK>);
  static_assert(is_same_v<decltype(GV::tidfrg_D(sV.layout())), typename Traits::CopyLayoutV>);
  static_assert(is_same_v<decltype(GO::tidfrg_S(sO.layout())), typename Traits::CopyLayoutO>);
  static_assert(is_same_v<decltype(GQK::tidfrg_S(make_identity_tensor(Shape<Int<M>, Int<DQK>>{}).layout())),
                          typename Traits::CopyCoordLayoutQ>);
  static_assert(is_same_v<decltype(GQK::tidfrg_S(make_identity_tensor(Shape<Int<N>, Int<DQK>>{}).layout())),
                          typename Traits::CopyCoordLayoutK>);
  static_assert(is_same_v<decltype(GV::tidfrg_S(make_identity_tensor(Shape<Int<N>, Int<DV>>{}).layout())),
                          typename Traits::CopyCoordLayoutV>);
  static_assert(is_same_v<decltype(GO::tidfrg_D(make_identity_tensor(Shape<Int<M>, Int<DV>>{}).layout())),
                          typename Traits::CopyCoordLayoutO>);
  // The identity partitions' thrfrg_C (tl::partition_C slices them as ThrMMA::partition_C does) and O's
  // register -> shared store (make_tiled_copy_C's tidfrg_D of sO and retile_S of the accumulator).
  auto cS = make_identity_tensor(Shape<Int<M>, Int<N>>{});
  auto cO = make_identity_tensor(Shape<Int<M>, Int<DV>>{});
  static_assert(is_same_v<decltype(tiled_mma.thrfrg_C(cS.layout())), typename Traits::CoordLayoutS>);
  static_assert(is_same_v<decltype(tiled_mma.thrfrg_C(cO.layout())), typename Traits::CoordLayoutO>);
  using CopyO = decltype(make_tiled_copy_C(typename Traits::SmemCopyAtomO{}, tiled_mma));
  static_assert(is_same_v<decltype(CopyO::tidfrg_D(sO.layout())), typename Traits::StoreLayoutO>);
  static_assert(is_same_v<decltype(CopyO::retile(acc_o.layout())), typename Traits::StoreLayoutOR>);
}
"""


def _traits(name: str, example: str, params: dict[str, int]) -> str:
    text = variant((ROOT / "examples" / example).read_text(), target="sm_80", kernel=name, params=params)
    source = translate_text(text, Path(example)).source
    source = "\n".join(line for line in source.splitlines() if not line.startswith("#line"))
    m = re.search(r"struct \w+_traits \{.*?\n\};", source, re.S)
    assert m is not None
    assert "using FragLayoutQ = " in m.group(0) and "using CopyLayoutQ = " in m.group(0)
    return m.group(0)


def test_the_forward_builds_its_fragments_without_partitions():
    text = variant((ROOT / "examples" / "mha_fwd.tl").read_text(), target="sm_80")
    source = translate_text(text, Path("mha_fwd.tl")).source
    body = source.split('extern "C"', 1)[1]
    assert "partition_fragment_" not in body and "retile_D" not in body
    assert "make_tensor<Element>(Traits::FragLayoutQ{})" in body


@pytest.mark.skipif(shutil.which(NVCC) is None and not Path(NVCC).exists(), reason="needs nvcc")
def test_written_fragments_are_cutes(tmp_path: Path):
    cutlass_library = pytest.importorskip("cutlass_library")
    include = Path(cutlass_library.__file__).parent / "source" / "include"
    parts = ["#include <cute/tensor.hpp>", "#include <type_traits>", "using namespace cute;"]
    parts += [_traits(name, ex, params) for name, (ex, params) in CONFIGS.items()]
    parts.append(CHECK)
    parts.append("int main() {" + "".join(f" check<{name}_traits>();" for name in CONFIGS) + " }")
    cu = tmp_path / "fragments.cu"
    cu.write_text("\n".join(parts))
    run = subprocess.run(
        [NVCC, "-std=c++17", f"-I{include}", "-c", "-o", str(tmp_path / "fragments.o"), str(cu)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-4000:]
