"""A writer process for restart and fault tests (run as a script by the tests)."""

from __future__ import annotations

import json
import resource
import signal
import sys
from pathlib import Path

import numpy as np

import tiered


def value(i: int, n: int = 1 << 17) -> dict:
    return {"u": np.full(n, i, dtype=np.float64), "step": i, "tag": f"s{i}"}


def tiers(root: Path) -> list:
    return [tiered.HostTier("8MiB", prefault=False), tiered.DirectoryTier(root / "bb"),
            tiered.HDF5Tier(root / "pfs")]


def write(root: Path, count: int, write_back: str = "eager") -> None:
    with tiered.Cache(tiers(root), write_back=write_back) as cache:
        for i in range(count):
            cache.store(("state", i), value(i))
    print("done", flush=True)


def forever(root: Path, write_back: str = "eager") -> None:
    cache = tiered.Cache(tiers(root), write_back=write_back)
    i = 0
    while True:  # the parent kills -9 this process mid-drain
        cache.store(("state", i % 50), value(i))
        print(f"stored {i}", flush=True)
        i += 1


def fsize(root: Path) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of being killed
    resource.setrlimit(resource.RLIMIT_FSIZE, (2 << 20, 2 << 20))
    out: dict = {}
    cache = tiered.Cache([tiered.HostTier("16MiB", prefault=False),
                          tiered.DirectoryTier(root / "bb")])
    for i in range(3):
        cache.store(i, value(i))  # 1 MiB files: under the limit
    cache.flush()
    cache.store("big", value(9, n=1 << 19))  # a 4 MiB file: over it
    try:
        cache.flush()
        out["flush"] = "ok"
    except tiered.BackgroundError as exc:
        out["flush"] = f"BackgroundError: {exc.__cause__!r}"
    out["big_still_readable"] = bool(np.array_equal(cache.revisit("big")["u"],
                                                    value(9, n=1 << 19)["u"]))
    try:
        cache.close()
    except tiered.BackgroundError as exc:
        out["close"] = f"BackgroundError: {exc}"
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    mode, root = sys.argv[1], Path(sys.argv[2])
    if mode == "write":
        write(root, int(sys.argv[3]), *sys.argv[4:])
    elif mode == "forever":
        forever(root, *sys.argv[3:])
    elif mode == "fsize":
        fsize(root)
