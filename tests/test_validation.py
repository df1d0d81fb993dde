"""Bad keys and bad values are refused in the caller's thread, with clear messages."""

from __future__ import annotations

import fractions

import numpy as np
import pytest
import torch

import tiered
from tiered.keys import canonical_key, key_filename


@pytest.fixture
def cache(tmp_path):
    with tiered.Cache([tiered.HostTier("4MiB"), tiered.DirectoryTier(tmp_path / "bb")]) as c:
        yield c


@pytest.mark.parametrize("key", ["../x", "/abs", "a/b", "nul\x00", "", ".", "..", "a\\b",
                                 ("ok", "../x"), (), "\ud800x", ("ok", "\udfff")])
def test_bad_keys_are_refused(cache, key):
    with pytest.raises(ValueError):
        cache.store(key, np.zeros(2))
    assert len(cache) == 0


def test_a_unicode_key_is_stored_drained_and_flushed(cache):
    cache.store(("état", "波"), np.arange(4))
    cache.flush()
    assert cache.revisit(("état", "波")).tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("key", [1.5, True, None, ["a"], ("a", ("b",)), b"bytes"])
def test_keys_of_wrong_type_are_refused(cache, key):
    with pytest.raises(TypeError):
        cache.store(key, np.zeros(2))


def test_good_keys_are_canonical_and_stay_inside_the_root(cache, tmp_path):
    keys = ["plain", 7, ("wavefield", 120), "dots...", "~tilde", "ünï", "x" * 1000, -3,
            np.int64(5)]
    for i, key in enumerate(keys):
        cache.store(key, np.full(3, i))
    cache.flush()
    assert canonical_key(np.int64(5)) == 5 and isinstance(canonical_key(np.int64(5)), int)
    for path in (tmp_path / "bb").iterdir():
        assert path.parent == tmp_path / "bb" and not path.name.startswith(".")
    for i, key in enumerate(keys):
        np.testing.assert_array_equal(cache.revisit(key), np.full(3, i))
    assert "/" not in key_filename("a" * 10) and "." not in key_filename("..")


@pytest.mark.parametrize("value, where", [
    ({"a": [1, object()]}, "['a'][1]"),
    ({"a": {"b": np.array([object()], dtype=object)}}, "['a']['b']"),
    ([fractions.Fraction(1, 3)], "[0]"),
    ({"x": {1, 2}}, "['x']"),
    ({(1, 2): 3}, ""),
    ({"sp": torch.eye(3).to_sparse()}, "['sp']"),
])
def test_bad_values_name_the_leaf(cache, value, where):
    with pytest.raises(TypeError) as info:
        cache.store("k", value)
    assert f"value{where}" in str(info.value)
    assert "k" not in cache


def test_unknown_key_is_a_key_error(cache):
    with pytest.raises(KeyError, match="never stored"):
        cache.revisit("missing")
    with pytest.raises(tiered.UnknownKeyError):
        cache.discard("missing")


def test_bad_configuration_messages(tmp_path):
    with pytest.raises(ValueError, match="non-empty"):
        tiered.Cache([])
    with pytest.raises(ValueError, match="unique"):
        tiered.Cache([tiered.HostTier("1MiB"), tiered.HostTier("1MiB")])
    with pytest.raises(ValueError, match="eviction='nope'"):
        tiered.Cache([tiered.HostTier("1MiB")], eviction="nope")
    with pytest.raises(ValueError, match="on_full"):
        tiered.Cache([tiered.HostTier("1MiB")], on_full="drop")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="capacity='lots'"):
        tiered.HostTier("lots")
    assert tiered.HostTier("1.5KiB", prefault=False).capacity_bytes == 1536


def test_device_tier_without_cuda_fails_clearly():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the no-CUDA error path cannot be exercised")
    with pytest.raises(tiered.TieredError, match="CUDA is not available"):
        tiered.DeviceTier("1MiB")


def test_closed_cache_refuses_calls(tmp_path):
    cache = tiered.Cache([tiered.HostTier("1MiB")])
    cache.close()
    cache.close()  # idempotent
    with pytest.raises(tiered.CacheClosedError):
        cache.store("k", np.zeros(1))


def test_revisit_into_out_arrays(tmp_path):
    import torch

    cache = tiered.Cache([tiered.HostTier("1MiB"), tiered.DirectoryTier(tmp_path)])
    cache.store("a", np.arange(10.0))
    cache.store("sd", {"w": torch.ones(3), "b": np.arange(2, dtype=np.int32), "step": 7})
    buf = np.empty(10)
    assert cache.revisit("a", out=buf) is buf and buf[9] == 9
    into = {"w": torch.empty(3), "b": np.empty(2, np.int32), "step": 0}
    got = cache.revisit("sd", out=into)
    assert got["w"].data_ptr() == into["w"].data_ptr() and got["b"] is into["b"]
    assert got["step"] == 7
    assert torch.equal(into["w"], torch.ones(3)) and into["b"].tolist() == [0, 1]
    for bad, match in ((np.empty(9), r"\(9,\)"), (np.empty(10, np.float32), "<f4"),
                       (np.empty(20)[::2], "contiguous"), ([np.empty(10)], "not built like")):
        with pytest.raises(ValueError, match=match):
            cache.revisit("a", out=bad)
    cache.flush()
    cache.close()
    reopened = tiered.Cache([tiered.HostTier("1MiB"), tiered.DirectoryTier(tmp_path)])
    buf[:] = 0
    assert reopened.revisit("a", out=buf)[3] == 3  # from the persistent tier, verified
    reopened.close()


def test_the_short_path_of_key_filename_names_files_as_the_general_one(monkeypatch):
    """Ints and tuples of ints and plain names skip JSON and quoting: same names."""
    import random

    import tiered.keys as keys_module

    rng = random.Random(7)
    parts = [0, 7, -3, 10**20, -(10**200), "rtm", "u", "w-1", "A_b", "x" * 16, "x" * 17,
             "dots.", "ü", "sp ace", "~t", "%"]
    keys = [rng.choice(parts) for _ in range(300)]
    keys += [tuple(rng.choice(parts) for _ in range(rng.randint(1, 10))) for _ in range(3000)]
    keys = [canonical_key(k) for k in keys]
    short = [key_filename(k) for k in keys]
    assert sum(keys_module._simple_filename(k) is not None for k in keys) > 300
    monkeypatch.setattr(keys_module, "_simple_filename", lambda key: None)
    assert short == [key_filename(k) for k in keys]


def test_cache_takes_a_cache_config_and_its_defaults_from_it(tmp_path):
    from tiered.config import CacheConfig

    tiers = [tiered.HostTier("4MiB"), tiered.DirectoryTier(tmp_path / "bb")]
    with tiered.Cache(tiers) as cache:
        assert cache.config == CacheConfig()  # no default of its own
    lazy = CacheConfig(write_back="lazy", full_timeout_s=5.0)
    with tiered.Cache(tiers, config=lazy) as cache:
        assert cache.config == lazy
    with tiered.Cache(tiers, config=lazy, full_timeout_s=7.0) as cache:  # a keyword wins
        assert cache.config == CacheConfig(write_back="lazy", full_timeout_s=7.0)
    with pytest.raises(ValueError, match="write_back"):
        tiered.Cache(tiers, write_back="sometimes")  # type: ignore[arg-type]
