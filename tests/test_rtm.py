"""The reverse time migration example: the image through tiered equals the in-memory one."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import tiered
from tiered.bench import rtm

CFG = rtm.RTMConfig(nz=80, nx=80, nt=220, sponge=10)


@pytest.mark.parametrize("substeps", [1, 3])
def test_small_rtm_image_is_bit_identical(tmp_path: Path, substeps: int) -> None:
    cfg = dataclasses.replace(CFG, substeps=substeps, nt=CFG.nt // substeps)
    data = rtm.record(cfg)
    assert np.abs(data).max() > 0  # the reflection reached the receivers
    want = rtm.in_memory_image(cfg, data)
    host = cfg.nt // 8 * (cfg.snapshot_bytes + 4096)  # an eighth of the history fits
    with tiered.Cache([tiered.HostTier(host), tiered.DirectoryTier(tmp_path / "bb"),
                       tiered.HDF5Tier(tmp_path / "pfs")], eviction="score",
                      prefetch="reverse") as cache:
        got = rtm.tiered_image(cfg, data, cache)
        stats = cache.stats()
    assert got.dtype == np.float32 and np.array_equal(got, want)
    assert stats.revisits == cfg.nt and stats.stores == cfg.nt
    assert len(cache) == 0  # every snapshot was consumed and discarded


def test_torch_wavefields_through_a_device_tier(tmp_path: Path) -> None:
    """The torch path (device="cpu" here; tests/gpu_check.sh runs "cuda"): GPU-style
    snapshots pass a device tier, host memory and a directory, bit for bit."""
    import os

    device = os.environ.get("TIERED_TEST_DEVICE", "cpu")
    cfg = dataclasses.replace(CFG, nt=120, device=device)
    data = rtm.record(cfg)
    np.testing.assert_allclose(data, rtm.record(dataclasses.replace(cfg, device=None)),
                               atol=1e-4 * np.abs(data).max())  # the same scheme as numpy's
    want = rtm.in_memory_image(cfg, data)
    room = cfg.nt // 8 * (cfg.snapshot_bytes + 4096)
    with tiered.Cache([tiered.DeviceTier(room, device=device), tiered.HostTier(room),
                       tiered.DirectoryTier(tmp_path / "bb")], eviction="score",
                      prefetch="reverse") as cache:
        got = rtm.tiered_image(cfg, data, cache)
        stats = cache.stats()
    assert isinstance(got, np.ndarray) and np.array_equal(got, want)
    assert stats.tiers["directory"].bytes_in > 0 and stats.prefetch_hits > 0


def test_bad_devices_are_refused() -> None:
    import torch

    with pytest.raises(ValueError, match="not a torch device"):
        rtm.RTMConfig(device="gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            rtm.RTMConfig(device="cuda")


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="substeps must be at least 1"):
        rtm.RTMConfig(substeps=0)
    with pytest.raises(ValueError, match="too small for sponge"):
        rtm.RTMConfig(nz=30, nx=30)


def test_simulation_script_runs_and_checks_its_image(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).parents[1] / "simulations" / "rtm.py"
    if not script.exists():
        pytest.skip("simulations/ is not shipped in the wheel; runs from a source tree")
    done = subprocess.run([sys.executable, str(script), "--n", "64", "--nt", "40",
                           "--drop-pages", "--workdir", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "image identical to keeping every snapshot in memory: True" in done.stderr
