"""Agreement and adjudication. Two coders agree when neither answer is unresolved and their latest answers are equal
on the fields the protocol evaluates: the value of each evaluated head (a category head: whether the category is
ticked; ``about_ca_*``: the boolean), as :meth:`.assignments.AssignmentsMixin.record_study` kept them. A protocol the
store knows no heads of compares every :data:`.validate.OUTCOME_FIELDS` field (the SPEC section 3 fields but
``confidence``, plus ``unresolved``). Otherwise the work goes to adjudication, and the latest adjudication that is not
itself unresolved is the work's final human code. An adjudicator never settles a work they coded.

An agreed code whose two answers differ on a field the protocol does not evaluate (a genre, a category not under
test) keeps only what both said: such a field is None, a category ticked by one coder is left out of ``categories``,
and ``disputed`` names each (its heads then say nothing, :func:`head_of`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...vocab import CATEGORIES
from .answers import AnswersMixin, latest
from .assignments import AssignmentsMixin
from .coders import CodersMixin
from .errors import CodingError
from .rules import ADJUDICATOR, CODERS_PER_WORK
from .validate import OUTCOME_FIELDS


def head_of(code: Mapping[str, Any], head: str) -> int | None:
    """A code's value on a binary head: 1 / 0, None when it says nothing (no categories or boolean, or the head is
    in its ``disputed`` list)."""
    if head in code.get("disputed", ()):
        return None
    if head in CATEGORIES:
        cats = code.get("categories")
        return None if cats is None else int(head in cats)
    value = code.get(head)
    return None if value is None else int(bool(value))


def differing_fields(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Every :data:`OUTCOME_FIELDS` field two answers differ on (what an adjudicator's form leaves blank)."""
    return [f for f in OUTCOME_FIELDS if a[f] != b[f]]


