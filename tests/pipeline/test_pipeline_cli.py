"""`tl build/run/bench` through `pipeline.cli.register`, without a GPU.

The translator is replaced by a stand-in that emits the naive ABI kernel, so these tests exercise the
pipeline (files, hashes, compile, exit codes) whatever state the real code generator is in.
"""

from __future__ import annotations

import argparse
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

import translator
from pipeline import cli
from runner.abi import LaunchSpec
from translator import TranslateError

ROOT = Path(__file__).resolve().parents[2]
NAIVE = (ROOT / "tests" / "runner" / "data" / "naive_attention.cu").read_text()
SPEC = LaunchSpec(
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


@dataclass
class FakeTranslation:
    source: str
    launch: LaunchSpec
    source_map: dict[int, int]


def run_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="tl")
    sub = parser.add_subparsers(dest="command", required=True)
    cli.register(sub)
    args = parser.parse_args(list(argv))
    return args.func(args)


@pytest.fixture
def tl_file(tmp_path, monkeypatch):
    monkeypatch.setenv("TL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(
        translator, "translate", lambda analysis, *, tl_path=None, **kw: FakeTranslation(NAIVE, SPEC, {})
    )
    path = tmp_path / "mha_fwd.tl"
    shutil.copy(ROOT / "examples" / "mha_fwd.tl", path)
    return path


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr("runner.launch.cuda_device_arch", lambda: None)


@pytest.mark.nvrtc
def test_build_writes_cu_and_launch_json_then_hits_cache(tl_file, capsys):
    assert run_cli("build", str(tl_file)) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "mha_fwd.cu: cubin for sm_80, compiled in" in out
    cu = tl_file.with_suffix(".cu")
    assert cu.read_text() == NAIVE
    spec = LaunchSpec.from_json((tl_file.parent / "mha_fwd.launch.json").read_text())
    assert spec.kernel_name == "naive_attention" and spec.source_sha256 is not None
    assert run_cli("build", str(tl_file)) == cli.EXIT_OK
    assert "cached (compiled in" in capsys.readouterr().out


@pytest.mark.nvrtc
def test_build_refuses_to_overwrite_a_hand_edit(tl_file, capsys):
    assert run_cli("build", str(tl_file)) == cli.EXIT_OK
    cu = tl_file.with_suffix(".cu")
    cu.write_text(NAIVE.replace("One thread per query row", "Edited: one thread per query row"))
    assert run_cli("build", str(tl_file)) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "edited by hand" in err and "--force" in err
    assert "Edited:" in cu.read_text()
    assert run_cli("build", "--force", str(tl_file)) == cli.EXIT_OK
    assert cu.read_text() == NAIVE


def test_build_reports_check_errors_with_location(tl_file, capsys):
    tl_file.write_text(tl_file.read_text().replace("Compute Softmax S", "Compute Sofmax S"))
    assert run_cli("build", str(tl_file)) == cli.EXIT_FAILED
    err = capsys.readouterr().err
    assert f"{tl_file}:" in err and "error TL" in err
    assert not tl_file.with_suffix(".cu").exists()


def test_build_reports_translate_errors(tl_file, monkeypatch, capsys):
    from tl_language.diagnostics import make
    from tl_language.source import Range

    def refuse(analysis, *, tl_path=None, **kw):
        raise TranslateError([make("TL501", Range.of(4, 0, 8), "no kernel for this pattern")])

    monkeypatch.setattr(translator, "translate", refuse)
    assert run_cli("build", str(tl_file)) == cli.EXIT_FAILED
    assert f"{tl_file}:5:1: error TL501: no kernel for this pattern" in capsys.readouterr().err


def test_build_rejects_a_cu_and_a_missing_file(tl_file, capsys):
    assert run_cli("build", str(tl_file.with_suffix(".cu"))) == cli.EXIT_USAGE
    assert run_cli("build", str(tl_file.with_name("absent.tl"))) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "takes .tl files" in err and "cannot read" in err


@pytest.mark.parametrize("command", ["run", "bench"])
def test_run_and_bench_without_a_gpu_exit_3(tl_file, no_gpu, command, capsys):
    assert run_cli(command, str(tl_file)) == cli.EXIT_NO_DEVICE
    assert "no CUDA device found" in capsys.readouterr().err


def test_run_checks_a_hand_edited_cu_before_anything_else(tl_file, no_gpu, capsys):
    cu = tl_file.with_suffix(".cu")
    cu.write_text(NAIVE.replace("long long q_row_stride", "int q_row_stride"))
    (tl_file.parent / "mha_fwd.launch.json").write_text(SPEC.to_json())
    assert run_cli("run", str(cu)) == cli.EXIT_FAILED
    err = capsys.readouterr().err
    assert "parameter 12 of `naive_attention` is `int q_row_stride`" in err
    cu.write_text(NAIVE)
    assert run_cli("run", str(cu)) == cli.EXIT_NO_DEVICE  # the ABI is fine; then the GPU is missing


def test_run_rejects_a_dtype_the_cu_was_not_built_for(tl_file, capsys):
    cu = tl_file.with_suffix(".cu")
    cu.write_text(NAIVE)
    (tl_file.parent / "mha_fwd.launch.json").write_text(SPEC.to_json())
    assert run_cli("run", "--dtype", "bf16", str(cu)) == cli.EXIT_USAGE
    assert "built for fp16, not bf16" in capsys.readouterr().err


def test_launch_json_is_valid_json(tl_file):
    from pipeline.build import prepare

    t = prepare(tl_file)
    data = json.loads((tl_file.parent / "mha_fwd.launch.json").read_text())
    assert data["source_sha256"] == t.spec.source_sha256


def test_build_skips_a_sketch_and_says_how_to_fill_it(tmp_path, capsys):
    path = tmp_path / "sketch_fwd.tl"
    shutil.copy(ROOT / "examples" / "sketch_fwd.tl", path)
    assert run_cli("build", str(path)) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "skipped" in out and "sketch" in out and "tl complete" in out
    assert not path.with_suffix(".cu").exists()
