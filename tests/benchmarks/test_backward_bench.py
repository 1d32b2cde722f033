"""benchmarks/backward.py's FlashAttention 4 column without a GPU: the import and `--no-fa4` (skipped with a
one-line note), the gradient check that decides whether FA4 is timed (on CPU tensors, SDPA's math backend
as the reference and stand-ins for flash_attn_func), and the table and JSON rows with its column and
`<tl column>/fa4` ratios, from rows made by hand."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

import benchmarks.backward as bb
from runner.bench import Timing


def timing(ms: float) -> Timing:
    return Timing(median_ms=ms, p10_ms=ms * 0.99, p90_ms=ms * 1.01, runs=50)


# --- the import and the flag ---------------------------------------------------------------------------


def test_fa4_skipped_with_one_line_note_when_flash_attn_cute_does_not_import(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "flash_attn", None)  # `import flash_attn...` raises ImportError
    monkeypatch.setitem(sys.modules, "flash_attn.cute", None)
    assert bb.fa4_function() is None
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1
    assert out[0].startswith("fa4: skipped (ModuleNotFoundError")


def test_fa4_function_is_flash_attn_cute_flash_attn_func(monkeypatch, capsys):
    def flash_attn_func(*a, **kw):
        return a

    cute = types.ModuleType("flash_attn.cute")
    cute.flash_attn_func = flash_attn_func  # type: ignore[attr-defined]
    pkg = types.ModuleType("flash_attn")
    pkg.cute = cute  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "flash_attn", pkg)
    monkeypatch.setitem(sys.modules, "flash_attn.cute", cute)
    assert bb.fa4_function() is flash_attn_func
    assert capsys.readouterr().out == ""


def test_no_fa4_flag_reaches_run(monkeypatch):
    seen: list[dict] = []
    monkeypatch.setattr(bb, "run", lambda *a, **kw: seen.append(kw))
    for argv, want in ((["backward.py"], True), (["backward.py", "--no-fa4"], False)):
        monkeypatch.setattr(sys, "argv", [*argv, "--dims", "128", "--seqlens", "8192"])
        assert bb.main() == 0
        assert seen[-1]["fa4"] is want


class _Cuda:
    """torch.cuda as run() uses it, on a machine without a GPU."""

    @staticmethod
    def get_device_name() -> str:
        return "NVIDIA H200"

    @staticmethod
    def empty_cache() -> None:
        pass


def _run_with(monkeypatch, tmp_path: Path, fa4: bool) -> tuple[list, dict]:
    """run() with our kernels and the timing replaced: what _one_config got as FA4, and the JSON."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch, "cuda", _Cuda)
    got: list = []

    def one_config(bwd, fwd, others, d, causal, s, flex, target_s, fa4_func):
        got.append(fa4_func)
        row = {"d": d, "causal": causal, "seqlen": s, "batch": 2, "pass": "bwd", "tl": 300.0}
        if fa4_func is not None:
            row |= {"fa4": 400.0, "tl/fa4": 0.75}
        return [row]

    monkeypatch.setattr(bb, "_ours", lambda prebuilt, causal, d, suffixes: (None, None, {}))
    monkeypatch.setattr(bb, "_one_config", one_config)
    path = tmp_path / "bench.json"
    bb.run(None, [8192], [128], False, path, suffixes=(), fa4=fa4)
    return got, json.loads(path.read_text())


def test_run_without_flash_attn_skips_the_column_and_notes_it(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "flash_attn", None)
    monkeypatch.setitem(sys.modules, "flash_attn.cute", None)
    got, data = _run_with(monkeypatch, tmp_path, fa4=True)
    assert got == [None, None]  # both causal settings, no FA4 handed on
    out = capsys.readouterr().out
    assert out.count("fa4: skipped (") == 1
    header = next(line for line in out.splitlines() if line.lstrip().startswith("d "))
    assert "fa4" not in header  # no FA4 column at all
    assert all("fa4" not in r for r in data["rows"])


