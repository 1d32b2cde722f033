"""TMA tile loads as generated code, shared by the Hopper forward (`sm90.emit`) and backward (`sm90_bwd`)."""

from __future__ import annotations

from collections.abc import Sequence

from translator.writer import CodeWriter


def emit_tma_tiles(
    w: CodeWriter,
    tiles: Sequence[tuple[str, str]],
    *,
    bar: str,
    rows: str,
    boxes: int | str,
    box_cols: str,
    row0: str,
    head: str,
    batch: str,
) -> None:
    """Each (descriptor, shared destination) of `tiles` loaded as `boxes` TMA boxes of (`box_cols` columns
    × `rows` rows), each into its own swizzled column block, completing on the mbarrier `bar`; the tiles
    share one unrolled loop over the boxes. The caller has already armed `bar` with the bytes."""
    w.line("CUTE_UNROLL")
    with w.block(f"for (int c = 0; c < {boxes}; ++c)"):
        for desc, dst in tiles:
            w.line(
                f"SM90_TMA_LOAD_4D::copy(&{desc}, {bar}, 0, {dst} + c * {rows} * {box_cols}, c * {box_cols}, "
                f"{row0}, {head}, {batch});"
            )
