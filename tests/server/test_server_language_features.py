"""Library-level tests of the server's language features on the bundled examples."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsprotocol import types as lsp

from server import names
from server.features import navigation
from server.features.code_lens import result_text
from server.features.completion import complete
from server.features.folding import folding
from server.features.inlay_hints import hints
from server.features.semantic_tokens import LEGEND, encode
from server.features.symbols import symbols
from server.suggest import fallback, parameter_suggestions, tile_suggestion
from tl_language import analyze

ROOT = Path(__file__).resolve().parents[2]
MHA = (ROOT / "examples" / "mha_fwd.tl").read_text()
SKETCH = (ROOT / "examples" / "sketch_fwd.tl").read_text()
N = len(MHA.splitlines())
END = MHA.splitlines().index("end")


def labels(text: str, line: int, character: int) -> list[str]:
    return [i.label for i in complete(analyze(text), line, character)]


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines()) if needle in line)


# ---- completion ----------------------------------------------------------------------------------------


def test_completion_offers_statement_snippets_at_line_start() -> None:
    items = complete(analyze(MHA), N, 0)
    assert [i.label for i in items][:3] == ["Kernel", "Target", "Dtype"]
    copy = next(i for i in items if i.label == "Copy")
    assert copy.insert_text_format == lsp.InsertTextFormat.Snippet and "from" in (copy.insert_text or "")


def test_completion_offers_end_inside_an_open_loop() -> None:
    text = "Kernel k\nfor j = 0: 4\n    "
    assert "end" in labels(text, 2, 4)


def test_completion_offers_ops_after_compute() -> None:
    got = labels(MHA + "Compute ", N, 8)
    assert {"GEMM", "Softmax", "Multiply", "Divide"} <= set(got)


def test_completion_offers_result_clauses_after_operands() -> None:
    assert labels(MHA + "Compute GEMM Q, K ", N, 18) == ["and get", "and get new", "and accumulate"]


def test_completion_offers_copy_paths_from_the_tensors_levels() -> None:
    got = labels(MHA + "Copy acc_o from ", N, 16)
    assert got == ["register to global", "register to shared"]  # acc_o lives only in registers


def test_completion_offers_levels_after_to_and_in() -> None:
    assert labels(MHA + "Copy acc_o from register to ", N, 28) == ["global", "shared"]
    assert labels(MHA + "Allocate X in ", N, 14) == ["global", "shared", "register"]


def test_completion_offers_targets_and_dtypes() -> None:
    assert "sm_90" in labels(MHA + "Target ", N, 7)
    assert labels(MHA + "Dtype ", N, 6) == ["fp16", "bf16", "fp8_e4m3"]


def test_completion_offers_params_and_builtins_in_expressions() -> None:
    got = labels(MHA + "Allocate X in global (", N, 22)
    assert got[:5] == ["BM", "BN", "d", "warps", "stages"] and "seqlen_q" in got


def test_completion_suggests_a_tile_for_a_sketch_copy() -> None:
    line = line_of(SKETCH, "Copy Q in coordinate")
    got = labels(SKETCH, line, len("Copy Q "))
    assert got[0] == "(BM, d) in coordinate [L = …] from global to shared"
    assert "(BM, d)" in got


def test_completion_ranks_values_for_a_parameter_hole() -> None:
    line = line_of(SKETCH, "Param BM = ?")
    items = complete(analyze(SKETCH), line, len("Param BM = "))
    assert items and all(i.text_edit is not None for i in items)
    assert [i.sort_text for i in items] == sorted(i.sort_text or "" for i in items)
    edit = items[0].text_edit
    assert isinstance(edit, lsp.TextEdit) and edit.range.start.character == len("Param BM = ")
    assert items[0].preselect and int(items[0].label) % 16 == 0


def test_completion_inside_a_comment_offers_nothing() -> None:
    assert labels("# Copy ", 0, 7) == []


def test_completion_survives_out_of_range_positions() -> None:
    assert complete(analyze(MHA), 10_000, 3) == []
    assert isinstance(complete(analyze(MHA), 0, 10_000), list)


def test_parameter_suggestions_come_from_the_planner() -> None:
    got = parameter_suggestions(analyze(SKETCH).model, "BN")
    assert got and got[0].source == "planner" and got[0].reason


def test_fallback_suggestions_fit_shared_memory_and_mma() -> None:
    model = analyze(SKETCH).model
    got = fallback(model, "BM")
    assert got and all(s.value % model.target.mma[model.dtype].m == 0 for s in got)
    assert all("KiB" in s.reason for s in got)


def test_tile_suggestion_maps_sequence_dims_to_block_params() -> None:
    model = analyze(SKETCH).model
    assert tile_suggestion(model, "K") == "(BN, d)"
    assert tile_suggestion(model, "nope") is None


# ---- navigation ------------------------------------------------------------------------------------------


def _pos_of(text: str, needle: str, word: str) -> lsp.Position:
    line = line_of(text, needle)
    return lsp.Position(line=line, character=text.splitlines()[line].index(word))


def test_definition_of_a_tensor_use_is_its_allocate() -> None:
    a = analyze(MHA)
    rng = navigation.definition(a, _pos_of(MHA, "Compute GEMM Q, K", "Q,"))
    assert rng is not None and rng.start.line == line_of(MHA, "Allocate Q in global")


def test_definition_of_a_param_use() -> None:
    a = analyze(MHA)
    rng = navigation.definition(a, _pos_of(MHA, "for j = 0", "BN"))
    assert rng is not None and rng.start.line == line_of(MHA, "Param BN")


def test_references_and_rename_cover_every_occurrence() -> None:
    a = analyze(MHA)
    pos = _pos_of(MHA, "Compute GEMM Q, K", "Q,")
    refs = navigation.references(a, pos, include_declaration=True)
    assert len(refs) == len([o for o in names.occurrences(a) if o.name == "Q"])
    assert len(navigation.references(a, pos, include_declaration=False)) == len(refs) - 1
    edits = navigation.rename_edits(a, pos, "Qt")
    assert edits is not None and {e.range.start.line for e in edits} == {r.start.line for r in refs}
    renamed = MHA.splitlines()
    for e in sorted(edits, key=lambda e: (e.range.start.line, -e.range.start.character)):
        line = renamed[e.range.start.line]
        renamed[e.range.start.line] = (
            line[: e.range.start.character] + e.new_text + line[e.range.end.character :]
        )
    after = analyze("\n".join(renamed))
    assert [d.code for d in after.diagnostics] == [d.code for d in a.diagnostics]
    assert "Qt" in after.model.tensors and "Q" not in after.model.tensors


def test_rename_rejects_keywords_and_taken_names() -> None:
    from pygls.exceptions import JsonRpcInvalidParams

    a = analyze(MHA)
    pos = _pos_of(MHA, "Compute GEMM Q, K", "Q,")
    for bad in ("shared", "K", "1x", "seqlen_q"):
        with pytest.raises(JsonRpcInvalidParams):
            navigation.rename_edits(a, pos, bad)


def test_prepare_rename_refuses_keywords() -> None:
    a = analyze(MHA)
    assert navigation.prepare_rename(a, lsp.Position(line=line_of(MHA, "Kernel"), character=1)) is None
    assert navigation.prepare_rename(a, _pos_of(MHA, "Param BM", "BM")) is not None


# ---- symbols, folding, semantic tokens, inlay hints, code lens ------------------------------------------


def test_document_symbols_nest_params_tensors_and_loops_under_the_kernel() -> None:
    (kernel,) = symbols(analyze(MHA))
    assert kernel.name == "mha_fwd" and kernel.kind == lsp.SymbolKind.Function
    names_ = [c.name for c in kernel.children or []]
    assert {"BM", "BN", "Q", "K", "V", "O", "S", "acc_o"} <= set(names_)
    loop = next(c for c in kernel.children or [] if c.name.startswith("for j"))
    assert loop.range.end.line == END


def test_folding_covers_the_for_loop() -> None:
    (fold,) = [f for f in folding(analyze(MHA)) if f.kind == lsp.FoldingRangeKind.Region]
    assert (fold.start_line, fold.end_line) == (line_of(MHA, "for j"), END)


def test_folding_of_an_unterminated_loop_does_not_crash() -> None:
    assert folding(analyze("Kernel k\nfor j = 0: 4\n    Compute Softmax S\n")) != []


def test_semantic_tokens_classify_words() -> None:
    a = analyze(MHA)
    data = encode(a)
    assert len(data) % 5 == 0
    types_ = LEGEND.token_types
    line = col = 0
    found: dict[tuple[int, int], str] = {}
    for i in range(0, len(data), 5):
        dl, dc, _length, t, _m = data[i : i + 5]
        line += dl
        col = col + dc if dl == 0 else dc
        found[(line, col)] = types_[t]
    copy_q = line_of(MHA, "Copy Q (BM, d)")
    text = MHA.splitlines()[copy_q]
    assert found[(copy_q, 0)] == "keyword"
    assert found[(copy_q, text.index("Q"))] == "variable"
    assert found[(copy_q, text.index("BM"))] == "parameter"
    assert found[(copy_q, text.index("global"))] == "enumMember"
    assert found[(0, 0)] == "comment"


def test_inlay_hints_show_shared_memory_per_copy_and_total() -> None:
    labels_ = [h.label for h in hints(analyze(MHA))]
    # Q (128×128 bf16 = 32 KiB) once; K and V (64×128 = 16 KiB) × 2 stages; total 96 KiB of sm_80's 163 KiB.
    assert labels_ == [
        "smem 32 KiB",
        "smem 16 KiB × 2 stages = 32 KiB",
        "smem 16 KiB × 2 stages = 32 KiB",
        "smem 96 KiB / 163 KiB (sm_80)",
    ]


def test_inlay_hints_skip_unknown_tiles() -> None:
    assert all("/" not in str(h.label) for h in hints(analyze(SKETCH)))


def test_code_lens_text_for_results() -> None:
    assert result_text(None) == "not verified yet"
    ok = {
        "status": "ok",
        "verified": True,
        "rel_l2": 2.1e-3,
        "tflops": 583.2,
        "vs_cudnn": 0.97,
        "vs_fa2": 1.7,
        "device": "H200",
    }
    assert result_text(ok) == "✓ rel-L2 2.1e-03 · 583 TFLOPS · 0.97× cuDNN · 1.7× FA2 (H200)"
    timed = {**ok, "compile_seconds": 8.74}  # a verified save keeps showing what its compile took
    assert result_text(timed) == "✓ rel-L2 2.1e-03 · 583 TFLOPS · 0.97× cuDNN · 1.7× FA2 · NVRTC 8.7 s (H200)"
    compiled = {"status": "ok", "compiled": True, "compile_seconds": 31.2, "gpu": "no CUDA device"}
    assert result_text(compiled) == "✓ compiles (NVRTC in 31.2 s) · not verified: no CUDA device"
    failed = {
        "status": "failed",
        "kind": "verify",
        "compiled": True,
        "verified": False,
        "message": "rel-L2 0.3",
    }
    assert result_text(failed).startswith("✗ verification failed: rel-L2 0.3")
    assert result_text({"status": "crashed", "kind": "compile", "message": "segfault"}).startswith(
        "✗ compile crashed"
    )
