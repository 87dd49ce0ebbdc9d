"""The coding store's errors: :class:`CodingError` for an answer, coder or task it refuses, :class:`CodingStoreError`
for a store file it cannot use, and :func:`shown`, which cuts every value an error message quotes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

#: The longest an error message shows of a value it quotes (:func:`shown`); the longest message a CodingError keeps.
SHOWN_CHARS = 60
MAX_MESSAGE_CHARS = 1000


class CodingError(ValueError):
    """An answer, coder or task the store refuses; ``field`` names what is wrong (an answer field, ``coder``, ``id``...)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field = field if len(field) <= SHOWN_CHARS else field[:SHOWN_CHARS] + "..."
        message = message if message.startswith(field) else f"{field}: {message}"
        if len(message) > MAX_MESSAGE_CHARS:  # a last guard: every value quoted is cut by shown() already
            message = message[:MAX_MESSAGE_CHARS] + f"... ({len(message)} characters in all)"
        super().__init__(message)


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` as an error message quotes it: at most ``limit`` characters, then ``... (N characters)``, so a
    10 MB value is never echoed (or stored in a refusal) in full."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f"{len(value):,} characters" if isinstance(value, str) else f"{len(text):,} characters as text"
    return f"{text[:limit]}... ({size})"


class CodingStoreError(Exception):
    """The coding store file cannot be used: missing, not a SQLite database (corrupt), read-only, busy. The message
    names the file and says what to do; ``path`` is the file."""

    def __init__(self, path: Path, message: str) -> None:
        self.path = path
        super().__init__(message)


def store_error(path: Path, exc: sqlite3.Error, *, read_only: bool = False) -> CodingStoreError:
    """The :class:`CodingStoreError` of a SQLite error on the store ``path`` (the first line of SQLite's message kept)."""
    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    low = msg.lower()
    if "not a database" in low or "malformed" in low or "corrupt" in low:
        return CodingStoreError(
            path,
            f"coding store {path} is not a readable SQLite database ({msg}): it holds human work that nothing rebuilds, "
            "so restore it from your backup (move the damaged file aside first; never delete it)",
        )
    if "readonly" in low or "read-only" in low:
        return CodingStoreError(
            path,
            f"cannot write to coding store {path} ({msg}): the file or its folder is read-only for this user; make "
            "both writable, or work on a writable copy",
        )
    if "locked" in low or "busy" in low:
        return CodingStoreError(
            path, f"coding store {path} is busy ({msg}: another process held its write lock too long): try again"
        )
    if "unable to open" in low:
        return CodingStoreError(
            path,
            f"cannot open coding store {path} ({msg}): check that the file and its folder exist and are "
            + ("readable" if read_only else "writable by this user"),
        )
    return CodingStoreError(path, f"coding store {path}: {msg}")
