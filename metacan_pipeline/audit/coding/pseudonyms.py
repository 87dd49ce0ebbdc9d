"""Coders' pseudonyms and the study as it is released: no name, email or Label Studio identity leaves the coding store.

A coder's pseudonym in a study is ``coder-`` + the first 10 hex digits of HMAC-SHA256(key, ``<protocol_id>\\x00<coder>``),
the key being a random 32-byte secret created once in the store's ``coding_secrets`` table (``pseudonym_key``) and never
exported. Why a keyed hash rather than a sequence ``C01, C02``:

- stable: the same coder in the same study has the same pseudonym in every report run and every release, with nothing
  to keep per coder (a sequence would have to be stored and could not be re-derived from a backup of the answers);
- not reversible from a bundle: without the key nobody can test a guessed name or email against a pseudonym (a plain
  hash of a name or email could be checked against a list of candidates);
- per study: the protocol id is in the message, so one person's pseudonyms in two studies cannot be linked.

An answer's id is replaced the same way (``answer-`` + 16 hex of HMAC(key, ``answer\\x00<answer_id>``)): an imported
answer's id is a hash of the annotator's email, the annotation id and its time, which a list of candidate emails could
be tested against. The coder's ``note`` and an import's ``provenance`` (the annotator's email and id) are never
released.

:meth:`PseudonymsMixin.released_answers` and :meth:`PseudonymsMixin.released_tasks` read a protocol's answers and
tasks as they are released.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from typing import Any

from .base import StoreBase
from .rules import now_iso

PSEUDONYM_KEY = "pseudonym_key"
CODER_PREFIX, ANSWER_PREFIX = "coder-", "answer-"
#: The columns of a released answer (``coding_answers`` less ``note`` and ``provenance``, plus its append order).
RELEASED_ANSWER_COLUMNS: tuple[str, ...] = (
    "protocol_id", "answer_id", "seq", "id", "coder", "role", "categories", "domain", "study_design", "genre",
    "about_ca_system", "about_ca_topic", "confidence", "unresolved", "evidence_sha256", "submitted_at", "source",
)  # fmt: skip


def _mac(key: bytes, message: str, digits: int) -> str:
    return hmac.new(key, message.encode("utf-8"), hashlib.sha256).hexdigest()[:digits]


def coder_pseudonym(key: bytes, protocol_id: str, coder: str) -> str:
    """The pseudonym of ``coder`` in the study ``protocol_id`` (module docstring)."""
    return CODER_PREFIX + _mac(key, f"{protocol_id}\x00{coder}", 10)


def answer_pseudonym(key: bytes, answer_id: str) -> str:
    """The released id of the answer ``answer_id`` (module docstring)."""
    return ANSWER_PREFIX + _mac(key, f"answer\x00{answer_id}", 16)


class PseudonymsMixin(StoreBase):
    """The store's pseudonym key and a protocol's answers as released."""

    def pseudonym_key(self) -> bytes:
        """The store's pseudonym key, created (32 random bytes) the first time it is asked for."""
        with self._read() as con:
            row = con.execute("SELECT value FROM coding_secrets WHERE name = ?", [PSEUDONYM_KEY]).fetchone()
        if row is None:
            with self._write() as con:  # INSERT OR IGNORE: a key another process created first wins
                con.execute(
                    "INSERT OR IGNORE INTO coding_secrets VALUES (?, ?, ?)",
                    [PSEUDONYM_KEY, secrets.token_hex(32), now_iso()],
                )
                row = con.execute("SELECT value FROM coding_secrets WHERE name = ?", [PSEUDONYM_KEY]).fetchone()
        return bytes.fromhex(row["value"])

    def released_answers(self, protocol_id: str) -> list[dict[str, Any]]:
        """Every answer of ``protocol_id`` ever appended (:data:`RELEASED_ANSWER_COLUMNS`, in append order ``seq``)
        with the coder's pseudonym and the answer's released id; categories a list, booleans as bools. Raises
        ValueError when two coders of the study would share a pseudonym (a new key is then needed)."""
        key = self.pseudonym_key()
        columns = ", ".join(c if c != "seq" else "rowid AS seq" for c in RELEASED_ANSWER_COLUMNS)
        with self._read() as con:
            rows = [
                dict(r)
                for r in con.execute(
                    f"SELECT {columns} FROM coding_answers WHERE protocol_id = ? ORDER BY rowid", [protocol_id]
                )
            ]
        names: dict[str, str] = {}
        for r in rows:
            alias = coder_pseudonym(key, protocol_id, r["coder"])
            if names.setdefault(alias, r["coder"]) != r["coder"]:
                raise ValueError(f"two coders of protocol {protocol_id} share the pseudonym {alias}: rotate the key")
            r["coder"] = alias
            r["answer_id"] = answer_pseudonym(key, r["answer_id"])
            r["categories"] = None if r["categories"] is None else json.loads(r["categories"])
            for f in ("about_ca_system", "about_ca_topic"):
                r[f] = None if r[f] is None else bool(r[f])
            r["unresolved"] = bool(r["unresolved"])
        return rows

    def released_tasks(self, protocol_id: str) -> list[dict[str, Any]]:
        """The protocol's tasks as released: ``protocol_id, id, position, evidence_sha256`` (no evidence text), in
        queue order."""
        with self._read() as con:
            return [
                dict(r)
                for r in con.execute(
                    "SELECT protocol_id, id, position, evidence_sha256 FROM coding_tasks WHERE protocol_id = ? "
                    "ORDER BY position, id",
                    [protocol_id],
                )
            ]
