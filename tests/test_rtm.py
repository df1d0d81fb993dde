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
