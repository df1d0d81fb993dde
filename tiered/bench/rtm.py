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

It lives in the package so that ``tiered bench adjoint`` runs from any install;
``python simulations/rtm.py`` runs a small image through tiered, checked bit for bit against
keeping every snapshot in memory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import numpy as np

from tiered.cache import Cache

State = tuple[np.ndarray, np.ndarray]  # (u[n-1], u[n]): what a restart needs


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

    def __post_init__(self) -> None:
        for name in ("nz", "nx", "nt", "substeps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if min(self.nz, self.nx) <= 2 * self.sponge + 4:
            raise ValueError(f"a {self.nz}x{self.nx} grid is too small for sponge={self.sponge}")

    @property
    def reflector(self) -> int:
        """Depth index of the velocity jump the image should show."""
        return int(0.4 * self.nz)

    @property
    def snapshot_bytes(self) -> int:
        """Bytes of one stored snapshot."""
        return self.nz * self.nx * 4


class Wave:
    """The finite-difference propagator for one velocity model.

    A step allocates nothing: every intermediate lands in preallocated work arrays, as in
    a production solver (fresh temporaries page-fault and made a step ~4x slower here).
    """

    def __init__(self, cfg: RTMConfig, velocity: np.ndarray) -> None:
        self.cfg = cfg
        self.c2 = ((velocity * cfg.dt / cfg.dx) ** 2).astype(np.float32)
        self.damp = _sponge(cfg)
        self.lap = np.zeros((cfg.nz, cfg.nx), dtype=np.float32)
        self._sum, self._centre = (np.empty((cfg.nz - 2, cfg.nx - 2), dtype=np.float32)
                                   for _ in range(2))

    def step(self, prev: np.ndarray, cur: np.ndarray, out: np.ndarray) -> None:
        """Write ``u[n+1]`` into ``out`` from ``prev = u[n-1]`` and ``cur = u[n]``."""
        acc, centre = self._sum, self._centre
        np.add(cur[:-2, 1:-1], cur[2:, 1:-1], out=acc)
        acc += cur[1:-1, :-2]
        acc += cur[1:-1, 2:]
        np.multiply(cur[1:-1, 1:-1], np.float32(4.0), out=centre)
        np.subtract(acc, centre, out=self.lap[1:-1, 1:-1])
        np.multiply(self.c2, self.lap, out=out)
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


def _wave_steps(cfg: RTMConfig, wave: Wave) -> Iterator[np.ndarray]:
    """Yield the source wavefield at every wave step (the yielded array is reused)."""
    src = Source(cfg)
    src.wave = wave
    prev, cur, nxt = (np.zeros((cfg.nz, cfg.nx), dtype=np.float32) for _ in range(3))
    for t in range(cfg.nt * cfg.substeps):
        yield cur
        src.advance_into(prev, cur, nxt, t)
        prev, cur, nxt = cur, nxt, prev


def propagate(cfg: RTMConfig, wave: Wave) -> Iterator[np.ndarray]:
    """Yield the snapshots ``u[n * substeps]`` for n = 0 .. nt-1 (the array is reused)."""
    for t, u in enumerate(_wave_steps(cfg, wave)):
        if t % cfg.substeps == 0:
            yield u


def record(cfg: RTMConfig) -> np.ndarray:
    """Reflection data at the receivers: true-model recording minus the direct wave."""
    true, smooth = velocities(cfg)
    _, rec = _positions(cfg)
    depth = cfg.sponge + 2
    full = np.stack([u[depth, rec].copy() for u in _wave_steps(cfg, Wave(cfg, true))])
    direct = np.stack([u[depth, rec].copy() for u in _wave_steps(cfg, Wave(cfg, smooth))])
    return full - direct


class Receiver:
    """The backward half: receiver wavefield in reverse time and the image it builds."""

    def __init__(self, cfg: RTMConfig, data: np.ndarray) -> None:
        _, smooth = velocities(cfg)
        self.wave = Wave(cfg, smooth)
        self.data = data
        _, self.rec = _positions(cfg)
        self.depth = cfg.sponge + 2
        self.substeps = cfg.substeps
        self.image = np.zeros((cfg.nz, cfg.nx), dtype=np.float32)
        self.prev, self.cur, self.nxt, self._product = (
            np.zeros((cfg.nz, cfg.nx), dtype=np.float32) for _ in range(4))

    def step(self, n: int, source: np.ndarray) -> None:
        """Adjoint over snapshot ``n``: inject data, correlate with ``source``, propagate."""
        first = n * self.substeps
        for t in reversed(range(first, first + self.substeps)):
            self.cur[self.depth, self.rec] += self.data[t]
            if t == first:
                np.multiply(source, self.cur, out=self._product)
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

    def initial(self) -> State:
        """Return the state at step 0 (everything at rest)."""
        return np.zeros(self.shape, np.float32), np.zeros(self.shape, np.float32)

    def advance_into(self, prev: np.ndarray, cur: np.ndarray, out: np.ndarray, t: int) -> None:
        """Write the wavefield of wave step ``t + 1`` into ``out``."""
        self.wave.step(prev, cur, out)
        out[self.at] += self.wavelet[t]

    def advance(self, state: State, n: int) -> State:
        """Return the state at snapshot ``n + 1`` (fresh arrays)."""
        prev, cur = state
        for t in range(n * self.substeps, (n + 1) * self.substeps):
            out = np.empty(self.shape, np.float32)
            self.advance_into(prev, cur, out, t)
            prev, cur = cur, out
        return prev, cur


def backward_pass(cfg: RTMConfig, data: np.ndarray,
                  snapshot: Callable[[int], np.ndarray]) -> np.ndarray:
    """Propagate the receiver wavefield in reverse time and build the image.

    ``snapshot(n)`` returns the source wavefield at step ``n``; it is called for
    n = nt-1 down to 0, once each.
    """
    receiver = Receiver(cfg, data)
    for n in reversed(range(cfg.nt)):
        receiver.step(n, snapshot(n))
    return receiver.image


def forward_pass(cfg: RTMConfig, store: Callable[[int, np.ndarray], object]) -> None:
    """Propagate the source wavefield and hand every snapshot to ``store(n, u)``."""
    _, smooth = velocities(cfg)
    for n, u in enumerate(propagate(cfg, Wave(cfg, smooth))):
        store(n, u)


def in_memory_image(cfg: RTMConfig, data: np.ndarray) -> np.ndarray:
    """Return the reference image, keeping a copy of every snapshot in a list."""
    snaps: list[np.ndarray] = []
    forward_pass(cfg, lambda n, u: snaps.append(u.copy()))
    return backward_pass(cfg, data, snaps.__getitem__)


def tiered_image(cfg: RTMConfig, data: np.ndarray, cache: Cache) -> np.ndarray:
    """Return the same image with the snapshots in a tiered cache (adjoint adapter)."""
    from tiered.adapters.adjoint import Checkpointer

    ckpt = Checkpointer(cache, name="rtm")
    forward_pass(cfg, ckpt.store)
    # read-only views of the host tier where the snapshot is there (no copy); each is
    # freed when the backward step that used it lets go of it
    return backward_pass(cfg, data, lambda n: ckpt.revisit(n, copy=False))
