"""Coders, their roles and their sign-in sessions. A coder signs in with a personal token (``secrets.token_urlsafe``):
only its SHA-256 is stored, it is never logged, and :meth:`CodersMixin.coder_for_token` compares digests in constant
time. A session of the coding pages is stored the same way, by its SHA-256."""

from __future__ import annotations

import datetime as dt
import hmac
import logging
import secrets
import sqlite3

from .base import StoreBase
from .errors import CodingError, shown
from .rules import ADJUDICATOR, CODER_ROLES, SESSION_TTL, check_coder_name, iso, now_iso, sha256_hex

log = logging.getLogger(__name__)


def active_coder(con: sqlite3.Connection, coder: str) -> None:
    """Raise :class:`CodingError` unless ``coder`` is registered and not revoked (inside a transaction on ``con``)."""
    row = con.execute("SELECT revoked_at FROM coders WHERE coder = ?", [coder]).fetchone()
    if row is None:
        raise CodingError("coder", f"no coder named {shown(coder)}")
    if row["revoked_at"] is not None:
        raise CodingError("coder", f"coder {coder!r} was revoked at {row['revoked_at']}")


class CodersMixin(StoreBase):
    """Coders (add, revoke, list, sign in by token), their roles (adjudicator) and their sessions."""

    def add_coder(self, name: str) -> str:
        """Register coder ``name`` and return their sign-in token (shown once: only its SHA-256 is stored). A name
        already present, revoked or not, in any letter case, is refused."""
        check_coder_name(name)
        token = secrets.token_urlsafe(32)
        with self._write() as con:
            row = con.execute("SELECT coder FROM coders WHERE lower(coder) = lower(?)", [name]).fetchone()
            if row is not None:
                raise CodingError(
                    "coder", f"a coder named {row[0]!r} exists already (revoked or not): choose another name"
                )
            con.execute("INSERT INTO coders VALUES (?, ?, ?, NULL)", [name, sha256_hex(token), now_iso()])
        log.info("coder %s added", name)
        return token

    def revoke_coder(self, name: str) -> str:
        """Revoke ``name``'s token (their answers stay); returns the revocation time. Unknown or revoked: CodingError."""
        now = now_iso()
        with self._write() as con:
            row = con.execute("SELECT revoked_at FROM coders WHERE coder = ?", [name]).fetchone()
            if row is None:
                raise CodingError("coder", f"no coder named {shown(name)}")
            if row["revoked_at"] is not None:
                raise CodingError("coder", f"coder {name!r} was revoked already at {row['revoked_at']}")
            con.execute("UPDATE coders SET revoked_at = ? WHERE coder = ?", [now, name])
        log.info("coder %s revoked", name)
        return now

    def stored_name(self, name: str) -> str:
        """The spelling the store has of coder ``name`` (names match ignoring letter case, as ``add_coder`` refuses a
        case variant), or ``name`` itself when there is no such coder (the caller's error then names it)."""
        with self._read() as con:
            row = con.execute("SELECT coder FROM coders WHERE lower(coder) = lower(?) LIMIT 1", [name]).fetchone()
        return name if row is None else row["coder"]

    def list_coders(self) -> list[dict[str, str | None]]:
        """Every coder: ``coder``, ``created_at``, ``revoked_at`` (never a token or its hash)."""
        with self._read() as con:
            rows = con.execute("SELECT coder, created_at, revoked_at FROM coders ORDER BY created_at, coder").fetchall()
        return [dict(r) for r in rows]

    def coder_for_token(self, token: object) -> str | None:
        """The active coder whose token this is, else None. Every active coder's digest is compared in constant time
        (``hmac.compare_digest``), with no early exit."""
        if not isinstance(token, str) or not 16 <= len(token) <= 256:
            return None
        digest = sha256_hex(token)
        with self._read() as con:
            rows = con.execute("SELECT coder, token_sha256 FROM coders WHERE revoked_at IS NULL").fetchall()
        found = None
        for row in rows:
            if hmac.compare_digest(row["token_sha256"], digest):
                found = row["coder"]
        return found

    def grant_role(self, coder: str, role: str = ADJUDICATOR) -> str:
        """Give an active coder ``role`` (:data:`CODER_ROLES`; again after a revocation); returns the time."""
        if role not in CODER_ROLES:
            raise CodingError("role", f"role={role!r}: expected one of {list(CODER_ROLES)}")
        now = now_iso()
        with self._write() as con:
            active_coder(con, coder)
            con.execute(
                "INSERT INTO coder_roles VALUES (?, ?, ?, NULL) "
                "ON CONFLICT (coder, role) DO UPDATE SET granted_at = excluded.granted_at, revoked_at = NULL",
                [coder, role, now],
            )
        log.info("coder %s is %s", coder, role)
        return now

    def revoke_role(self, coder: str, role: str = ADJUDICATOR) -> str:
        """Take ``role`` back from ``coder`` (their answers stay); CodingError when they do not hold it."""
        now = now_iso()
        with self._write() as con:
            cur = con.execute(
                "UPDATE coder_roles SET revoked_at = ? WHERE coder = ? AND role = ? AND revoked_at IS NULL",
                [now, coder, role],
            )
            if cur.rowcount == 0:
                raise CodingError("coder", f"coder {coder!r} is not {role}")
        log.info("coder %s is no longer %s", coder, role)
        return now

    def has_role(self, coder: str, role: str = ADJUDICATOR) -> bool:
        """True when ``coder`` is active and holds ``role``."""
        with self._read() as con:
            row = con.execute(
                "SELECT 1 FROM coder_roles r JOIN coders c USING (coder) "
                "WHERE r.coder = ? AND r.role = ? AND r.revoked_at IS NULL AND c.revoked_at IS NULL",
                [coder, role],
            ).fetchone()
        return row is not None

    def coder_roles(self) -> dict[str, list[str]]:
        """The roles each coder holds now, by coder name (coders without a role are absent)."""
        with self._read() as con:
            rows = con.execute(
                "SELECT coder, role FROM coder_roles WHERE revoked_at IS NULL ORDER BY coder, role"
            ).fetchall()
        out: dict[str, list[str]] = {}
        for r in rows:
            out.setdefault(r["coder"], []).append(r["role"])
        return out

    def open_session(self, coder: str, ttl: dt.timedelta = SESSION_TTL) -> str:
        """A new sign-in session of an active coder: returns the session value (the cookie's; only its SHA-256 is
        stored), valid ``ttl`` unless the coder signs out or is revoked first."""
        session = secrets.token_urlsafe(32)
        now = dt.datetime.now(dt.UTC)
        with self._write() as con:
            active_coder(con, coder)
            con.execute(
                "INSERT INTO coding_sessions VALUES (?, ?, ?, ?, NULL)",
                [sha256_hex(session), coder, iso(now), iso(now + ttl)],
            )
        log.info("coder %s signed in", coder)
        return session

    def session_coder(self, session: object) -> str | None:
        """The coder of a live session (not expired, not ended, the coder not revoked), else None."""
        if not isinstance(session, str) or not 16 <= len(session) <= 256:
            return None
        with self._read() as con:
            row = con.execute(
                "SELECT s.coder FROM coding_sessions s JOIN coders c USING (coder) WHERE s.session_sha256 = ? "
                "AND s.ended_at IS NULL AND s.expires_at > ? AND c.revoked_at IS NULL",
                [sha256_hex(session), now_iso()],
            ).fetchone()
        return None if row is None else row["coder"]

    def end_session(self, session: object) -> None:
        """Sign out: the session stops working (an unknown or ended one is ignored)."""
        if isinstance(session, str):
            with self._write() as con:
                con.execute(
                    "UPDATE coding_sessions SET ended_at = ? WHERE session_sha256 = ? AND ended_at IS NULL",
                    [now_iso(), sha256_hex(session)],
                )