def disputed_heads(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """The categories one answer ticks and the other does not, then the other differing fields but ``unresolved``."""
    cats = sorted(set(a["categories"] or ()) ^ set(b["categories"] or ()), key=CATEGORIES.index)
    return cats + [f for f in differing_fields(a, b) if f not in ("categories", "unresolved")]


class AdjudicationMixin(AnswersMixin, AssignmentsMixin, CodersMixin):
    """The works to adjudicate, the final human codes, the progress of a protocol, and adjudicating."""

    def _states(self, protocol_id: str) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
        """The protocol's tasks and, per work with answers, ``codes`` (latest per coder) and ``adjudication`` (latest)."""
        with self._read() as con:
            tasks = [
                dict(r)
                for r in con.execute(
                    "SELECT id, position, evidence_sha256, json_extract(evidence_json, '$.title') AS title "
                    "FROM coding_tasks WHERE protocol_id = ? ORDER BY position, id",
                    [protocol_id],
                )
            ]
            answers = latest(con, protocol_id)
        states: dict[str, dict[str, Any]] = {}
        for a in answers:
            s = states.setdefault(a["id"], {"codes": [], "adjudication": None})
            if a["role"] == "code":
                s["codes"].append(a)
            elif s["adjudication"] is None or (a["submitted_at"], a["seq"]) > (
                s["adjudication"]["submitted_at"],
                s["adjudication"]["seq"],
            ):
                s["adjudication"] = a
        return tasks, states

    @staticmethod
    def _resolved(state: Mapping[str, Any]) -> bool:
        adj = state["adjudication"]
        return adj is not None and not adj["unresolved"]

    def _evaluated(self, protocol_id: str) -> list[str] | None:
        """The heads the protocol evaluates (None: the store keeps none of it, every field is compared)."""
        study = self.study(protocol_id)
        return None if study is None else study["heads"]

    @staticmethod
    def _differing(codes: list[dict[str, Any]], heads: list[str] | None = None) -> list[str]:
        """The fields that send a pair to adjudication (module docstring), in :data:`OUTCOME_FIELDS` order."""
        a, b = codes[0], codes[1]
        if heads is None:
            fields = [f for f in OUTCOME_FIELDS if a[f] != b[f]]
            if not fields and (a["unresolved"] or b["unresolved"]):
                fields = ["unresolved"]
            return fields
        differ = {"categories" if h in CATEGORIES else h for h in heads if head_of(a, h) != head_of(b, h)}
        if a["unresolved"] or b["unresolved"]:
            differ.add("unresolved")
        return [f for f in OUTCOME_FIELDS if f in differ]

    def disagreements(self, protocol_id: str) -> list[dict[str, Any]]:
        """The works to adjudicate, in queue order: two coders' latest answers differ on a field the protocol
        evaluates (module docstring), or one of them is unresolved, and no adjudication that is not itself unresolved
        exists. Each: ``id``, ``position``, ``title`` (the current evidence's), ``fields`` (the evaluated fields that
        differ: why it is here), ``differs`` (every :data:`OUTCOME_FIELDS` field that differs), ``agreed`` (the
        values both answers give, on the fields they agree on, and the categories both ticked), ``answers`` (both, by
        coder name, each with the evidence version it was shown), ``adjudication`` (the latest unresolved attempt, or
        None), ``evidence_sha256`` (current)."""
        tasks, states = self._states(protocol_id)
        heads = self._evaluated(protocol_id)
        out = []
        for t in tasks:
            s = states.get(t["id"])
            if s is None or len(s["codes"]) < CODERS_PER_WORK or self._resolved(s):
                continue
            codes = sorted(s["codes"], key=lambda a: a["coder"])
            fields = self._differing(codes, heads)
            if fields:
                differs = differing_fields(*codes[:2])
                agreed = {f: codes[0][f] for f in OUTCOME_FIELDS if f not in differs}
                agreed["categories"] = sorted(
                    set(codes[0]["categories"] or ()) & set(codes[1]["categories"] or ()), key=CATEGORIES.index
                )
                out.append(
                    {
                        "id": t["id"],
                        "position": t["position"],
                        "title": t["title"],
                        "fields": fields,
                        "differs": differs,
                        "agreed": agreed,
                        "answers": codes,
                        "adjudication": s["adjudication"],
                        "evidence_sha256": t["evidence_sha256"],
                    }
                )
        return out

    def adjudicated_codes(self, protocol_id: str) -> list[dict[str, Any]]:
        """The final human code per work, in queue order: the latest adjudication that is not unresolved (``basis``
        ``adjudicated``), else the agreed answer of two coders (``agreed``), else the answer of the only coder so far
        when it is not unresolved (``single_coder``, flagged ``single_coder=True``). Works awaiting adjudication have
        none. Each: ``protocol_id``, ``id``, ``position``, ``basis``, ``single_coder``, the :data:`OUTCOME_FIELDS`
        but ``unresolved``, ``disputed`` (an agreed code's fields and categories the two answers differ on outside
        the evaluated heads, module docstring; else empty), ``coders``, ``answer_ids`` (the answers it rests on),
        ``evidence_sha256s`` (what they saw)."""
        tasks, states = self._states(protocol_id)
        heads = self._evaluated(protocol_id)
        out = []
        for t in tasks:
            s = states.get(t["id"])
            if s is None or not s["codes"]:
                continue
            codes = sorted(s["codes"], key=lambda a: a["coder"])
            if self._resolved(s):
                basis, final, used = "adjudicated", s["adjudication"], [*codes, s["adjudication"]]
            elif len(codes) >= CODERS_PER_WORK and not self._differing(codes, heads):
                basis, final, used = "agreed", codes[0], codes
            elif len(codes) == 1 and not codes[0]["unresolved"]:
                basis, final, used = "single_coder", codes[0], codes
            else:
                continue
            row = {"protocol_id": protocol_id, "id": t["id"], "position": t["position"], "basis": basis}
            row["single_coder"] = len(codes) == 1
            row.update({f: final[f] for f in OUTCOME_FIELDS if f != "unresolved"})
            row["disputed"] = []
            if basis == "agreed" and differing_fields(codes[0], codes[1]):
                row["disputed"] = disputed_heads(codes[0], codes[1])
                row["categories"] = sorted(
                    set(codes[0]["categories"]) & set(codes[1]["categories"]), key=CATEGORIES.index
                )
                for f in differing_fields(codes[0], codes[1]):
                    if f not in ("categories", "unresolved"):
                        row[f] = None
            row["coders"] = [a["coder"] for a in codes]
            row["answer_ids"] = [a["answer_id"] for a in used]
            row["evidence_sha256s"] = sorted({a["evidence_sha256"] for a in used})
            out.append(row)
        return out

    def task_progress(self, protocol_id: str) -> dict[str, Any]:
        """Counts of a protocol: ``tasks``, ``no_coder``, ``one_coder``, ``two_coders``, ``agreed``,
        ``disagreements`` (awaiting adjudication), ``adjudicated``, ``final_codes`` (works with a final human code,
        single-coder ones included), ``answers`` (rows appended) and ``by_coder`` (works each coder has answered)."""
        tasks, states = self._states(protocol_id)
        heads = self._evaluated(protocol_id)
        counts: dict[str, Any] = dict.fromkeys(
            ("tasks", "no_coder", "one_coder", "two_coders", "agreed", "disagreements", "adjudicated"), 0
        )
        by_coder: dict[str, int] = {}
        counts["tasks"] = len(tasks)
        for t in tasks:
            s = states.get(t["id"], {"codes": [], "adjudication": None})
            n = len(s["codes"])
            counts[("no_coder", "one_coder")[n] if n < 2 else "two_coders"] += 1
            for a in s["codes"]:
                by_coder[a["coder"]] = by_coder.get(a["coder"], 0) + 1
            if n >= CODERS_PER_WORK:
                if self._resolved(s):
                    counts["adjudicated"] += 1
                elif self._differing(sorted(s["codes"], key=lambda a: a["coder"]), heads):
                    counts["disagreements"] += 1
                else:
                    counts["agreed"] += 1
        counts["final_codes"] = len(self.adjudicated_codes(protocol_id))
        with self._read() as con:
            counts["answers"] = con.execute(
                "SELECT count(*) FROM coding_answers WHERE protocol_id = ?", [protocol_id]
            ).fetchone()[0]
        counts["by_coder"] = dict(sorted(by_coder.items()))
        return counts

    def adjudication_queue(self, protocol_id: str, adjudicator: str) -> tuple[list[dict[str, Any]], int]:
        """The disagreements (:meth:`disagreements`) ``adjudicator`` may settle, and how many others are left to
        another adjudicator because ``adjudicator`` coded the work themselves (an adjudicator is never one of the
        two coders whose answers they settle)."""
        items = self.disagreements(protocol_id)
        mine = [d for d in items if adjudicator not in {a["coder"] for a in d["answers"]}]
        return mine, len(items) - len(mine)

    def adjudicate(
        self,
        protocol_id: str,
        work_id: str,
        adjudicator: str,
        answer: Mapping[str, Any],
        *,
        evidence_sha256: str,
        abstract_sha256: str | None = None,
    ) -> str:
        """Append an adjudication (:meth:`submit` with role ``adjudication``, ``abstract_sha256`` the abstract the
        page showed) by a coder holding the adjudicator role who did not code the work; returns its ``answer_id``.
        Refused (:class:`CodingError`) otherwise."""
        if not self.has_role(adjudicator, ADJUDICATOR):
            raise CodingError("coder", f"coder {adjudicator!r} is not an adjudicator")
        with self._read() as con:
            own = con.execute(
                "SELECT 1 FROM coding_answers WHERE protocol_id = ? AND id = ? AND coder = ? AND role = 'code'",
                [protocol_id, work_id, adjudicator],
            ).fetchone()
        if own is not None:
            raise CodingError("coder", f"{adjudicator} coded {work_id}: another adjudicator settles it")
        # only a disagreement is adjudicated (again, if need be: the latest adjudication counts); an agreed code is
        # the human code, and an adjudication posted over it would replace what the two coders said
        codes = sorted(self._states(protocol_id)[1].get(work_id, {"codes": []})["codes"], key=lambda a: a["coder"])
        if len(codes) < CODERS_PER_WORK or not self._differing(codes, self._evaluated(protocol_id)):
            raise CodingError("id", f"{work_id} has no disagreement to settle: its two coders have not disagreed")
        return self.submit(
            protocol_id,
            work_id,
            adjudicator,
            answer,
            role="adjudication",
            evidence_sha256=evidence_sha256,
            abstract_sha256=abstract_sha256,
        )
