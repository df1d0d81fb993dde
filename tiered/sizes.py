"""Byte sizes: parse human strings ("512MiB", "4 GB") and format them back.

``K``, ``M``, ``G``, ``T`` and ``KB`` ... ``TB`` are decimal (powers of 1000, as disk makers
and ``df -H`` count); ``KiB`` ... ``TiB`` are binary (powers of 1024). A plain number or one in
``B`` must be whole: there is no fraction of a byte.
"""

from __future__ import annotations

import re

_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2,
    "g": 1000**3, "gb": 1000**3, "t": 1000**4, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}
_PATTERN = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?)\s*([a-zA-Z]*)\s*$")


def parse_size(value: int | str | None, *, name: str = "capacity") -> int | None:
    """Return a size in bytes from an int or a human string.

    Parameters
    ----------
    value : int, str or None
        ``1048576``, ``"1MiB"``, ``"1.5 GB"``; ``None`` means unlimited and is returned as is.
        Decimal units (``"1M"``, ``"1MB"``: 10**6) and binary ones (``"1MiB"``: 2**20)
        are both accepted; a number without a unit (or in ``B``) must be whole.
    name : str
        The argument's name, used in error messages.

    Returns
    -------
    int or None
        The size in bytes.

    Raises
    ------
    ValueError
        If the string cannot be parsed, is a fraction of a byte, or the size is negative.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int number of bytes or a string like '4GiB'")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{name} must be >= 0 bytes, got {value}")
        return value
    if not isinstance(value, str):
        raise TypeError(f"{name} must be an int number of bytes or a string like '4GiB', "
                        f"got {type(value).__name__}")
    match = _PATTERN.match(value)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(f"{name}={value!r} is not a size; use bytes or e.g. '512MiB', '4GB'")
    number = match.group(1)
    if _UNITS[unit] == 1 and "." in number:
        raise ValueError(f"{name}={value!r}: a number of bytes must be whole; for a fraction "
                         "give a unit, e.g. '1.5MiB' or '1.5MB'")
    return int(float(number) * _UNITS[unit])


def format_size(nbytes: float) -> str:
    """Format a byte count with a binary unit, e.g. ``'12.5 MiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(nbytes) < 1024 or unit == "TiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    raise AssertionError("unreachable")
