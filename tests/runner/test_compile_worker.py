"""The persistent compile worker of `compile_many`: its framing, a worker that dies or hangs (answered with a
`CompileError`, the next job gets a fresh process), and (`nvrtc`) one worker compiling two jobs, the second
reading the precompiled header the first wrote."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from runner.compile import CompileError, CompileJob, CompileWorker, read_frame, write_frame

ROOT = Path(__file__).resolve().parents[2]
JOB = CompileJob(source='extern "C" __global__ void k() {}\n', arch="sm_80", name="k.cu")


def test_frames_round_trip_and_end_cleanly() -> None:
    r, w = os.pipe()
    with os.fdopen(r, "rb") as reader, os.fdopen(w, "wb") as writer:
        write_frame(writer, b"first")
        write_frame(writer, b"")
        writer.close()
        assert read_frame(reader) == b"first" and read_frame(reader) == b""
        with pytest.raises(EOFError):
            read_frame(reader)


def test_read_frame_times_out() -> None:
    r, w = os.pipe()
    with os.fdopen(r, "rb") as reader, os.fdopen(w, "wb"):
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            read_frame(reader, deadline=start + 0.2)
        assert time.monotonic() - start < 5


def test_a_worker_that_dies_is_a_compile_error_and_the_next_job_restarts_it() -> None:
    crash = [
        sys.executable,
        "-c",
        "import sys; sys.stdin.buffer.read(8); sys.stderr.write('boom'); sys.exit(3)",
    ]
    with CompileWorker(command=crash) as worker:
        first = worker.run(JOB)
        second = worker.run(JOB)
        assert worker.started == 2
    assert isinstance(first, CompileError) and "exited with 3" in first.message and "boom" in first.message
    assert isinstance(second, CompileError) and first.source_name == "k.cu"


def test_a_worker_past_its_timeout_is_killed() -> None:
    hang = [sys.executable, "-c", "import time; time.sleep(120)"]
    with CompileWorker(command=hang, timeout=0.5) as worker:
        start = time.monotonic()
        result = worker.run(JOB)
        assert time.monotonic() - start < 30 and worker._proc is None
    assert isinstance(result, CompileError) and "did not finish within 0.5 s" in result.message


@pytest.mark.nvrtc
def test_one_worker_compiles_two_jobs_the_second_with_the_first_ones_header(tmp_path, monkeypatch) -> None:
    pytest.importorskip("cuda.bindings")
    pytest.importorskip("cutlass_library")
    monkeypatch.setenv("TL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TL_PCH", raising=False)
    head = "#include <cuda/std/cstdint>\n"
    jobs = [
        CompileJob(source=head + f'extern "C" __global__ void k(int* x) {{ x[0] = {i}; }}\n', arch="sm_80")
        for i in (1, 2)
    ]
    with CompileWorker(precompiled_headers=True) as worker:
        results = [worker.run(job) for job in jobs]
        assert worker.started == 1
    assert [getattr(r, "pch", r) for r in results] == ["created", "used"]
    # The worker removed its headers at exit; what it found (a small header pays) stays for others.
    pch_dir = tmp_path / "cache" / "pch"
    assert [p.name for p in pch_dir.iterdir()] == ["verdicts"]
    (verdict,) = (pch_dir / "verdicts").iterdir()
    assert '"keep": true' in verdict.read_text()


def test_several_jobs_in_this_process_enable_headers_for_their_duration_only(tmp_path, monkeypatch) -> None:
    pytest.importorskip("cuda.bindings")
    pytest.importorskip("cutlass_library")
    from runner import compile as rc

    monkeypatch.setenv("TL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TL_PCH", raising=False)
    seen: list[bool] = []
    monkeypatch.setattr(rc, "_run_job", lambda job: seen.append(rc.pch_enabled()) or JOB)
    rc.compile_many([JOB, CompileJob(source=JOB.source + "\n", arch="sm_80")], max_workers=1)
    rc.compile_many([JOB], max_workers=1)
    assert seen == [True, True, False] and not rc.pch_enabled()


def test_only_jobs_that_share_an_include_block_may_write_a_header(tmp_path, monkeypatch) -> None:
    pytest.importorskip("cuda.bindings")
    pytest.importorskip("cutlass_library")
    from runner import compile as rc

    monkeypatch.setenv("TL_CACHE_DIR", str(tmp_path / "cache"))
    block = "#include <cuda/std/cstdint>\n"
    jobs = [
        CompileJob(source=block + "int a;\n", arch="sm_80", name="a.cu"),
        CompileJob(source="#include <cuda/std/tuple>\nint b;\n", arch="sm_80", name="b.cu"),
        CompileJob(source=block + "int c;\n", arch="sm_80", name="c.cu"),
        CompileJob(source=block + "int d;\n", arch="sm_89", name="d.cu"),  # another target: another header
    ]
    seen: dict[str, bool] = {}
    monkeypatch.setattr(rc, "_run_job", lambda job: seen.update({job.name: job.new_header}) or JOB)
    rc.compile_many(jobs, max_workers=1)
    assert seen == {"a.cu": True, "b.cu": False, "c.cu": True, "d.cu": False}


def test_an_isolated_single_miss_compiles_in_a_worker_process(tmp_path, monkeypatch) -> None:
    pytest.importorskip("cuda.bindings")
    pytest.importorskip("cutlass_library")
    from runner import compile as rc

    monkeypatch.setenv("TL_CACHE_DIR", str(tmp_path / "cache"))
    here: list[str] = []
    workers: list[list[str]] = []
    monkeypatch.setattr(rc, "_run_job", lambda job: here.append(job.name) or JOB)
    monkeypatch.setattr(
        rc,
        "_run_in_workers",
        lambda items, n: workers.append([job.name for _, job in items]) or [(i, JOB) for i, _ in items],
    )
    job = CompileJob(source="int x;\n", arch="sm_80", name="x.cu")
    rc.compile_many([job])
    assert here == ["x.cu"] and not workers  # one miss compiles here by default
    rc.compile_many([job], isolated=True)
    assert workers == [["x.cu"]] and here == ["x.cu"]


def test_the_backward_compiles_in_an_isolated_worker(monkeypatch) -> None:
    from pipeline import backward as pb

    calls: list[tuple[int, bool]] = []

    def fake(jobs, *, max_workers=None, isolated=False):
        jobs = list(jobs)
        calls.append((len(jobs), isolated))
        return [JOB]

    monkeypatch.setattr(pb, "compile_many", fake)
    build = pb.translate_backward(str(ROOT / "examples" / "mha_fwd.tl"))
    assert build.compile() is JOB and calls == [(1, True)]
