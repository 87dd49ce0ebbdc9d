"""What the map may claim, at graph level: warning checks on the assets whose output the map shows.

A machine output may be claimed (SPEC sections 4 and 10) only when every role teacher whose labels feed it passed
its qualification test (``teacher_qualification``, :func:`metacan_pipeline.teachers.qualification.qualification_standing`)
and every head it decides with passed human validation (the newest ``human_validation`` row of a locked protocol
passed for that classifier version and head, :func:`.gate.passing_heads`). The heads an output decides with are the
sample teacher's binary heads of the current model version (``student_heads``) that passed the support gate: a head
that failed it decides nothing and claims nothing.

:func:`claims_result` is a plain function over the catalog (small tables only: ``teacher_qualification``,
``human_validation``, ``audit_protocols``, ``student_heads``); :func:`claims_check` wraps it as a non-blocking check of
severity WARN, so a run never fails on it and the UI shows, on the asset itself, which teacher or head stands in the way
and what would change it.
"""

from __future__ import annotations

import dagster as dg

from ..storage import MetacanStorage
from ..student.roles import ROLE_TEACHERS, SAMPLE
from ..teachers.core.registry import load_registry
from ..teachers.qualification import TO_QUALIFY, load_qualification, qualification_standing
from ..vocab import ABOUT_CA_TARGETS, CATEGORIES
from .gate import passing_heads

#: What validates a head that has not passed: the step an operator takes.
TO_VALIDATE = (
    "validate the head: code the audit sample (metacan coding server) until the gate passes, then materialize "
    "validation_report"
)
#: The binary heads a protocol can validate (the categorical heads are never evaluated by one).
BINARY_HEADS = (*CATEGORIES, *ABOUT_CA_TARGETS)


def decided_heads(storage: MetacanStorage, heads: tuple[str, ...] = BINARY_HEADS) -> tuple[str | None, list[str]]:
    """The model version of ``student_heads`` and, of ``heads``, those of the sample teacher that passed the support
    gate in it, in ``heads`` order; ``(None, [])`` before any ``student_heads``."""
    if not storage.has_table("student_heads"):
        return None, []
    rows = storage.read_table("student_heads", ["model_version", "teacher", "target", "gate_passed"]).to_pylist()
    if not rows:
        return None, []
    version = rows[0]["model_version"]
    gated = {r["target"] for r in rows if r["teacher"] == SAMPLE and r["gate_passed"]}
    return version, [h for h in heads if h in gated]


def heads_not_validated(storage: MetacanStorage, version: str, heads: list[str]) -> dict[str, str]:
    """``{head: why it is not validated}`` for every head of ``heads`` without a passing newest ``human_validation``
    row for ``version``: the newest row's reason, lower bounds and coded works, or that no audit has judged it."""
    with storage.connect() as con:
        passed = {row["head"] for row in passing_heads(con).get(version, [])}
        newest = {
            r[0]: r[1:]
            for r in con.execute(
                """SELECT head, protocol_id, reason, precision_lower, recall_lower, n_coded FROM human_validation
                   WHERE classifier_version = ?
                   QUALIFY row_number() OVER (PARTITION BY head ORDER BY computed_at DESC, run_id DESC) = 1""",
                [version],
            ).fetchall()
        }
    out = {}
    for head in heads:
        if head in passed:
            continue
        if head not in newest:
            out[head] = f"not validated: no human_validation row for {version} (no audit has judged it)"
            continue
        pid, reason, p_low, r_low, n = newest[head]
        bounds = ", ".join(
            f"{name} lower bound {v:.3f}" for name, v in (("precision", p_low), ("recall", r_low)) if v is not None
        )
        out[head] = f"not validated under {pid}: {reason} ({bounds + '; ' if bounds else ''}{n} works coded)"
    return out


def teachers_not_qualified(storage: MetacanStorage) -> tuple[dict[str, dict], dict[str, str]]:
    """The standing of every role teacher (:func:`qualification_standing`, by name) and ``{teacher: note}`` of
    those not qualified."""
    registry, cfg = load_registry(), load_qualification()
    standing = {name: qualification_standing(storage, registry[name], cfg) for name in dict.fromkeys(ROLE_TEACHERS)}
    return standing, {name: s["note"] for name, s in standing.items() if not s["qualified"]}


def claims_result(storage: MetacanStorage, heads: tuple[str, ...] = BINARY_HEADS) -> dict:
    """``passed`` and ``metadata`` of a claims check: passed when every role teacher is qualified and every head of
    ``heads`` the current model version decides with passed human validation. The metadata name each teacher not
    qualified (with kappa, the kappa needed, when tested) and each head not validated (with the gate's reason), and
    what would change it."""
    standing, unqualified = teachers_not_qualified(storage)
    version, decided = decided_heads(storage, heads)
    unvalidated = heads_not_validated(storage, version, decided) if version else {}
    table = "| teacher | status | kappa | needed | tested |\n|---|---|---|---|---|\n" + "".join(
        f"| {name} | {s['status']} | {_num(s['kappa'])} | {_num(s['needed_kappa'])} | {s['tested_at'] or 'never'} |\n"
        for name, s in standing.items()
    )
    steps = ([f"{TO_QUALIFY} ({', '.join(unqualified)})"] if unqualified else []) + (
        [f"{TO_VALIDATE} ({', '.join(unvalidated)})"] if unvalidated else []
    )
    return {
        "passed": not unqualified and not unvalidated,
        "metadata": {
            "teachers": dg.MetadataValue.md(table),
            "teachers_not_qualified": dg.MetadataValue.json(unqualified),
            "model_version": version or "none (student_heads not materialized)",
            "heads_deciding": dg.MetadataValue.json(decided),
            "heads_not_validated": dg.MetadataValue.json(unvalidated),
            "what_would_change_it": dg.MetadataValue.md(
                "".join(f"- {s}\n" for s in steps) or "nothing: all is claimed"
            ),
        },
    }


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def claims_check(asset: str, name: str, shows: str, heads: tuple[str, ...] = BINARY_HEADS) -> dg.AssetChecksDefinition:
    """The warning check ``name`` on ``asset`` (:func:`claims_result` over ``heads``); ``shows``: what the asset
    shows, for its description."""

    @dg.asset_check(
        asset=asset,
        name=name,
        blocking=False,
        description=f"What the map may claim from {shows}. A warning while a role teacher whose labels feed it is not "
        "qualified, or a head it decides with has not passed human validation: until then its categories are "
        "machine predictions, unvalidated. The metadata name the teacher or heads, their current status and what "
        "would change it.",
    )
    def _check(storage: MetacanStorage) -> dg.AssetCheckResult:
        return dg.AssetCheckResult(**claims_result(storage, heads), severity=dg.AssetCheckSeverity.WARN)

    return _check


#: The claims checks: on the predictions, on the prevalence (classify-and-count counts the nine categories' decisions)
#: and on the work records the pages show.
CLAIM_CHECKS = [
    claims_check("predictions", "predictions_may_claim", "the predictions (candidate and consensus categories)"),
    claims_check(
        "prevalence", "prevalence_may_claim", "the prevalence (teacher rates, classify-and-count)", CATEGORIES
    ),
    claims_check("work_records", "records_may_claim", "the work records the pages show"),
]
