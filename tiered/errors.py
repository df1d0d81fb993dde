"""The exception hierarchy: one root, each class also the builtin a user would catch."""

from __future__ import annotations


class TieredError(Exception):
    """Root of every error raised by tiered."""


class TierFullError(TieredError):
    """No tier can make room for a value: none came in time, or none ever can.

    Not a ``MemoryError``: the process has memory left; a tier's capacity, which the user
    chose, is what ran out.
    """


class CorruptDataError(TieredError, IOError):
    """Stored bytes failed their checksum or their manifest is damaged.

    Parameters
    ----------
    message : str
        What failed, naming the key and the tier.
    key : object, optional
        The canonical key concerned, when known.
    tier : str, optional
        The tier's name, when known.
    """

    def __init__(self, message: str, *, key: object = None, tier: str | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.tier = tier


class UnknownKeyError(TieredError, KeyError):
    """The key was never stored, or was discarded."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the sentence readable.
        return str(self.args[0]) if self.args else "unknown key"


class BackgroundError(TieredError, IOError):
    """Background work failed; raised once, at the start of the next call into the cache.

    That call does nothing else (``flush`` excepted, which has waited for its transfers
    first); repeat it. The data of a failed drain stay, dirty, in the tier above.

    Parameters
    ----------
    message : str
        What failed, the keys concerned, and whether the call that raised it was carried out.
    keys : tuple, optional
        The canonical keys concerned.
    """

    def __init__(self, message: str, *, keys: tuple[object, ...] = ()) -> None:
        super().__init__(message)
        self.keys = keys


class CacheClosedError(TieredError, RuntimeError):
    """The cache was used after ``close()``."""
