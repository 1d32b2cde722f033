"""Documents, settings and conversions: the state the server keeps between messages."""

from __future__ import annotations

from lsprotocol import types as lsp

from server import convert
from server.documents import Documents, apply_change
from server.settings import BenchmarkShape, Settings
from tl_language import analyze


def _ranged(l0: int, c0: int, l1: int, c1: int, text: str) -> lsp.TextDocumentContentChangePartial:
    return lsp.TextDocumentContentChangePartial(
        range=lsp.Range(start=lsp.Position(line=l0, character=c0), end=lsp.Position(line=l1, character=c1)),
        text=text,
    )


def test_apply_change_whole_document_and_ranges() -> None:
    assert apply_change("a\nb", lsp.TextDocumentContentChangeWholeDocument(text="x")) == "x"
    assert apply_change("Copy Q\nend", _ranged(0, 5, 0, 6, "K")) == "Copy K\nend"
    assert apply_change("ab\ncd", _ranged(0, 1, 1, 1, "")) == "ad"
    # UTF-16 columns: the astral character counts two.
    assert apply_change("# 𝄞x\n", _ranged(0, 4, 0, 5, "y")) == "# 𝄞y\n"
    # Positions past the end clamp instead of raising.
    assert apply_change("ab", _ranged(5, 0, 9, 9, "!")) == "ab!"


def test_out_of_order_versions_are_dropped() -> None:
    docs = Documents()
    docs.open("file:///a.tl", "v1", 1)
    whole = [lsp.TextDocumentContentChangeWholeDocument(text="v3")]
    assert docs.change("file:///a.tl", 3, whole) is not None
    stale = [lsp.TextDocumentContentChangeWholeDocument(text="v2")]
    assert docs.change("file:///a.tl", 2, stale) is None
    doc = docs.get("file:///a.tl")
    assert doc is not None and (doc.text, doc.version) == ("v3", 3)
    assert docs.change("file:///missing.tl", 9, whole) is None


def test_analysis_is_cached_per_text_and_target() -> None:
    docs = Documents()
    doc = docs.open("file:///a.tl", "Kernel k\n", 1)
    first = doc.analysis("sm_80")
    assert doc.analysis("sm_80") is first
    assert doc.analysis("sm_90") is not first and doc.analysis("sm_90").model.target.arch == "sm_90"


def test_settings_from_client_json() -> None:
    s = Settings.from_json(
        {
            "target": "SM_90",
            "onSave": "compile",
            "benchmarkShapes": ["2x8x1024", {"batch": 1, "heads": 4, "seqlen_q": 128, "seqlen_k": 256}],
            "worker": {"timeoutSeconds": 5, "cancelGraceSeconds": 0},
        }
    )
    assert s.target == "sm_90" and s.on_save == "compile" and s.worker_timeout == 5.0
    assert s.worker_cancel_grace == 0.0  # 0: a cancel kills the worker at once
    assert Settings.from_json({"worker.cancelGraceSeconds": 2.5}).worker_cancel_grace == 2.5
    assert s.benchmark_shapes == (BenchmarkShape(2, 8, 1024, 1024), BenchmarkShape(1, 4, 128, 256))


def test_bad_settings_keep_defaults() -> None:
    s = Settings.from_json(
        {
            "target": "sm_1",
            "onSave": "always",
            "benchmarkShapes": ["nope", 3],
            "worker": {"timeoutSeconds": -1, "cancelGraceSeconds": -3},
        }
    )
    assert s == Settings() and s.worker_cancel_grace == 60.0
    assert Settings.from_json({"worker": {"cancelGraceSeconds": True}}) == Settings()
    assert Settings.from_json(None) == Settings() and Settings.from_json([1]) == Settings()


def test_diagnostic_fixes_round_trip_through_data() -> None:
    text = "Kernel k\nKernel again\n"
    d = next(d for d in analyze(text).diagnostics if d.fixes)
    ld = convert.diagnostic(d)
    assert ld.code == d.code and ld.source == "tl" and int(ld.severity or 0) == int(d.severity)
    assert convert.fixes_from_data(ld.data) == list(d.fixes)
    assert convert.fixes_from_data({"fixes": [{"title": "x"}]}) == []
    assert convert.fixes_from_data("garbage") == []
