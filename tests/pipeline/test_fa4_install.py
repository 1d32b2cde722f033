"""FA4 over two device calls: benchmarks/fa4_wheels.sh's layout and benchmarks/fa4_install.sh's staging,
rebuild, checksums, install and failure messages, run in a temporary checkout on tiny locally built wheels
(real pip install into a temporary --target; nothing downloaded, no GPU)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("bash", "split", "sha256sum", "awk", "cmp")),
    reason="needs bash and coreutils",
)

# The DSL puts its packages on sys.path through this .pth file; only site.addsitedir reads it.
PTH = (
    "import sys, os, nvidia_cutlass_dsl; "
    "sys.path.insert(0, os.path.join(nvidia_cutlass_dsl.__path__[0], 'dsl_packages'))\n"
)


def make_wheel(
    dest: Path, dist: str, version: str, files: dict[str, bytes], requires: tuple[str, ...] = ()
) -> Path:
    """A minimal valid py3-none-any wheel that pip installs with --no-index --no-deps --target."""
    info = f"{dist}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {
        **files,
        f"{info}/METADATA": meta.encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    path = dest / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:  # stored: the big one stays big
        for name, data in {**files, f"{info}/RECORD": record.encode()}.items():
            z.writestr(name, data)
    return path


def fake_wheels(dest: Path, extra_requires: tuple[str, ...] = ()) -> Path:
    """Stand-ins for the pinned wheels: flash_attn.cute imports a package that only the .pth provides."""
    dest.mkdir(parents=True)
    make_wheel(
        dest,
        "flash_attn_4",
        "4.0.0b36",
        {
            "flash_attn/__init__.py": b"",
            "flash_attn/cute/__init__.py": b"import tl_fake_dsl\n\ndef flash_attn_func(*a):\n    return a\n",
        },
        ("nvidia-cutlass-dsl>=4.6.2", "torch", "einops", 'pytest; extra == "dev"', *extra_requires),
    )
    make_wheel(
        dest,
        "nvidia_cutlass_dsl",
        "4.8.1",
        {
            "nvidia_cutlass_dsl/__init__.py": b"",
            "nvidia_cutlass_dsl/dsl_packages/tl_fake_dsl/__init__.py": b"",
            "nvidia_cutlass_dsl_packages.pth": PTH.encode(),
        },
        ("nvidia-cutlass-dsl-libs-base==4.8.1", "nvidia-cutlass-dsl-libs-cu12==4.8.1"),
    )
    # The big runtime wheel: incompressible, so fa4_wheels.sh must split it in two.
    blob = os.urandom(300_000)
    make_wheel(dest, "nvidia_cutlass_dsl_libs_cu13", "4.8.1", {"tl_fake_cu13/blob.bin": blob})
    for dist, ver, mod in [
        ("nvidia_cutlass_dsl_libs_base", "4.8.1", "tl_fake_base"),
        ("nvidia_cutlass_dsl_libs_core", "4.8.1", "tl_fake_core"),
        ("apache_tvm_ffi", "0.1.15.post2", "tl_fake_tvm_ffi"),
        ("torch_c_dlpack_ext", "0.1.5", "tl_fake_dlpack"),
        ("quack_kernels", "0.6.5", "tl_fake_quack"),
        ("einops", "0.8.2", "tl_fake_einops"),
        ("protobuf", "7.36.2", "tl_fake_protobuf"),
    ]:
        old_python_only = ('backports.strenum; python_version < "3.11"',)
        make_wheel(dest, dist, ver, {f"{mod}/__init__.py": b""}, old_python_only)
    return dest


def run(script: Path, *args: str, env_extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TL_FA4_PYTHON": sys.executable, **env_extra}
    return subprocess.run(
        ["bash", str(script), *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


class Checkout:
    """A temporary checkout holding the two scripts, and the device's staging folder beside it."""

    def __init__(self, tmp: Path) -> None:
        self.root = tmp / "checkout"
        (self.root / "benchmarks").mkdir(parents=True)
        for name in ("fa4_wheels.sh", "fa4_install.sh"):
            shutil.copy(REPO / "benchmarks" / name, self.root / "benchmarks" / name)
        self.stage = tmp / "device-tmp" / "tl-fa4"
        self.env = {"TL_FA4_DIR": str(self.stage)}
        self.aside = tmp / "aside"
        self.aside.mkdir()

    def wheels(self, src: Path) -> subprocess.CompletedProcess[str]:
        return run(self.root / "benchmarks" / "fa4_wheels.sh", "--from", str(src), env_extra=self.env)

    def install(self) -> subprocess.CompletedProcess[str]:
        return run(self.root / "benchmarks" / "fa4_install.sh", env_extra=self.env)

    def carry(self, *parts: str) -> None:
        """Leave exactly these of part1/part2 in the checkout, as one device call's carry would."""
        for part in ("part1", "part2"):
            here, there = self.root / ".fa4" / part, self.aside / part
            if part in parts and not here.exists():
                shutil.move(there, here)
            elif part not in parts and here.exists():
                shutil.move(here, there)


