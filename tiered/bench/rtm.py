"""2-D acoustic reverse time migration (RTM), the adjoint computation tiered is built for.

Forward: a Ricker source wavefield propagates through a smooth migration velocity and every
snapshot is stored. Backward: the recorded reflection data are injected at the receivers in
reverse time, the receiver wavefield propagates backwards, and the image accumulates the
zero-lag cross-correlation of the two wavefields (``image += u_s(t) * u_r(t)``), so the
snapshots are revisited in exactly reverse order.

The wave equation is the second-order finite-difference scheme
``u[n+1] = 2 u[n] - u[n-1] + (v dt / dx)^2 lap(u[n])`` with a damping sponge at the edges;
float32 throughout. The "observed" data come from a model with a reflector, minus the direct
wave, modelled once up front.

The wavefields are numpy arrays, or torch tensors on a device when ``RTMConfig.device`` names
one (``"cuda"``: snapshots that start in GPU memory; ``"cpu"``: the same code path without a
GPU). The scheme and the image check are the same either way.

It lives in the package so that ``tiered bench adjoint`` runs from any install;
``python simulations/rtm.py`` runs a small image through tiered, checked bit for bit against
keeping every snapshot in memory.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from tiered.cache import Cache

Array = Any  # a numpy array, or a torch tensor when the config names a device
State = tuple[Array, Array]  # (u[n-1], u[n]): what a restart needs


@dataclasses.dataclass(frozen=True, kw_only=True)
class RTMConfig:
    """Grid, time stepping and acquisition (one shot, a line of receivers near the top)."""

    nz: int = 200
    nx: int = 200
    nt: int = 500
    dx: float = 10.0  # m
    dt: float = 0.002  # s (stable while v dt / dx < 1/sqrt(2))
    f0: float = 15.0  # Hz, Ricker peak frequency
    v_top: float = 1500.0  # m/s
    v_bottom: float = 2500.0
    sponge: int = 20  # cells of absorbing layer
    substeps: int = 1  # wave steps per snapshot (the image is built every substeps-th step)
    device: str | None = None  # None: numpy arrays; else torch tensors on this device

    def __post_init__(self) -> None:
        for name in ("nz", "nx", "nt", "substeps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if min(self.nz, self.nx) <= 2 * self.sponge + 4:
            raise ValueError(f"a {self.nz}x{self.nx} grid is too small for sponge={self.sponge}")
        if self.device is not None:
            _check_device(self.device)

    @property
    def reflector(self) -> int:
        """Depth index of the velocity jump the image should show."""
        return int(0.4 * self.nz)

    @property
    def snapshot_bytes(self) -> int:
        """Bytes of one stored snapshot."""
        return self.nz * self.nx * 4

    @functools.cached_property
    def ops(self) -> Arrays:
        """The array operations for this config's arrays (made once per config)."""
        return Arrays(self.device)


def _check_device(device: str) -> None:
    try:
        import torch
    except ImportError as exc:
        raise ValueError(f"device={device!r} needs PyTorch: pip install 'tiered[torch]'") from exc
    try:
        kind = torch.device(device).type
    except RuntimeError as exc:
        raise ValueError(f"device={device!r} is not a torch device: {exc}") from exc
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r}: CUDA is not available on this machine")


class Arrays:
    """The few array operations the scheme needs, on numpy or on torch tensors.

    Parameters
    ----------
    device : str or None
        ``None`` for numpy; a torch device (``"cuda"``, ``"cpu"``) for torch tensors.
    """

    def __init__(self, device: str | None) -> None:
        self.device = device
        self._torch: Any = None
        if device is not None:
            import torch

            self._torch = torch

    def asarray(self, a: np.ndarray) -> Array:
        """Return ``a`` as this backend's array (a copy on the device for torch)."""
        if self._torch is None:
            return a
        return self._torch.from_numpy(np.ascontiguousarray(a)).to(self.device)

    def zeros(self, shape: tuple[int, int]) -> Array:
        """Return a float32 array of zeros."""
        return self.asarray(np.zeros(shape, np.float32))

    def empty(self, shape: tuple[int, int]) -> Array:
        """Return an uninitialised float32 array."""
        if self._torch is None:
            return np.empty(shape, np.float32)
        return self._torch.empty(shape, dtype=self._torch.float32, device=self.device)

    def clone(self, a: Array) -> Array:
        """Return a copy of ``a`` in the same memory (host or device)."""
        return a.copy() if self._torch is None else a.clone()

    def numpy(self, a: Array) -> np.ndarray:
        """Return ``a`` as a host numpy array."""
        return a if self._torch is None else a.cpu().numpy()

    def add(self, a: Array, b: Array, out: Array) -> None:
        """``out = a + b``."""
        (np.add if self._torch is None else self._torch.add)(a, b, out=out)

    def sub(self, a: Array, b: Array, out: Array) -> None:
        """``out = a - b``."""
        (np.subtract if self._torch is None else self._torch.sub)(a, b, out=out)

    def mul(self, a: Array, b: Any, out: Array) -> None:
        """``out = a * b``."""
        (np.multiply if self._torch is None else self._torch.mul)(a, b, out=out)

    def stack(self, arrays: list[Array]) -> Array:
        """Stack equally shaped arrays along a new first axis."""
        return np.stack(arrays) if self._torch is None else self._torch.stack(arrays)

    def sync(self) -> None:
        """Wait until queued device work is done (time measurements need it)."""
        if self._torch is not None and self._torch.device(self.device).type == "cuda":
            self._torch.cuda.synchronize(self.device)


