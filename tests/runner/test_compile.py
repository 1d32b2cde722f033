"""NVRTC compiles (CPU only): the naive ABI kernel as a cubin and as PTX, errors mapped to TL, the cache."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings")
pytest.importorskip("cutlass_library")

from runner.compile import CompileError, CompileJob, compile_many, compile_source

NAIVE = (Path(__file__).parent / "data" / "naive_attention.cu").read_text()
TRIVIAL = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] = 1.f; }\n'


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TL_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.nvrtc
def test_cute_kernel_cubin_then_cache_hit():
    first = compile_source(NAIVE, arch="sm_80", name="naive_attention.cu")
    assert first.kind == "cubin" and first.target == "sm_80" and not first.cached
    assert first.code[:4] == b"\x7fELF" and first.seconds > 0
    second = compile_source(NAIVE, arch="sm_80", name="naive_attention.cu")
    assert second.cached and second.code == first.code and second.key == first.key


@pytest.mark.nvrtc
def test_older_arch_than_device_compiles_to_ptx(monkeypatch):
    from runner import finalize

    monkeypatch.setattr(finalize, "ptxas_version", lambda: None)  # keep the PTX, whatever ptxas is here
    ptx = compile_source(NAIVE, arch="sm_75", device_arch="sm_90", name="naive_attention.cu")
    assert ptx.kind == "ptx" and ptx.target == "compute_75"
    text = ptx.code.decode()
    assert ".target sm_75" in text and ".entry naive_attention" in text


@pytest.mark.nvrtc
def test_error_maps_to_tl_line_through_line_directive():
    src = TRIVIAL.replace("x[threadIdx.x] = 1.f;", '\n#line 12 "mha.tl"\n  acc_o = 1;')
    with pytest.raises(CompileError) as info:
        compile_source(src, arch="sm_80", name="mha.cu")
    err = info.value
    assert [(r.file, r.line) for r in err.errors] == [("mha.tl", 12)]
    assert 'identifier "acc_o" is undefined' in err.errors[0].message
    assert "mha.tl(12)" in err.log and err.options["arch"] == "sm_80"
    assert "mha.tl:12" in str(err)


def test_newer_arch_than_device_is_refused():
    from runner.toolchain import ToolchainError

    with pytest.raises(ToolchainError, match="cannot run on this sm_80"):
        compile_source(TRIVIAL, arch="sm_90", device_arch="sm_80")


@pytest.mark.nvrtc
def test_compile_many_keeps_order_and_reports_failures_as_values():
    jobs = [
        CompileJob(source=TRIVIAL, arch="sm_80", name="a.cu"),
        CompileJob(source=TRIVIAL.replace("1.f", "undefined_name"), arch="sm_80", name="b.cu"),
        CompileJob(source=TRIVIAL, arch="sm_75", device_arch="sm_80", name="c.cu"),
    ]
    results = compile_many(jobs, max_workers=2)
    assert [type(r).__name__ for r in results] == ["CompiledKernel", "CompileError", "CompiledKernel"]
    assert results[0].name == "a.cu" and results[2].kind == "ptx"
    assert results[1].errors[0].file == "b.cu"
    again = compile_many(jobs[:1], max_workers=2)  # a warm cache answers without workers
    assert again[0].cached


@pytest.mark.nvrtc
def test_ptx_for_an_older_arch_is_assembled_for_the_device_when_ptxas_can(monkeypatch):
    from runner import finalize

    monkeypatch.setattr(finalize, "ptxas_version", lambda: None)  # no ptxas: the driver JIT path
    kept = compile_source(TRIVIAL, arch="sm_75", device_arch="sm_80", name="t.cu")
    assert kept.kind == "ptx" and kept.sass_arch is None


def test_ptxas_assembles_ptx_into_a_cubin():
    from runner import finalize

    if finalize.ptxas_path() is None or finalize.ptxas_version() is None:
        pytest.skip("no ptxas on this machine")
    # Hand-written PTX at an ISA version every CUDA 12/13 ptxas reads.
    ptx = b"""
.version 8.0
.target sm_75
.address_size 64
.visible .entry k(.param .u64 x)
{
    .reg .b64 %rd<3>;
    .reg .f32 %f<2>;
    ld.param.u64 %rd1, [x];
    cvta.to.global.u64 %rd2, %rd1;
    mov.f32 %f1, 0f3F800000;
    st.global.f32 [%rd2], %f1;
    ret;
}
"""
    cubin, log = finalize.assemble(ptx, "sm_80")
    assert cubin is not None and cubin[:4] == b"\x7fELF", log
    bad, why = finalize.assemble(b".version 8.0\n.target sm_75\nnot ptx", "sm_80")
    assert bad is None and why
