"""The device tier on torch's CPU device (the same code path a CUDA device takes)."""

from __future__ import annotations

import pytest
import torch
from helpers import assert_same

import tiered


def test_device_tier_round_trip_and_drain(tmp_path):
    value = {"w": torch.randn(64, 64), "step": 3, "h": torch.arange(10, dtype=torch.int16)}
    cache = tiered.Cache([tiered.DeviceTier("1MiB", device="cpu"), tiered.HostTier("1MiB"),
                          tiered.HDF5Tier(tmp_path / "pfs")])
    for i in range(12):  # 16 KiB each: the 1 MiB device tier must evict clean entries
        cache.store(i, {**value, "step": i})
    cache.flush()
    for i in range(12):
        assert_same(cache.revisit(i), {**value, "step": i})
    assert cache.stats().tiers["device"].bytes_in > 0
    cache.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensor_comes_back_on_cuda(tmp_path):
    value = torch.randn(1024, device="cuda")
    with tiered.Cache([tiered.DeviceTier("16MiB"), tiered.HDF5Tier(tmp_path / "pfs")]) as c:
        c.store("g", value)
        c.flush()
        got = c.revisit("g")
    assert got.device.type == "cuda" and torch.equal(got, value)


def test_host_tier_is_pageable_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the host tier pins by default here")
    tier = tiered.HostTier("1MiB")  # torch is imported, but it sees no CUDA device
    assert not tier.pinned
    with pytest.raises(tiered.TieredError, match="CUDA is not available"):
        tiered.HostTier("1MiB", pinned=True)
    with pytest.raises(TypeError, match="True, False or None"):
        tiered.HostTier("1MiB", pinned="yes")
    tier.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_pinned_host_tier_round_trip_and_unlock():
    tier = tiered.HostTier("64MiB")
    assert tier.pinned and not tiered.HostTier("1MiB", pinned=False).pinned
    value = {"w": torch.randn(1 << 20, device="cuda"), "n": torch.arange(5)}
    with tiered.Cache([tier]) as c:
        c.store("s", value)
        got = c.revisit("s")
        into = {"w": torch.empty_like(value["w"]), "n": torch.empty_like(value["n"])}
        c.revisit("s", out=into)
    assert got["w"].device.type == "cuda" and torch.equal(got["w"], value["w"])
    assert torch.equal(into["w"], value["w"]) and torch.equal(into["n"], value["n"])
    assert not tier.pinned  # close() unlocked it: locking the same range again succeeds
    cudart = torch.cuda.cudart()
    assert int(cudart.cudaHostRegister(tier._buf.ctypes.data, len(tier._buf), 1)) == 0
    assert int(cudart.cudaHostUnregister(tier._buf.ctypes.data)) == 0


class StubRuntime:
    """Stands in for ``torch.cuda.cudart()``: there is no CUDA device here to page-lock
    memory with (tests/gpu_check.sh runs the real one). Records what is registered."""

    def __init__(self, rc: int) -> None:
        self.rc = rc
        self.registered: dict[int, int] = {}

    def cudaHostRegister(self, ptr: int, size: int, flags: int) -> int:  # noqa: N802
        if self.rc == 0:
            self.registered[ptr] = size
        return self.rc

    def cudaHostUnregister(self, ptr: int) -> int:  # noqa: N802
        del self.registered[ptr]
        return 0


def test_host_tier_pins_once_unpins_at_close_and_reports_failures(monkeypatch, caplog):
    from tiered.tiers import host

    runtime = StubRuntime(0)
    monkeypatch.setattr(host, "_cuda_runtime", lambda pinned: runtime)
    tier = tiered.HostTier("1MiB")
    assert tier.pinned and runtime.registered == {tier._buf.ctypes.data: 1 << 20}
    with tiered.Cache([tier]) as c:  # the cache closes its tiers
        c.store("k", torch.arange(6))
        assert torch.equal(c.revisit("k"), torch.arange(6))
    assert not tier.pinned and runtime.registered == {}
    tier.close()  # idempotent: nothing unregistered twice

    monkeypatch.setattr(host, "_cuda_runtime", lambda pinned: StubRuntime(2))
    with caplog.at_level("WARNING", logger="tiered.tiers.host"):
        assert not tiered.HostTier("1MiB").pinned  # the default falls back to pageable
    assert "CUDA error 2" in caplog.text
    with pytest.raises(tiered.TieredError, match="CUDA error 2"):
        tiered.HostTier("1MiB", pinned=True)  # asked for: an error, not a silent fallback
    monkeypatch.setattr(host, "_cuda_runtime", lambda pinned: object())
    with pytest.raises(tiered.TieredError, match="cannot page-lock"):
        tiered.HostTier("1MiB", pinned=True)


def test_an_unclosed_pinned_host_tier_unlocks_when_collected(monkeypatch):
    import gc

    from tiered.tiers import host

    runtime = StubRuntime(0)  # no CUDA device here: see StubRuntime
    monkeypatch.setattr(host, "_cuda_runtime", lambda pinned: runtime)
    tier = tiered.HostTier("1MiB")
    assert len(runtime.registered) == 1
    del tier
    gc.collect()
    assert runtime.registered == {}  # unlocked before its mapping went away