class Wave:
    """The finite-difference propagator for one velocity model.

    A step allocates nothing: every intermediate lands in preallocated work arrays, as in
    a production solver (fresh temporaries page-fault and made a step ~4x slower here).
    """

    def __init__(self, cfg: RTMConfig, velocity: np.ndarray) -> None:
        self.cfg = cfg
        self.ops = ops = cfg.ops
        self.c2 = ops.asarray(((velocity * cfg.dt / cfg.dx) ** 2).astype(np.float32))
        self.damp = ops.asarray(_sponge(cfg))
        self.lap = ops.zeros((cfg.nz, cfg.nx))
        self._sum, self._centre = (ops.empty((cfg.nz - 2, cfg.nx - 2)) for _ in range(2))

    def step(self, prev: Array, cur: Array, out: Array) -> None:
        """Write ``u[n+1]`` into ``out`` from ``prev = u[n-1]`` and ``cur = u[n]``."""
        acc, centre, ops = self._sum, self._centre, self.ops
        ops.add(cur[:-2, 1:-1], cur[2:, 1:-1], acc)
        acc += cur[1:-1, :-2]
        acc += cur[1:-1, 2:]
        ops.mul(cur[1:-1, 1:-1], np.float32(4.0), centre)
        ops.sub(acc, centre, self.lap[1:-1, 1:-1])
        ops.mul(self.c2, self.lap, out)
        out += cur
        out += cur
        out -= prev
        out *= self.damp


def _sponge(cfg: RTMConfig) -> np.ndarray:
    ramp = np.ones(max(cfg.nz, cfg.nx), dtype=np.float32)
    edge = np.exp(-((0.015 * (cfg.sponge - np.arange(cfg.sponge))) ** 2)).astype(np.float32)
    ramp[: cfg.sponge] = edge

    def axis(n: int) -> np.ndarray:
        return np.minimum(ramp[:n], ramp[:n][::-1])

    return np.outer(axis(cfg.nz), axis(cfg.nx)).astype(np.float32)


def velocities(cfg: RTMConfig) -> tuple[np.ndarray, np.ndarray]:
    """Return (true model with a reflector, smooth migration model)."""
    true = np.full((cfg.nz, cfg.nx), cfg.v_top, dtype=np.float32)
    true[cfg.reflector:, :] = cfg.v_bottom
    smooth = np.full_like(true, cfg.v_top)
    return true, smooth


def ricker(cfg: RTMConfig) -> np.ndarray:
    """Return the source wavelet, one value per time step."""
    t = np.arange(cfg.nt * cfg.substeps) * cfg.dt - 1.0 / cfg.f0
    a = (np.pi * cfg.f0 * t) ** 2
    return ((1 - 2 * a) * np.exp(-a)).astype(np.float32)