@pytest.fixture
def laid_out(tmp_path: Path) -> Checkout:
    co = Checkout(tmp_path)
    done = co.wheels(fake_wheels(tmp_path / "src"))
    assert done.returncode == 0, done.stdout + done.stderr
    return co


def test_layout_splits_the_big_wheel_across_two_balanced_folders(laid_out: Checkout):
    p1, p2 = laid_out.root / ".fa4" / "part1", laid_out.root / ".fa4" / "part2"
    big = "nvidia_cutlass_dsl_libs_cu13-4.8.1-py3-none-any.whl"
    assert sorted(f.name for f in p1.iterdir()) == ["MANIFEST.txt", f"{big}.part0"]
    names = sorted(f.name for f in p2.iterdir())
    assert f"{big}.part1" in names and big not in names
    assert len(names) == 1 + 1 + 9  # manifest, piece 2, the 9 other wheels
    size = {p: sum(f.stat().st_size for f in p.iterdir()) for p in (p1, p2)}
    assert abs(size[p1] - size[p2]) < 0.05 * max(size.values())
    manifest = (p2 / "MANIFEST.txt").read_text()
    assert manifest == (p1 / "MANIFEST.txt").read_text()
    assert "extra einops einops-0.8.2-py3-none-any.whl" in manifest


def test_two_calls_install_and_the_pth_file_needs_addsitedir(laid_out: Checkout):
    laid_out.carry("part1")
    call1 = laid_out.install()
    assert call1.returncode == 3, call1.stdout
    assert "part 1 of 2 staged: send call 2" in call1.stdout

    laid_out.carry("part2")  # call 2 replaces the carried paths: part1 is gone from the checkout
    call2 = laid_out.install()
    assert call2.returncode == 0, call2.stdout
    assert "sha256 checked" in call2.stdout
    site = laid_out.stage / "site"
    assert call2.stdout.splitlines()[-1] == f"TL_FA4_SITE={site}"

    imp = "from flash_attn.cute import flash_attn_func; print(flash_attn_func(1))"
    with_site = f"import site, sys; site.addsitedir({str(site)!r}); {imp}"
    ok = subprocess.run([sys.executable, "-c", with_site], capture_output=True, text=True, check=False)
    assert ok.returncode == 0 and ok.stdout.strip() == "(1,)", ok.stderr
    plain = subprocess.run(
        [sys.executable, "-c", imp],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(site)},
    )
    assert plain.returncode != 0 and "tl_fake_dsl" in plain.stderr  # PYTHONPATH does not read .pth files

    laid_out.carry()  # a later call on the same warm machine, carrying nothing
    later = laid_out.install()
    assert later.returncode == 0 and "ready" in later.stdout, later.stdout


def test_part2_without_staged_part1_says_to_send_call_1_first(laid_out: Checkout):
    laid_out.carry("part2")
    res = laid_out.install()
    assert res.returncode == 1
    assert "piece 1 is not staged" in res.stdout and "call 1 (carry .fa4/part1) must run first" in res.stdout


def test_damaged_piece_is_a_checksum_mismatch(laid_out: Checkout):
    laid_out.carry("part1")
    assert laid_out.install().returncode == 3
    piece = next((laid_out.stage / "parts").glob("*.part0"))
    data = bytearray(piece.read_bytes())
    data[1000] ^= 0xFF
    piece.write_bytes(bytes(data))
    laid_out.carry("part2")
    res = laid_out.install()
    assert res.returncode == 1
    assert "checksum mismatch for the staged piece 1" in res.stdout
    assert not (laid_out.stage / "site").exists()


def test_piece_from_another_layout_is_refused(laid_out: Checkout, tmp_path: Path):
    laid_out.carry("part1")
    assert laid_out.install().returncode == 3
    # A second fa4_wheels.sh run (new random payload) makes a part2 that does not belong to the staged piece.
    redo = laid_out.wheels(fake_wheels(tmp_path / "src2"))
    assert redo.returncode == 0, redo.stderr
    laid_out.carry("part2")
    res = laid_out.install()
    assert res.returncode == 1 and "another benchmarks/fa4_wheels.sh layout" in res.stdout


def test_nothing_carried_leaves_fa4_off(tmp_path: Path):
    res = Checkout(tmp_path).install()
    assert res.returncode == 4 and "the fa4 baseline stays off" in res.stdout


def test_a_dependency_nobody_provides_stops_the_layout(tmp_path: Path):
    co = Checkout(tmp_path)
    res = co.wheels(fake_wheels(tmp_path / "src", extra_requires=("leftpad>=1",)))
    assert res.returncode == 1
    assert "not covered: flash_attn_4-4.0.0b36-py3-none-any.whl requires 'leftpad>=1'" in res.stderr
    assert not (co.root / ".fa4" / "part1").exists()


def test_run_on_device_rejects_an_unknown_mode(tmp_path: Path):
    root = tmp_path / "checkout"
    (root / "benchmarks").mkdir(parents=True)
    shutil.copy(REPO / "benchmarks" / "run_on_device.sh", root / "benchmarks")
    res = run(root / "benchmarks" / "run_on_device.sh", "--dtype", env_extra={"OUT": str(tmp_path / "out")})
    assert res.returncode == 2 and "unknown mode '--dtype'" in res.stdout
