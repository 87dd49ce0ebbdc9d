"""Coder pairs: which two coders code each work of a protocol.

:func:`draw_pairs` assigns every work to a pair of coders, balanced (each coder gets the same number of works, to one,
and each pair as near the same number as that allows), randomised and reproducible: the seed is the protocol's
content SHA-256, so the same protocol, works and coders always give the same pairs and another protocol gives others.
Works are taken in the order of SHA-256(``<seed>:<work id>``); each gets the two least loaded coders, ties broken by
the pair used least, then by SHA-256(``<seed>:<work id>:<coder>:<coder>``).

The coders are the active coders without the adjudicator role when the works are assigned (an adjudicator settles
the pairs' disagreements, so they never code a work; a coordinator may name the coders instead). Rules the store
keeps (:class:`AssignmentsMixin`):

- a protocol with assignments hands each coder their own works only: the queue, opening a work and submitting an
  answer refuse a work not assigned to the coder (a protocol without any hands works out first come, first served);
- loading tasks assigns the works that have no pair yet, over the coders active then, and changes no assignment;
- re-balancing (``metacan coding assign --rebalance``, after adding or revoking a coder) draws again the pairs of the
  works nobody has answered yet; a work with an answer keeps every coder who answered it, and keeps its other
  coder too unless that coder was revoked or took the adjudicator role (then a new partner is drawn for them).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .base import StoreBase
from .errors import CodingError
from .rules import ADJUDICATOR, CODERS_PER_WORK, check_protocol_id, now_iso

log = logging.getLogger(__name__)


def _rank(*parts: str) -> int:
    return int(hashlib.sha256(":".join(parts).encode()).hexdigest()[:16], 16)


def draw_pairs(
    seed: str,
    works: Iterable[str],
    coders: Sequence[str],
    kept: Mapping[str, Sequence[str]] | None = None,
    load: Mapping[str, int] | None = None,
    pair_load: Mapping[tuple[str, str], int] | None = None,
) -> dict[str, tuple[str, ...]]:
    """The coders of each of ``works`` (a tuple of :data:`CODERS_PER_WORK`, in name order), drawn as the module
    docstring says. ``kept``: per work, the coders it keeps (they may be outside ``coders``: a revoked coder who
    answered); only its other places are drawn. ``load`` / ``pair_load``: works each coder / pair holds already
    (works not drawn again), counted in the balance. Raises :class:`CodingError` with fewer than two coders."""
    pool = sorted(set(coders))
    if len(pool) < CODERS_PER_WORK:
        raise CodingError(
            "coder",
            f"coder pairs need at least {CODERS_PER_WORK} coders without the adjudicator role, got {pool}: "
            "add coders with `metacan coders add NAME`",
        )
    kept = kept or {}
    loads = Counter({c: 0 for c in pool}) + Counter(load or {})
    pairs = Counter(pair_load or {})
    out: dict[str, tuple[str, ...]] = {}
    for wid in sorted(set(works), key=lambda w: (_rank(seed, w), w)):
        have = sorted(set(kept.get(wid, ())))[:CODERS_PER_WORK]
        free = [c for c in pool if c not in have]
        need = CODERS_PER_WORK - len(have)
        if len(free) < need:
            raise CodingError("coder", f"{wid} keeps coders {have}: too few other coders ({free}) to complete it")
        best = min(
            itertools.combinations(free, need),
            key=lambda add: (
                sum(loads[c] for c in add),
                max((loads[c] for c in add), default=0),
                pairs[tuple(sorted((*have, *add)))],
                _rank(seed, wid, *sorted((*have, *add))),
            ),
        )
        chosen = tuple(sorted((*have, *best)))
        for c in best:
            loads[c] += 1
        pairs[chosen] += 1
        out[wid] = chosen
    return out


class AssignmentsMixin(StoreBase):
    """The coder pairs of a protocol's works (``coding_assignments``) and what the store keeps of the protocol
    (``coding_studies``: the seed and the evaluated heads)."""

    def record_study(self, protocol_id: str, content_sha256: str, heads: Sequence[str]) -> None:
        """Keep a protocol's content SHA-256 (the seed of its pairs) and evaluated heads; a protocol's content never
        changes, so a second call with the same values writes nothing and one with other values is refused."""
        check_protocol_id(protocol_id)
        with self._write() as con:
            row = con.execute(
                "SELECT content_sha256, heads FROM coding_studies WHERE protocol_id = ?", [protocol_id]
            ).fetchone()
            if row is None:
                con.execute(
                    "INSERT INTO coding_studies VALUES (?, ?, ?, ?)",
                    [protocol_id, content_sha256, _heads_json(heads), now_iso()],
                )
            elif row["content_sha256"] != content_sha256 or _heads(row["heads"]) != list(heads):
                raise CodingError(
                    "protocol_id",
                    f"the coding store knows {protocol_id} with content {row['content_sha256'][:12]}, heads "
                    f"{_heads(row['heads'])}, not {content_sha256[:12]}, heads {list(heads)}: a protocol id names one content",
                )

    def study(self, protocol_id: str) -> dict[str, Any] | None:
        """``content_sha256`` and ``heads`` (a list) kept for a protocol, or None (tasks loaded without a protocol)."""
        with self._read() as con:
            row = con.execute(
                "SELECT content_sha256, heads FROM coding_studies WHERE protocol_id = ?", [protocol_id]
            ).fetchone()
        return None if row is None else {"content_sha256": row["content_sha256"], "heads": _heads(row["heads"])}

    def pair_coders(self) -> list[str]:
        """The coders pairs are drawn from: active, without the adjudicator role, in name order."""
        with self._read() as con:
            rows = con.execute(
                "SELECT coder FROM coders c WHERE revoked_at IS NULL AND NOT EXISTS (SELECT 1 FROM coder_roles r "
                "WHERE r.coder = c.coder AND r.role = ? AND r.revoked_at IS NULL) ORDER BY coder",
                [ADJUDICATOR],
            ).fetchall()
        return [r["coder"] for r in rows]

    def assignments(self, protocol_id: str) -> dict[str, list[str]]:
        """The coders of each assigned work of a protocol (in name order), by work id."""
        with self._read() as con:
            rows = con.execute(
                "SELECT id, coder FROM coding_assignments WHERE protocol_id = ? ORDER BY id, coder", [protocol_id]
            ).fetchall()
        out: dict[str, list[str]] = {}
        for r in rows:
            out.setdefault(r["id"], []).append(r["coder"])
        return out

    def assign_works(
        self,
        protocol_id: str,
        seed: str | None = None,
        coders: Sequence[str] | None = None,
        *,
        rebalance: bool = False,
    ) -> dict[str, Any]:
        """Assign the works of a protocol to coder pairs (module docstring): the works without a pair, or with
        ``rebalance`` the works nobody answered too (and a started work's place held by a coder who can no longer
        code it). ``seed``: the protocol's content SHA-256 (default: the one :meth:`record_study` kept); ``coders``:
        default :meth:`pair_coders`. Returns ``assigned`` (works given a new pair or partner), ``kept`` (works left
        as they were), ``coders`` and ``by_coder`` (works each coder holds now). Raises :class:`CodingError` when
        the seed is unknown, a named coder is not active or holds the adjudicator role, or fewer than two coders."""
        check_protocol_id(protocol_id)
        if seed is None:
            study = self.study(protocol_id)
            if study is None:
                raise CodingError(
                    "protocol_id",
                    f"{protocol_id} was never loaded with its protocol: run `metacan coding load-tasks` first",
                )
            seed = study["content_sha256"]
        eligible = self.pair_coders()
        if coders is None:
            pool = eligible
        else:
            bad = sorted(set(coders) - set(eligible))
            if bad:
                raise CodingError(
                    "coder",
                    f"coders {bad} cannot be paired: each must be active and not an adjudicator ({eligible} can)",
                )
            pool = sorted(set(coders))
        with self._write() as con:
            tasks = [r[0] for r in con.execute("SELECT id FROM coding_tasks WHERE protocol_id = ?", [protocol_id])]
            current: dict[str, list[str]] = {}
            for r in con.execute("SELECT id, coder FROM coding_assignments WHERE protocol_id = ?", [protocol_id]):
                current.setdefault(r["id"], []).append(r["coder"])
            answered: dict[str, set[str]] = {}
            for r in con.execute(
                "SELECT DISTINCT id, coder FROM coding_answers WHERE protocol_id = ? AND role = 'code'", [protocol_id]
            ):
                answered.setdefault(r["id"], set()).add(r["coder"])
            draw: dict[str, list[str]] = {}
            load: Counter[str] = Counter()
            pair_load: Counter[tuple[str, ...]] = Counter()
            for wid in tasks:
                have, done = current.get(wid, []), answered.get(wid, set())
                if not have:  # never assigned: the coders who answered it already (first come) keep it
                    draw[wid] = sorted(done)
                elif rebalance and not done:
                    draw[wid] = []
                elif rebalance and any(c not in done and c not in eligible for c in have):
                    draw[wid] = sorted(done | {c for c in have if c in eligible})
                else:
                    load.update(have)
                    pair_load[tuple(sorted(have))] += 1
            drawn = draw_pairs(seed, draw, pool, draw, load, pair_load) if draw else {}
            now = now_iso()
            for wid, pair in drawn.items():
                con.execute("DELETE FROM coding_assignments WHERE protocol_id = ? AND id = ?", [protocol_id, wid])
                con.executemany(
                    "INSERT INTO coding_assignments VALUES (?, ?, ?, ?)", [(protocol_id, wid, c, now) for c in pair]
                )
                load.update(pair)
        log.info("coder pairs of %s: %d works assigned over %s", protocol_id, len(drawn), pool)
        return {
            "assigned": len(drawn),
            "kept": len(tasks) - len(drawn),
            "coders": pool,
            "by_coder": dict(sorted(load.items())),
        }


def _heads_json(heads: Sequence[str]) -> str:
    return json.dumps(list(heads))


def _heads(text: str) -> list[str]:
    return list(json.loads(text))
