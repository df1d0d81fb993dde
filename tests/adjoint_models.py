"""A small adjoint model shared by the adjoint tests, and its wiring into pyrevolve.

``forward(u, n)`` advances the state over step ``n``; ``adjoint(adj, u_n, n)`` steps the
adjoint back over it with the state at the start of that step. :func:`reference` keeps every
state in a list: the in-memory answer any checkpointed run must match bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

SIZE = 512  # float64 entries per state: 4 KiB, two host pages once stored


def forward(u: np.ndarray, n: int) -> np.ndarray:
    return np.sin(u) * 0.9 + 0.01 * n


def adjoint(adj: np.ndarray, u: np.ndarray, n: int) -> np.ndarray:
    return adj * 0.95 + np.cos(u) * (n + 1)


def initial(size: int = SIZE) -> np.ndarray:
    return np.linspace(-1.0, 1.0, size)


def reference(n_steps: int, size: int = SIZE) -> np.ndarray:
    """Keep every state in a list: the in-memory answer."""
    states = [initial(size)]
    for n in range(n_steps - 1):
        states.append(forward(states[-1], n))
    adj = np.zeros(size)
    for n in reversed(range(n_steps)):
        adj = adjoint(adj, states[n], n)
    return adj


class Solver:
    """pyrevolve's view of a solver: the live state and operators that count their work.

    ``pad`` zeros ride along in every checkpoint (data a compressor shrinks). ``saves`` and
    ``loads`` list the time step of every checkpoint pyrevolve took and restored.
    """

    def __init__(self, size: int = SIZE, pad: int = 0) -> None:
        self.u = initial(size)
        self.last = self.u.copy()  # the state at the start of the last forward step
        self.adj = np.zeros(size)
        self.pad = np.zeros(pad)
        self.forward_steps = 0
        self.reverse_steps = 0
        self.saves: list[int] = []
        self.loads: list[int] = []

    def arrays(self) -> list[np.ndarray]:
        return [self.u, self.pad] if len(self.pad) else [self.u]

    def counts(self) -> dict[str, Any]:
        return {"forward": self.forward_steps, "reverse": self.reverse_steps,
                "saves": list(self.saves), "loads": list(self.loads)}

    def pyrevolve_parts(self) -> tuple[Any, Any, Any]:
        """Return pyrevolve's checkpoint, forward operator and reverse operator for it."""
        import pyrevolve

        solver = self

        class Ckp(pyrevolve.Checkpoint):
            dtype = np.float64
            size = len(solver.u) + len(solver.pad)

            def get_data(self, timestep: int) -> list[np.ndarray]:
                solver.saves.append(timestep)
                return solver.arrays()

            def get_data_location(self, timestep: int) -> list[np.ndarray]:
                solver.loads.append(timestep)
                return solver.arrays()

        class Fwd(pyrevolve.Operator):
            def apply(self, t_start: int, t_end: int) -> None:
                for n in range(t_start, t_end):
                    solver.last = solver.u.copy()
                    solver.u[:] = forward(solver.u, n)
                    solver.forward_steps += 1

        class Rev(pyrevolve.Operator):
            def apply(self, t_start: int, t_end: int) -> None:
                for n in range(t_end - 1, t_start - 1, -1):  # pyrevolve sends one step
                    solver.adj = adjoint(solver.adj, solver.last, n)
                    solver.reverse_steps += 1

        return Ckp(), Fwd(), Rev()