def _positions(cfg: RTMConfig) -> tuple[tuple[int, int], np.ndarray]:
    source = (cfg.sponge + 2, cfg.nx // 2)
    receivers = np.arange(cfg.sponge, cfg.nx - cfg.sponge)
    return source, receivers


def _wave_steps(cfg: RTMConfig, wave: Wave) -> Iterator[Array]:
    """Yield the source wavefield at every wave step (the yielded array is reused)."""
    src = Source(cfg)
    src.wave = wave
    prev, cur, nxt = (cfg.ops.zeros((cfg.nz, cfg.nx)) for _ in range(3))
    for t in range(cfg.nt * cfg.substeps):
        yield cur
        src.advance_into(prev, cur, nxt, t)
        prev, cur, nxt = cur, nxt, prev


def propagate(cfg: RTMConfig, wave: Wave) -> Iterator[Array]:
    """Yield the snapshots ``u[n * substeps]`` for n = 0 .. nt-1 (the array is reused)."""
    for t, u in enumerate(_wave_steps(cfg, wave)):
        if t % cfg.substeps == 0:
            yield u


def record(cfg: RTMConfig) -> np.ndarray:
    """Reflection data at the receivers: true-model recording minus the direct wave.

    Always a host numpy array (modelled on the config's device).
    """
    true, smooth = velocities(cfg)
    ops = cfg.ops
    rec = ops.asarray(_positions(cfg)[1])
    depth = cfg.sponge + 2
    full = ops.stack([ops.clone(u[depth, rec]) for u in _wave_steps(cfg, Wave(cfg, true))])
    direct = ops.stack([ops.clone(u[depth, rec])
                        for u in _wave_steps(cfg, Wave(cfg, smooth))])
    return ops.numpy(full - direct)


class Receiver:
    """The backward half: receiver wavefield in reverse time and the image it builds."""

    def __init__(self, cfg: RTMConfig, data: np.ndarray) -> None:
        _, smooth = velocities(cfg)
        self.wave = Wave(cfg, smooth)
        self.ops = ops = cfg.ops
        self.data = ops.asarray(data)
        self.rec = ops.asarray(_positions(cfg)[1])
        self.depth = cfg.sponge + 2
        self.substeps = cfg.substeps
        self.image, self.prev, self.cur, self.nxt, self._product = (
            ops.zeros((cfg.nz, cfg.nx)) for _ in range(5))

    def step(self, n: int, source: Array) -> None:
        """Adjoint over snapshot ``n``: inject data, correlate with ``source``, propagate."""
        first = n * self.substeps
        for t in reversed(range(first, first + self.substeps)):
            self.cur[self.depth, self.rec] += self.data[t]
            if t == first:
                self.ops.mul(source, self.cur, self._product)
                self.image += self._product
            self.wave.step(self.prev, self.cur, self.nxt)
            self.prev, self.cur, self.nxt = self.cur, self.nxt, self.prev


class Source:
    """The forward half as an explicit state machine, for schedules that restart it.

    The state at step ``n`` is ``(u[n-1], u[n])``; :meth:`advance` returns new arrays.
    """

    def __init__(self, cfg: RTMConfig) -> None:
        _, smooth = velocities(cfg)
        self.wave = Wave(cfg, smooth)
        self.wavelet = ricker(cfg)
        self.at, _ = _positions(cfg)
        self.shape = (cfg.nz, cfg.nx)
        self.substeps = cfg.substeps
        self.ops = cfg.ops

    def initial(self) -> State:
        """Return the state at step 0 (everything at rest)."""
        return self.ops.zeros(self.shape), self.ops.zeros(self.shape)

    def advance_into(self, prev: Array, cur: Array, out: Array, t: int) -> None:
        """Write the wavefield of wave step ``t + 1`` into ``out``."""
        self.wave.step(prev, cur, out)
        out[self.at] += self.wavelet[t]

    def advance(self, state: State, n: int) -> State:
        """Return the state at snapshot ``n + 1`` (fresh arrays)."""
        prev, cur = state
        for t in range(n * self.substeps, (n + 1) * self.substeps):
            out = self.ops.empty(self.shape)
            self.advance_into(prev, cur, out, t)
            prev, cur = cur, out
        return prev, cur


def backward_pass(cfg: RTMConfig, data: np.ndarray,
                  snapshot: Callable[[int], Array]) -> np.ndarray:
    """Propagate the receiver wavefield in reverse time and build the image (on the host).

    ``snapshot(n)`` returns the source wavefield at step ``n``; it is called for
    n = nt-1 down to 0, once each.
    """
    receiver = Receiver(cfg, data)
    for n in reversed(range(cfg.nt)):
        receiver.step(n, snapshot(n))
    return cfg.ops.numpy(receiver.image)


def forward_pass(cfg: RTMConfig, store: Callable[[int, Array], object]) -> None:
    """Propagate the source wavefield and hand every snapshot to ``store(n, u)``."""
    _, smooth = velocities(cfg)
    for n, u in enumerate(propagate(cfg, Wave(cfg, smooth))):
        store(n, u)


def in_memory_image(cfg: RTMConfig, data: np.ndarray) -> np.ndarray:
    """Return the reference image, keeping a copy of every snapshot in a list."""
    snaps: list[Array] = []
    forward_pass(cfg, lambda n, u: snaps.append(cfg.ops.clone(u)))
    return backward_pass(cfg, data, snaps.__getitem__)


def tiered_image(cfg: RTMConfig, data: np.ndarray, cache: Cache) -> np.ndarray:
    """Return the same image with the snapshots in a tiered cache (adjoint adapter)."""
    from tiered.adapters.adjoint import Checkpointer

    ckpt = Checkpointer(cache, name="rtm")
    forward_pass(cfg, ckpt.store)
    # read-only views of the host tier where the snapshot is there (no copy); each is
    # freed when the backward step that used it lets go of it
    return backward_pass(cfg, data, lambda n: ckpt.revisit(n, copy=False))
