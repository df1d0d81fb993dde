"""Shared test helpers: value samples, deep comparison, tier combinations."""

from __future__ import annotations

import ctypes
import math
import mmap
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

import tiered


def assert_same(got: Any, want: Any, path: str = "value") -> None:
    """Assert ``got`` equals ``want`` in type, structure, dtype, shape, device and bytes."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{path}: {type(got)}"
        assert got.dtype == want.dtype and got.shape == want.shape, path
        assert got.device == want.device, path
        assert torch.equal(got.cpu().view(-1).view(torch.uint8) if got.numel() else got.cpu(),
                           want.detach().cpu().contiguous().view(-1).view(torch.uint8)
                           if want.numel() else want.detach().cpu()), path
        return
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), f"{path}: {type(got)}"
        assert got.dtype == want.dtype and got.shape == want.shape, path
        assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes(), path
        return
    assert type(got) is type(want), f"{path}: {type(got)} != {type(want)}"
    if isinstance(want, dict):
        assert list(got) == list(want), path
        for k in want:
            assert_same(got[k], want[k], f"{path}[{k!r}]")
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same(g, w, f"{path}[{i}]")
    elif isinstance(want, float) and math.isnan(want):
        assert math.isnan(got), path
    else:
        assert got == want, path


def sample_values() -> dict[str, Any]:
    """One of every value kind the contract names."""
    rng = np.random.default_rng(0)
    big = rng.standard_normal((256, 300)).astype(np.float32)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    return {
        "f32": big,
        "strided": big[::3, ::-2],
        "int64": np.arange(1000, dtype=np.int64),
        "bool": rng.random(77) > 0.5,
        "complex": (rng.standard_normal(10) + 1j).astype(np.complex128),
        "f16": rng.standard_normal((3, 5)).astype(np.float16),
        "bigendian": np.arange(6, dtype=">f8").reshape(2, 3),
        "unicode": np.array(["ab", "cde"]),
        "zero_d": np.array(3.25),
        "empty": np.zeros((0, 3), np.float32),
        "np_scalar": np.float32(1.5),
        "tensor": torch.randn(7, 9),
        "bf16": torch.randn(5, 3).to(torch.bfloat16),
        "tensor_t": torch.randn(6, 4).t(),
        "tensor_bool": torch.tensor([True, False, True]),
        "tensor_0d": torch.tensor(2.5),
        "scalars": {"i": 3, "f": 0.5, "nan": float("nan"), "inf": float("-inf"), "s": "x",
                    "b": True, "n": None, 7: "int key"},
        "nested": {"a": [np.ones(3), (torch.zeros(2), "t")], "b": ({"c": np.int64(4)},)},
        "state_dict": model.state_dict(),
        "optimizer": opt.state_dict(),
    }


def tier_combos() -> dict[str, Any]:
    """Tier-list factories, each taking a base directory."""
    def host() -> tiered.HostTier:
        return tiered.HostTier("16MiB", prefault=False)

    def dev() -> tiered.DeviceTier:  # tests/gpu_check.sh sets "cuda" on a GPU machine
        return tiered.DeviceTier("16MiB", device=os.environ.get("TIERED_TEST_DEVICE", "cpu"))

    def bb(p: Path) -> tiered.DirectoryTier:
        return tiered.DirectoryTier(p / "bb")

    def direct(p: Path) -> tiered.DirectoryTier:  # payloads with O_DIRECT
        return tiered.DirectoryTier(p / "bb", direct=True, drop_pages=True)

    def pfs(p: Path) -> tiered.HDF5Tier:
        return tiered.HDF5Tier(p / "pfs")

    return {
        "host": lambda p: [host()],
        "device": lambda p: [dev()],
        "dir": lambda p: [bb(p)],
        "hdf5": lambda p: [pfs(p)],
        "host+dir": lambda p: [host(), bb(p)],
        "direct": lambda p: [direct(p)],
        "host+direct": lambda p: [host(), direct(p)],
        "host+hdf5": lambda p: [host(), pfs(p)],
        "dir+hdf5": lambda p: [bb(p), pfs(p)],
        "device+hdf5": lambda p: [dev(), pfs(p)],
        "host+dir+hdf5": lambda p: [host(), bb(p), pfs(p)],
        "device+host+dir+hdf5": lambda p: [dev(), host(), bb(p), pfs(p)],
    }


PERSISTENT_COMBOS = [name for name in tier_combos() if "dir" in name or "hdf5" in name]


def in_memory_fs(path: Path) -> bool:
    """Whether ``path`` is on tmpfs or ramfs (``/proc/mounts``, longest mount): there every
    file is memory, so the page cache cannot be bypassed."""
    best, kind = "", ""
    for line in Path("/proc/mounts").read_text().splitlines():
        _, mount, fstype, *_ = line.split()
        if str(path.resolve()).startswith(mount) and len(mount) > len(best):
            best, kind = mount, fstype
    return kind in ("tmpfs", "ramfs")


def cached_pages(path: Path) -> int:
    """Pages of ``path`` in the OS page cache (``mincore``; looking brings none in)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size = path.stat().st_size
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        pages = -(-size // mmap.PAGESIZE)
        vec = ctypes.create_string_buffer(pages)
        try:
            assert libc.mincore(addr, size, vec) == 0, ctypes.get_errno()
        finally:
            libc.munmap(addr, size)
        return sum(b & 1 for b in vec.raw)
    finally:
        os.close(fd)


def object_files(root: Path) -> list[Path]:
    """The committed object files of a directory tier (not temp or spare files)."""
    return sorted(p for p in root.glob("*.tdat") if not p.name.startswith("."))
