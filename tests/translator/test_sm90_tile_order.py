"""The order in which a masked sm_90 kernel numbers its tiles (FA4's longest-first order over L2 sections
of heads): the emitted C++ lines themselves, compiled as host code, must map the tile indices onto every
(batch, head, query block) exactly once, longest query blocks first within each section."""

from __future__ import annotations

import re
import shutil
import subprocess
from itertools import product
from pathlib import Path

import pytest

from benchmarks.sm90_device_check import translate
from benchmarks.sm90_variants import Variant

CXX = shutil.which("g++") or shutil.which("c++")
pytestmark = pytest.mark.skipif(CXX is None, reason="no host C++ compiler")

_FIRST = "const int num_hb = batch * heads;"
_LAST = re.compile(r"const int m_block = num_m_blocks - 1 - in_section / width;[^\n]*\n")
_PROGRAM = """#include <cstdio>
using Element = unsigned short;  // two bytes, as bf16
constexpr int kHeadDimQK = %(d_qk)d, kHeadDimV = %(d_v)d;
int main() {
  int batch, heads, seqlen_k, num_m_blocks;
  while (std::scanf("%%d %%d %%d %%d", &batch, &heads, &seqlen_k, &num_m_blocks) == 4) {
    for (int tile = 0; tile < num_m_blocks * batch * heads; ++tile) {
%(body)s
      std::printf("%%d %%d %%d %%d\\n", section, bidb, bidh, m_block);
    }
    std::printf("end\\n");
  }
}
"""


def _numbering_lines(source: str) -> str:
    """The kernel's lines from the section width to m_block, without comments and #line directives."""
    start = source.index(_FIRST)
    end = _LAST.search(source, start)
    assert end, "the masked kernel no longer derives m_block from the section numbering"
    lines = source[start : end.end()].splitlines()
    code = (ln.strip() for ln in lines)
    return "\n".join("      " + ln for ln in code if ln and not ln.startswith(("//", "#")))


def _run(tmp_path: Path, d: int, shapes: list[tuple[int, int, int, int]]) -> list[list[tuple[int, ...]]]:
    block_n = 80 if d == 256 else 128  # the default tiles (tl_language.resources.hopper_tile)
    source, _, _ = translate(Variant(f"order_d{d}", block_n=block_n, d_qk=d, d_v=d, mask="causal"))
    program = tmp_path / "order.cpp"
    program.write_text(_PROGRAM % {"d_qk": d, "d_v": d, "body": _numbering_lines(source)})
    binary = tmp_path / "order"
    subprocess.run([CXX, "-std=c++17", "-O1", "-o", str(binary), str(program)], check=True)
    stdin = "".join(f"{b} {h} {s} {m}\n" for b, h, s, m in shapes)
    out = subprocess.run([str(binary)], input=stdin, capture_output=True, text=True, check=True).stdout
    runs, current = [], []
    for line in out.splitlines():
        if line == "end":
            runs.append(current)
            current = []
        else:
            current.append(tuple(int(x) for x in line.split()))
    return runs


def test_masked_tiles_are_a_permutation_longest_first_within_each_l2_section(tmp_path: Path) -> None:
    # (batch, heads, seqlen_k, query blocks): one K/V head over 50 MB (sections of one pair), sections
    # that divide the pairs, a short last section (12 pairs in sections of 8), one pair, GQA-like odd heads.
    shapes = [(1, 3, 131072, 5), (4, 16, 4096, 22), (3, 4, 8192, 7), (1, 1, 300, 3), (2, 6, 1000, 4)]
    for d, runs in ((64, _run(tmp_path, 64, shapes)), (256, _run(tmp_path, 256, shapes))):
        for (batch, heads, seqlen_k, num_m), rows in zip(shapes, runs, strict=True):
            coords = [(b, h, m) for _, b, h, m in rows]
            every = product(range(batch), range(heads), range(num_m))
            assert sorted(coords) == sorted(every), (d, batch, heads)
            sections: dict[int, list[tuple[int, int, int, int]]] = {}
            for row in rows:
                sections.setdefault(row[0], []).append(row)
            assert sorted(sections) == list(range(len(sections)))  # sections come in order
            for tiles in sections.values():
                blocks = [m for _, _, _, m in tiles]
                assert blocks == sorted(blocks, reverse=True)  # the longest query tiles first
                pairs = {(b, h) for _, b, h, _ in tiles}
                # every pair of the section has all its blocks there, and a section's pairs are adjacent
                assert len(tiles) == len(pairs) * num_m
                flat = sorted(b * heads + h for b, h in pairs)
                assert flat == list(range(flat[0], flat[0] + len(flat)))
            kv_bytes = seqlen_k * 2 * d * 2
            width = len({(b, h) for _, b, h, _ in sections[0]})
            assert width == 1 or width * kv_bytes <= 50 << 20  # a section's K and V fit in 50 MB of L2


@pytest.mark.parametrize("name", ["global_sliding", "document_mask"])
def test_masks_that_read_side_tensors_take_the_launchs_tile_order(name):
    """Whose tiles' lengths only the launch's block classes know (global tokens, documents): the tiles run
    in the order the launch wrote after the classes (`runner.launch.longest_first`), whatever the Mask
    header; the affine masks keep the L2 sections' longest-first numbering."""
    from pipeline.build import translate_text

    root = Path(__file__).resolve().parents[2]
    text = (root / "examples" / "variants" / f"{name}.tl").read_text()
    src = translate_text(text, Path(f"{name}.tl")).source
    assert "const int tl_tile = tile_order[tile];" in src
    assert "block_mask_ptr + ((tl_classes + 15) & ~15ll)" in src and "int swizzle = 1;" not in src
    causal = (root / "examples" / "variants" / "sliding_window.tl").read_text()
    src = translate_text(causal, Path("sliding_window.tl")).source
    assert "tile_order" not in src and "const int m_block = num_m_blocks - 1 - in_section / width;" in src
