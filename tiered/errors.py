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

    @classmethod
    def of(cls, call: str, failures: list[tuple[BaseException, str, tuple[object, ...]]], *,
           done: bool) -> BackgroundError:
        """Say what failed before ``call`` (``failures``: the error, what, the keys).

        ``done``: whether ``call`` did its own work first (``flush``) or nothing.
        Raise the result ``from`` the first failure's exception.
        """
        keys = tuple(dict.fromkeys(k for _, _, ks in failures for k in ks))
        first, what, _ = failures[0]
        also = f" (and {len(failures) - 1} more failures)" if len(failures) > 1 else ""
        outcome = "its own work was done" if done else "it was not carried out: call it again"
        shown = ", ".join(map(repr, keys[:8])) + (" ..." if len(keys) > 8 else "")
        return cls(f"{call}: background work failed before it: {what} failed: {first}{also}; keys "
                   f"concerned: {shown}. Their data stay in the tier above, not yet durable; "
                   f"{call} raised this once, and {outcome}", keys=keys)


class CacheClosedError(TieredError, RuntimeError):
    """The cache was used after ``close()``."""


class TierLockedError(TieredError, RuntimeError):
    """A persistent tier is already open for writing (one writer per directory)."""


class ReadOnlyError(TieredError, RuntimeError):
    """A change was asked of a cache opened with ``readonly=True``."""


class UnknownVersionError(TieredError, KeyError):
    """No committed version has that id or label (or it was deleted by retention)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class VersionFailedError(TieredError, IOError):
    """A version could not be made durable, or a copy it names failed verification."""
