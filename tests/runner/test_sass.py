"""runner.sass: reading opcodes out of cuobjdump's SASS listing, and the tools' lookup."""

from __future__ import annotations

import pytest

from runner import sass

LISTING = """
        /*0d20*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P3, [UR16+0x34000], R9 ;
        /*1210*/                   HGMMA.64x176x16.F32.BF16 R24, gdesc[UR20], RZ, !UPT ;
        /*14d0*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*24c0*/               @P1 MUFU.EX2 R216, R216 ;
        /*24d0*/              @!P0 BRA 0x78b0 ;
"""


def test_opcodes_keep_program_order_and_modifiers_and_drop_predicates() -> None:
    assert sass.opcodes(LISTING) == [
        "SYNCS.PHASECHK.TRANS64.TRYWAIT",
        "HGMMA.64x176x16.F32.BF16",
        "WARPGROUP.DEPBAR.LE",
        "MUFU.EX2",
        "BRA",
    ]
    assert sass.count(LISTING, ("HGMMA", "MUFU", "UTMALDG")) == {"HGMMA": 1, "MUFU": 1, "UTMALDG": 0}


def test_base_opcode_drops_guard_and_modifiers() -> None:
    # as ncu's source page writes instructions: no address, the guard before the name
    assert sass.base_opcode("@!P0 BRA 0x8270") == "BRA"
    assert sass.base_opcode("      @UP1 UIADD3 UR4, UR6, 0x1, URZ") == "UIADD3"
    assert sass.base_opcode("MUFU.EX2 R13, R13") == "MUFU"
    assert sass.base_opcode("HGMMA.64x128x16.F32.BF16 R24, gdesc[UR12], RZ, !UPT") == "HGMMA"


def test_missing_tools_are_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sass, "find_tool", lambda name: None)
    with pytest.raises(sass.SassError, match="pip install nvidia-cuda-cuobjdump"):
        sass.disassemble(b"\x7fELF")
