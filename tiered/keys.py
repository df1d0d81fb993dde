"""Keys: validation, canonical form, and a file-name encoding that cannot escape a root."""

from __future__ import annotations

import hashlib
import json
import numbers
import urllib.parse
from typing import Any

Key = str | int | tuple[str | int, ...]

_MAX_NAME = 160  # leaves room under NAME_MAX (255) for version and suffix


def canonical_key(key: object) -> Key:
    r"""Validate ``key`` and return its canonical form.

    Keys are ``str``, ``int`` or flat tuples of them. Strings must be non-empty and free of
    NUL, ``/`` and ``\``, may not be ``.`` or ``..`` — so no key can name a path — and must
    encode as UTF-8 (no lone surrogates).

    Raises
    ------
    TypeError
        For a key of another type (floats, bools, lists, nested tuples, ...).
    ValueError
        For an empty or path-like string, or an empty tuple.
    """
    if isinstance(key, tuple):
        if not key:
            raise ValueError("key tuple must not be empty")
        return tuple([_atom(part, key) for part in key])
    return _atom(key, key)


def _plain(text: str) -> bool:
    """Whether ``text`` is a valid key string (as :func:`_atom` checks it)."""
    return (bool(text) and "\x00" not in text and "/" not in text and "\\" not in text
            and text not in (".", "..") and (text.isascii() or _encodable(text)))


def _encodable(text: str) -> bool:
    r"""Whether ``text`` encodes as UTF-8 (a lone surrogate such as ``"\ud800"`` does not)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _atom(part: object, whole: object) -> str | int:
    # plain ints and strings first: this runs for every key of every call, and the
    # numbers.Integral check below is an ABC lookup (numpy integers need it)
    if type(part) is int:
        return part
    if type(part) is str and _plain(part):
        return part
    if isinstance(part, bool) or not isinstance(part, (str, numbers.Integral)):
        raise TypeError(f"key {whole!r}: parts must be str or int, not {type(part).__name__}")
    if isinstance(part, numbers.Integral):
        return int(part)
    if part == "":
        raise ValueError(f"key {whole!r}: empty string")
    if "\x00" in part or "/" in part or "\\" in part:
        raise ValueError(f"key {whole!r}: must not contain NUL, '/' or '\\'")
    if part in (".", ".."):
        raise ValueError(f"key {whole!r}: '.' and '..' are not allowed")
    if not _encodable(part):
        raise ValueError(f"key {whole!r}: not encodable as UTF-8 (a lone surrogate?); "
                         "file names and manifests could not hold it")
    return part


def key_to_json(key: Key) -> Any:
    """Return a JSON-serialisable form of a canonical key (tuples become lists)."""
    return list(key) if isinstance(key, tuple) else key


def key_from_json(obj: Any) -> Key:
    """Invert :func:`key_to_json`, validating as :func:`canonical_key` does."""
    return canonical_key(tuple(obj) if isinstance(obj, list) else obj)


_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def _simple_filename(key: Key) -> str | None:
    """Return :func:`key_filename` of an int, or a short tuple of ints and plain names.

    What the general path would make of them, without JSON and percent-encoding (a drain
    names a file per object); ``None`` for any other key.
    """
    if type(key) is int:
        text = str(key)
        return text if len(text) <= _MAX_NAME else None
    if type(key) is not tuple or len(key) > 8:
        return None
    parts = []
    for part in key:
        if type(part) is int:
            parts.append(str(part))
        elif type(part) is str and 0 < len(part) <= 16 and _SAFE.issuperset(part):
            parts.append(f"%22{part}%22")
        else:
            return None
    name = f"%5B{'%2C'.join(parts)}%5D"
    return name if len(name) <= _MAX_NAME else None


def key_filename(key: Key) -> str:
    """Return a file-name stem for ``key``: readable, unique, never a path.

    Every character outside ``[A-Za-z0-9_-]`` is percent-encoded (so ``.`` and ``/`` never
    appear); over-long names are shortened and suffixed with a hash of the full key.
    """
    simple = _simple_filename(key)
    if simple is not None:
        return simple
    text = json.dumps(key_to_json(key), separators=(",", ":"), ensure_ascii=False)
    name = urllib.parse.quote(text, safe="").replace(".", "%2E").replace("~", "%7E")
    if len(name) > _MAX_NAME:
        digest = hashlib.sha1(text.encode()).hexdigest()[:16]
        name = name[: _MAX_NAME - 17] + "_" + digest
    return name


def key_from_filename(stem: str) -> Key | None:
    """Invert :func:`key_filename`; ``None`` for a shortened name (or one it never made)."""
    if len(stem) == _MAX_NAME and "_" in stem[-17:]:
        return None  # shortened, with a hash of the key: the key is not in it
    try:
        return key_from_json(json.loads(urllib.parse.unquote(stem)))
    except (ValueError, TypeError):
        return None
