"""benchmarks/decode.py's pieces that run without a GPU: the TL builds it times and its `auto` rows."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from benchmarks.decode import auto_rows, tl_text
from pipeline.build import translate_text


def _kernel(page: bool, ab: dict[str, int]) -> tuple[bool, SimpleNamespace]:
    return page, SimpleNamespace(spec=translate_text(tl_text(page, ab), Path("d.tl")).spec)


def test_auto_rows_copy_the_measurement_of_the_build_the_rule_picks() -> None:
    kernels = {name: _kernel(name.startswith("tl-paged"), {"BN": 32} if "BN" in name else {})
               for name in ("tl-paged", "tl-paged BN=32", "tl-contig", "tl-contig BN=32")}  # fmt: skip
    rows = [{"candidate": name, "GB/s": float(i)} for i, name in enumerate(kernels)]
    wide = {r["candidate"]: r for r in auto_rows(rows, kernels, batch=64, sms=132)}
    assert wide["tl-paged auto (BN 32)"]["GB/s"] == 1.0 and wide["tl-paged auto (BN 32)"]["same_run_as"] == (
        "tl-paged BN=32"
    )
    assert wide["tl-contig auto (BN 64)"]["GB/s"] == 2.0
    narrow = {r["candidate"] for r in auto_rows(rows, kernels, batch=8, sms=132)}
    assert narrow == {"tl-paged auto (BN 64)", "tl-contig auto (BN 64)"}


def test_the_contiguous_build_drops_only_the_page_size() -> None:
    paged, contig = tl_text(True, {}), tl_text(False, {"BN": 32})
    assert "Param page_size = 64" in paged and "Target sm_90" in paged
    assert "page_size" not in contig and "Param BN = 32" in contig