def test_run_no_fa4_never_imports_it(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(bb, "fa4_function", lambda: pytest.fail("--no-fa4 must not import flash_attn"))
    got, _ = _run_with(monkeypatch, tmp_path, fa4=False)
    assert got == [None, None]
    assert "fa4" not in capsys.readouterr().out


def test_run_hands_flash_attn_func_on_and_writes_its_column(monkeypatch, tmp_path, capsys):
    def flash_attn_func(*a, **kw):
        return a

    monkeypatch.setattr(bb, "fa4_function", lambda: flash_attn_func)
    got, data = _run_with(monkeypatch, tmp_path, fa4=True)
    assert got == [flash_attn_func, flash_attn_func]
    assert [r["fa4"] for r in data["rows"]] == [400.0, 400.0]
    assert data["gpu"] == "NVIDIA H200"
    header = next(line for line in capsys.readouterr().out.splitlines() if line.lstrip().startswith("d "))
    assert header.split()[-4:] == ["fa4", "tl/flash", "tl/cudnn", "tl/fa4"]


# --- the gradient check ---------------------------------------------------------------------------------


def _inputs(torch):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(2, 37, 3, 16, generator=g).to(torch.bfloat16) for _ in range(4)]  # (b, s, h, d)


def _fake_fa4(torch, *, honour_causal: bool = True, tuple_out: bool = True):
    """flash_attn_func's signature on (b, s, h, d) tensors, SDPA's math backend inside."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    def flash_attn_func(q, k, v, causal=False, softmax_scale=None):
        with sdpa_kernel([SDPBackend.MATH]):
            o = scaled_dot_product_attention(
                *(t.transpose(1, 2) for t in (q, k, v)),
                is_causal=causal and honour_causal,
                scale=softmax_scale,
            ).transpose(1, 2)
        return (o, torch.zeros(q.shape[0], q.shape[2], q.shape[1])) if tuple_out else o

    return flash_attn_func


def _reference(torch, q, k, v, do, causal, scale):
    """The sdpa-flash candidates as _one_config makes them (SDPA's math backend: the CPU has no flash)."""
    bwd, both = bb._autograd("MATH", q, k, v, do, causal, scale)
    return {"sdpa-flash": bwd}, {"sdpa-flash": both}


@pytest.mark.parametrize("tuple_out", [True, False])
def test_fa4_agreeing_with_sdpa_flash_is_timed_in_both_passes(capsys, tuple_out):
    torch = pytest.importorskip("torch")
    q, k, v, do = _inputs(torch)
    cand_b, cand_fb = _reference(torch, q, k, v, do, True, 0.25)
    info = bb._add_fa4(_fake_fa4(torch, tuple_out=tuple_out), cand_b, cand_fb, q, k, v, do, True, 0.25)
    assert "fa4" in cand_b and "fa4" in cand_fb
    assert "fa4_note" not in info and "fa4" not in info
    check = info["fa4_check"]
    assert check["ok"]
    for name in ("dq", "dk", "dv"):
        assert check[name]["max_abs_ref"] > 0
        assert check[name]["max_abs_diff"] <= check[name]["tol"]
        assert check[name]["tol"] == pytest.approx(bb.FA4_REL_TOL * check[name]["max_abs_ref"])
    # the candidates return FA4's dq, dk, dv in the inputs' (b, s, h, d) layout
    for cand in (cand_b["fa4"], cand_fb["fa4"]):
        grads = cand(0)
        assert [tuple(g.shape) for g in grads] == [tuple(q.shape)] * 3
    out = capsys.readouterr().out
    assert "fa4 vs sdpa-flash gradients: dq max|diff| " in out and out.rstrip().endswith(": agree")


def test_fa4_disagreeing_is_not_timed_and_the_row_says_why(capsys):
    torch = pytest.importorskip("torch")
    q, k, v, do = _inputs(torch)
    cand_b, cand_fb = _reference(torch, q, k, v, do, True, 0.25)
    info = bb._add_fa4(_fake_fa4(torch, honour_causal=False), cand_b, cand_fb, q, k, v, do, True, 0.25)
    assert "fa4" not in cand_b and "fa4" not in cand_fb
    assert info["fa4"] is None
    assert info["fa4_note"].startswith("not timed: gradients disagree with sdpa-flash (dq max|diff| ")
    assert not info["fa4_check"]["ok"]
    assert info["fa4_check"]["dq"]["max_abs_diff"] > info["fa4_check"]["dq"]["tol"]
    out = capsys.readouterr().out
    assert ": DISAGREE" in out and "  fa4: n/a (not timed: gradients disagree" in out
    # the rows of the shape carry the reason, and the table prints it
    row = bb.make_row({"d": 16, "causal": True, "seqlen": 37, "batch": 2, "pass": "bwd"},
                      {"tl": timing(1.0)}, 1e9, info)  # fmt: skip
    assert row["fa4"] is None and row["fa4_note"] == info["fa4_note"]
    assert not any(k.endswith("/fa4") for k in row)
    assert bb.format_table([row], (), "cpu").splitlines()[-1].endswith("  fa4: " + info["fa4_note"])


def test_fa4_without_sdpa_flash_or_failing_is_not_timed(capsys):
    torch = pytest.importorskip("torch")
    q, k, v, do = _inputs(torch)
    cand_b: dict = {}
    info = bb._add_fa4(_fake_fa4(torch), cand_b, {}, q, k, v, do, False, 0.25)
    assert info == {"fa4": None, "fa4_note": "not timed: no sdpa-flash gradients to check it against"}
    assert cand_b == {}

    def broken(*a, **kw):
        raise RuntimeError("no sm_90 backward for this head dim")

    cand_b, cand_fb = _reference(torch, q, k, v, do, False, 0.25)
    info = bb._add_fa4(broken, cand_b, cand_fb, q, k, v, do, False, 0.25)
    assert "fa4" not in cand_b and info["fa4"] is None
    assert info["fa4_note"] == "RuntimeError: no sm_90 backward for this head dim"
    assert "fa4: n/a (RuntimeError: no sm_90 backward" in capsys.readouterr().out


def test_grad_check_measures_against_the_reference_magnitude():
    torch = pytest.importorskip("torch")
    want = [torch.full((2, 3), 10.0), torch.full((2, 3), 1.0), torch.full((2, 3), 0.01)]
    near = [want[0] + 0.19, want[1] - 0.019, want[2] * 1.019]  # just under 2e-2 of each magnitude
    assert bb.grad_check(near, want)["ok"]
    far = [want[0], want[1], want[2] * 1.03]  # 3e-2 off, in the smallest gradient only
    check = bb.grad_check(far, want)
    assert not check["ok"]
    assert check["dv"]["max_abs_diff"] == pytest.approx(3e-4, rel=1e-3)
    assert check["dv"]["tol"] == pytest.approx(2e-4)
    assert check["dq"]["max_abs_diff"] == 0.0
    nan = [want[0], want[1].clone(), want[2]]
    nan[1][0, 0] = float("nan")
    assert not bb.grad_check(nan, want)["ok"]
    assert not bb.grad_check([want[0], want[1], want[2][:1]], want)["ok"]  # a wrong shape


# --- the table and the JSON rows ------------------------------------------------------------------------

BASE = {"d": 128, "causal": False, "seqlen": 8192, "batch": 2, "pass": "bwd"}


def _rows() -> list[dict]:
    """The device script's run: tl (sm_80 skeleton), tl_sm90 and tl_sm90ovl; no _det build; FA4 timed at
    the first shape, its gradients off at the second."""
    work = 2.5e12  # 1 ms -> 2500 TFLOPS
    timed = {
        "tl": timing(10.0),
        "tl_sm90": timing(6.25),
        "tl_sm90ovl": timing(6.0),
        "sdpa-flash": timing(9.0),
        "sdpa-cudnn": timing(5.0),
        "fa4": timing(5.0),
    }
    first = bb.make_row(BASE, timed, work, {"fa4_check": {"ok": True}})
    not_timed = {k: t for k, t in timed.items() if k != "fa4"}
    note = "not timed: gradients disagree with sdpa-flash (dq max|diff| 1 (tol 0.1))"
    second = bb.make_row({**BASE, "causal": True}, not_timed, work, {"fa4": None, "fa4_note": note})
    return [first, second]


def test_json_row_has_fa4_and_a_ratio_for_every_tl_column(tmp_path):
    first, second = _rows()
    assert first["fa4"] == pytest.approx(500.0) and first["fa4_ms"] == 5.0
    assert first["tl/fa4"] == pytest.approx(250.0 / 500.0)
    assert first["tl_sm90/fa4"] == pytest.approx(400.0 / 500.0)
    assert first["tl_sm90ovl/fa4"] == pytest.approx(2500.0 / 6.0 / 500.0)
    assert not any(k.endswith("/fa4") for k in second)
    assert second["fa4"] is None and second["fa4_note"].startswith("not timed:")
    path = tmp_path / "bench.json"
    bb.write_json(path, "NVIDIA H200", [first, second])
    rows = json.loads(path.read_text())["rows"]
    assert rows[0]["tl_sm90/fa4"] == pytest.approx(0.8) and rows[0]["fa4_check"] == {"ok": True}
    assert rows[1]["fa4"] is None and "fa4_note" in rows[1]


def test_fa4_whose_timing_failed_says_so_in_its_row():
    row = bb.make_row(BASE, {"tl": timing(10.0), "fa4": RuntimeError("launch failed")}, 2.5e12)
    assert row["fa4"] is None and row["fa4_ms"] is None
    assert row["fa4_note"] == "timing failed: RuntimeError: launch failed"
    assert "tl/fa4" not in row


def test_table_has_the_fa4_column_and_tl_over_fa4_ratios():
    lines = bb.format_table(_rows(), ("_det", "_sm90", "_sm90ovl"), "NVIDIA H200").splitlines()
    assert lines[0].endswith("NVIDIA H200")
    header = lines[1].split()
    names = ["tl", "tl_det", "tl_sm90", "tl_sm90ovl", "sdpa-flash", "sdpa-cudnn", "flex", "fa4"]
    # tl_det was timed in no row: it keeps its (n/a) column but gets no ratio to FA4
    ratios = ["tl/flash", "tl/cudnn", "tl/fa4", "tl_sm90/fa4", "tl_sm90ovl/fa4"]
    assert header == ["d", "causal", "seqlen", "pass", *names, *ratios]
    first = lines[2].split()
    assert first[:4] == ["128", "False", "8192", "bwd"]
    values = dict(zip(names + ratios, first[4:], strict=True))
    assert values["fa4"] == "500.0" and values["tl_sm90"] == "400.0" and values["tl_det"] == "n/a"
    assert [values[r] for r in ratios[2:]] == ["0.50x", "0.80x", "0.83x"]
    assert values["tl/flash"] == "0.90x" and values["tl/cudnn"] == "0.50x"
    second = lines[3]
    cells = second.split("  fa4: ")[0].split()
    assert dict(zip(names + ratios, cells[4:], strict=True))["fa4"] == "n/a"
    assert cells[-3:] == ["n/a", "n/a", "n/a"]  # no ratio to an FA4 that was not timed
    assert second.endswith("  fa4: not timed: gradients disagree with sdpa-flash (dq max|diff| 1 (tol 0.1))")


def test_table_without_fa4_keeps_its_columns():
    row = bb.make_row(
        BASE, {"tl": timing(10.0), "sdpa-flash": timing(9.0), "sdpa-cudnn": timing(5.0)}, 2.5e12
    )
    lines = bb.format_table([row], ("_det",), "NVIDIA H200").splitlines()
    names = ["tl", "tl_det", "sdpa-flash", "sdpa-cudnn", "flex"]
    assert lines[1].split() == ["d", "causal", "seqlen", "pass", *names, "tl/flash", "tl/cudnn"]
    assert lines[2].split()[-2:] == ["0.90x", "0.50x"]
