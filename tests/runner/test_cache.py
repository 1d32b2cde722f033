from runner.cache import KernelCache, cache_key


def test_key_changes_with_every_input():
    base = dict(
        source="a", options={"arch": "sm_80"}, fingerprint={"nvrtc": "13.0"}, target="sm_80", kind="cubin"
    )
    k0 = cache_key(**base)
    assert k0 == cache_key(**base)
    for field, value in [
        ("source", "b"),
        ("options", {"arch": "sm_89"}),
        ("fingerprint", {"nvrtc": "13.1"}),
        ("target", "compute_80"),
        ("kind", "ptx"),
    ]:
        assert cache_key(**{**base, field: value}) != k0


def test_put_get_roundtrip(tmp_path):
    cache = KernelCache(tmp_path)
    assert cache.get("ab" * 32) is None
    cache.put("ab" * 32, b"\x7fELF code", {"seconds": 1.5})
    hit = cache.get("ab" * 32)
    assert hit is not None and hit.code == b"\x7fELF code" and hit.meta["seconds"] == 1.5
    assert not list(tmp_path.rglob("*.tmp"))  # atomic writes leave no temporaries


def test_corrupt_entry_is_a_miss(tmp_path):
    cache = KernelCache(tmp_path)
    cache.put("cd" * 32, b"code", {})
    next(tmp_path.rglob("*.bin")).write_bytes(b"torn")
    assert cache.get("cd" * 32) is None


def test_cache_dir_from_env(tmp_path, monkeypatch):
    from runner.cache import cache_dir

    monkeypatch.setenv("TL_CACHE_DIR", str(tmp_path))
    assert cache_dir() == tmp_path
