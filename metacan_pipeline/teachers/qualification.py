"""Teachers qualify before they count (SPEC section 4).

A teacher's direct labels feed ``candidate``, ``consensus`` and classify-and-count only after it passes a
qualification test against a reference set with frontier labels, fixed in configuration before the test
runs (the registry's ``[qualification]`` table, hashed into every result):

- **Reference set** (``frame1k``, :mod:`.reference`): 750 works of the original frame, each labelled by
  three frontier models (Claude Opus 4.8, GPT-5.6, Grok 4.5, rubric v1.0), the contested ones adjudicated.
  Two strata: ``frontier_in_scope`` (every work at least one frontier model put in scope: 34; the first
  ``in_scope`` of them in salted-hash order, by default all, pi = 1) and ``frontier_out`` (the others,
  ordered by a salted hash of the id, the first ``negatives`` taken, pi = n / N). Design weight = 1 / pi, so weighted figures stand for the 750 works.
- **Reference label**: ``metaresearch`` from the adjudicated scope (the verdict where the arms disagree,
  else their shared scope).
- **Shown to the teacher in its own view** (record view and version, prompt, model): the reference work
  becomes a frame-like row (title reduced to text, ``lang`` -> language, ``venue``, ``topic``, ``field``,
  ``ca_institutions`` marked Canadian, ``funders`` marked Canadian when on the Canadian funder list, the
  abstract for ``title_abstract``) and is labelled through the ordinary labelling path, so its labels are
  cached like every label (a re-run buys nothing).
- **Test**: design-weighted Cohen's kappa of the teacher's ``metaresearch`` against the reference label,
  over the reference works it labelled. It must reach ``min_kappa_ratio`` x the frontier models' own
  mean pairwise kappa on the same works (design-weighted), with at least ``min_works`` labelled works and
  ``min_positives`` reference positives among them; otherwise the status is ``not_qualified`` or
  ``too_few_cases``, and the labels are kept and shown as "direct label, teacher not qualified (...)".
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import httpx
import pyarrow as pa

from ..openalex.abstract import markup_to_text
from ..sampling.design import salted_hash
from ..storage import MetacanStorage
from ..tables.teachers import QUALIFICATION_SCHEMA
from .core.agreement import kappa
from .core.reference import R1_ARMS, frame1k_labels
from .core.registry import TeacherSpec, default_registry_path
from .core.rubric import load_prompt
from .core.store import now_utc
from .export import current_labels
from .labelling import label_works

QUALIFIED, NOT_QUALIFIED, TOO_FEW = "qualified", "not_qualified", "too_few_cases"
STATUSES = (QUALIFIED, NOT_QUALIFIED, TOO_FEW)
IN_SCOPE, OUT = "frontier_in_scope", "frontier_out"
REFERENCES = ("frame1k",)


@dataclass(frozen=True)
class QualificationConfig:
    """The registry's ``[qualification]`` table (defaults below); fixed before the test runs."""

    reference: str = "frame1k"
    in_scope: int = 1000
    negatives: int = 16
    salt: str = "metacan-qualification-1"
    min_kappa_ratio: float = 0.6
    min_works: int = 40
    min_positives: int = 10

    @classmethod
    def from_table(cls, table: dict[str, Any] | None, where: str) -> QualificationConfig:
        """From a TOML table; ValueError naming ``where`` and the key for an unknown key or a bad value."""
        if table is None:
            table = {}
        if not isinstance(table, dict):
            raise ValueError(f"{where}: qualification must be a table ([qualification] with key = value lines)")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(table) - known)
        if unknown:
            raise ValueError(f"{where}: [qualification] has unknown keys {unknown}; expected {sorted(known)}")
        cfg = cls(**table)
        problems = []
        if not isinstance(cfg.salt, str) or not cfg.salt:
            problems.append("salt must be a non-empty string")
        if cfg.reference not in REFERENCES:
            problems.append(f"reference {cfg.reference!r} is not one of {list(REFERENCES)}")
        for key in ("in_scope", "negatives", "min_works", "min_positives"):
            value = getattr(cfg, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                problems.append(f"{key} must be a whole number >= 0")
        ratio = cfg.min_kappa_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 <= ratio <= 2:
            problems.append("min_kappa_ratio must be a number in [0, 2]")
        if problems:
            raise ValueError(f"{where}: [qualification]: " + "; ".join(problems))
        return cfg

    def as_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @property
    def config_hash(self) -> str:
        """16 hex of SHA-256 over the canonical JSON of the configuration."""
        return hashlib.sha256(self.as_json().encode()).hexdigest()[:16]


def load_qualification(path: str | Path | None = None) -> QualificationConfig:
    """The registry's ``[qualification]`` table as a :class:`QualificationConfig` (its
    defaults when the table is absent). Raises ValueError naming the file and the key."""
    path = Path(path) if path else default_registry_path()
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
    return QualificationConfig.from_table(doc.get("qualification"), f"teacher registry {path}")


@dataclass(frozen=True)
class ReferenceWork:
    """One work of the drawn reference set: the frame-like ``row`` a record view is built from, its
    abstract, the reference label (``metaresearch`` 0/1), each frontier arm's label, stratum, pi, weight."""

    row: dict
    abstract: str | None
    reference: int
    arms: dict[str, int | None]
    stratum: str
    pi: float
    weight: float


def _names(value) -> list[str]:
    """frame1k gives one name as a string and several as a list."""
    if not value:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value if v]


def _title(rec: dict) -> str:
    """The title as text ("" when the record has none, or a title that is not a string)."""
    title = rec.get("title")
    return markup_to_text(title) if isinstance(title, str) else ""


def reference_row(rec: dict, ca_funders: set[str]) -> dict:
    """A frame1k work record as the frame-like row :func:`.views.record_view` reads."""
    funders = _names(rec.get("funders"))
    return {
        "id": rec["id"],
        "title_text": _title(rec),
        "publication_year": rec.get("year"),
        "language": rec.get("lang"),
        "type": rec.get("type"),
        "venue_name": (rec.get("venue") or "").strip() or None,
        "topic": rec.get("topic"),
        "field": rec.get("field"),
        "ca_institutions": _names(rec.get("ca_institutions")),
        "other_institutions": [],  # frame1k lists the Canadian affiliations only
        "funder_names": funders,
        "ca_funder_names": [f for f in funders if f.casefold() in ca_funders],
        "in_sampling_frame": True,
        "has_abstract": bool((rec.get("abstract") or "").strip()),
    }


def draw_reference_set(folder: Path | str, cfg: QualificationConfig, ca_funders: set[str]) -> list[ReferenceWork]:
    """The reference works (module docstring), in-scope stratum first, each stratum in salted-hash order.
    ``ca_funders``: the Canadian funder list's names, case-folded. Works without an adjudicated label or
    an empty title are left out (none in the saved files)."""
    ref = frame1k_labels(Path(folder))
    missing = {k: v for k, v in ref.dropped.items() if v}
    if missing:
        raise ValueError(
            f"the frame1k reference set under {folder} is incomplete ({missing}): every saved work needs a label "
            "from each frontier arm (opus_r1, codex_r1, grok_r1 labels_NN.json beside chunks/chunk_NN.json) and a "
            "verdict where they disagree; restore the files listed in its SOURCES.md (METACAN_PILOT_DIR)"
        )
    usable = [
        (wid, rec) for wid, rec in ref.records.items() if ref.labels["adjudicated"].get(wid) is not None and _title(rec)
    ]
    in_scope = [(w, r) for w, r in usable if any(ref.labels[a].get(w) == 1 for a in R1_ARMS)]
    out = [(w, r) for w, r in usable if not any(ref.labels[a].get(w) == 1 for a in R1_ARMS)]
    drawn: list[ReferenceWork] = []
    sizes = ((IN_SCOPE, in_scope, min(cfg.in_scope, len(in_scope))), (OUT, out, min(cfg.negatives, len(out))))
    for stratum, pool, n in sizes:
        pi = n / len(pool) if pool else 0.0
        for wid, rec in sorted(pool, key=lambda x: salted_hash(x[0], cfg.salt))[:n]:
            drawn.append(
                ReferenceWork(
                    reference_row(rec, ca_funders),
                    (rec.get("abstract") or "").strip() or None,
                    int(ref.labels["adjudicated"][wid]),
                    {a: ref.labels[a].get(wid) for a in R1_ARMS},
                    stratum,
                    pi,
                    1.0 / pi,
                )
            )
    return drawn


def reference_sha(works: list[ReferenceWork]) -> str:
    """16 hex of SHA-256 over the drawn reference set (rows shown, reference labels, arms, weights): stored
    with every result, so a result says which reference it was judged on."""
    payload = [[w.row, w.reference, w.arms, w.weight] for w in works]
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def frontier_kappa(works: list[ReferenceWork]) -> float | None:
    """The frontier arms' mean pairwise design-weighted kappa on ``metaresearch`` over ``works``."""
    values = []
    for i, a in enumerate(R1_ARMS):
        for b in R1_ARMS[i + 1 :]:
            pairs = [(w.arms[a], w.arms[b], w.weight) for w in works if w.arms[a] is not None and w.arms[b] is not None]
            k = kappa([p[0] for p in pairs], [p[1] for p in pairs], [p[2] for p in pairs]) if pairs else None
            if k is not None:
                values.append(k)
    return sum(values) / len(values) if values else None


@dataclass(frozen=True)
class QualificationResult:
    status: str
    kappa: float | None
    needed_kappa: float | None
    frontier_kappa: float | None
    reference_works: int
    labelled: int
    failed: int
    reference_positives: int
    teacher_positives: int
    weighted_confusion: dict[str, float]

    @property
    def counts(self) -> bool:
        """True when the teacher's labels may decide (candidate, consensus, classify-and-count)."""
        return self.status == QUALIFIED

    def note(self) -> str:
        """The sentence every surface shows, e.g. "teacher not qualified (kappa 0.05 on 80 reference works;
        needs 0.40)"."""
        k = "n/a" if self.kappa is None else f"{self.kappa:.2f}"
        need = "n/a" if self.needed_kappa is None else f"{self.needed_kappa:.2f}"
        on = f"kappa {k} on {self.labelled} reference works ({self.reference_positives} positive); needs {need}"
        if self.status == QUALIFIED:
            return f"teacher qualified ({on})"
        if self.status == TOO_FEW:
            return f"teacher not qualified: too few cases to judge ({on})"
        return f"teacher not qualified ({on})"


def judge(works: list[ReferenceWork], teacher: dict[str, int | None], cfg: QualificationConfig) -> QualificationResult:
    """The test of the module docstring. ``teacher``: work id -> the teacher's ``metaresearch`` 0/1 for
    every reference work it labelled (None or absent: failed or not labelled)."""
    judged = [w for w in works if teacher.get(w.row["id"]) is not None]
    y_ref = [w.reference for w in judged]
    y_t = [int(teacher[w.row["id"]]) for w in judged]
    weights = [w.weight for w in judged]
    k = kappa(y_t, y_ref, weights) if judged else None
    fk = frontier_kappa(works)
    needed = None if fk is None else cfg.min_kappa_ratio * fk
    confusion = {"tp": 0.0, "fp": 0.0, "fn": 0.0, "tn": 0.0}
    for t, r, wt in zip(y_t, y_ref, weights, strict=True):
        confusion[("t" if t == r else "f") + ("p" if t else "n")] += wt
    positives = sum(y_ref)
    # a frontier kappa <= 0 means the reference itself does not agree: nothing can be judged against it
    if len(judged) < cfg.min_works or positives < cfg.min_positives or k is None or not fk or fk <= 0:
        status = TOO_FEW
    else:
        status = QUALIFIED if k >= needed else NOT_QUALIFIED
    return QualificationResult(
        status,
        k,
        needed,
        fk,
        len(works),
        len(judged),
        len(works) - len(judged),
        positives,
        sum(y_t),
        {key: round(v, 6) for key, v in confusion.items()},
    )


def qualify(
    storage: MetacanStorage,
    spec: TeacherSpec,
    works: list[ReferenceWork],
    cfg: QualificationConfig,
    *,
    run_id: str,
    log,
    base_url: Callable[[], str],
    transport: httpx.AsyncBaseTransport | None = None,
) -> QualificationResult:
    """Label the reference works with ``spec`` through the ordinary labelling path (stored labels are
    reused: a re-run buys nothing), judge them (:func:`judge`) and append the result to
    ``teacher_qualification``. Raises what :func:`.labelling.label_works` raises."""
    texts = {w.row["id"]: w.abstract for w in works}
    stats = label_works(
        storage,
        spec,
        [w.row for w in works],
        run_id=run_id,
        log=log,
        base_url=base_url,
        abstracts=lambda rows: {r["id"]: texts[r["id"]] for r in rows},
        transport=transport,
    )
    labels = current_labels(storage, spec, stats.view_hashes).to_pylist()
    teacher = {
        r["work_id"]: int("metaresearch" in (r["categories"] or [])) for r in labels if r["status"] == "labelled"
    }
    result = judge(works, teacher, cfg)
    store_result(storage, spec, cfg, result, run_id, reference_sha(works))
    log.info(f"teacher {spec.name} ({spec.view_name}, prompt {spec.prompt_version}): {result.note()}")
    return result


def store_result(
    storage: MetacanStorage,
    spec: TeacherSpec,
    cfg: QualificationConfig,
    result: QualificationResult,
    run_id: str,
    ref_sha: str,
) -> None:
    """Append ``result`` for ``spec``'s configuration to ``teacher_qualification`` (``ref_sha``:
    :func:`reference_sha` of the works it was judged on)."""
    prompt = load_prompt(spec.prompt_version)
    row = {
        "teacher": spec.name,
        "model": spec.model,
        "prompt_version": prompt.version,
        "prompt_sha": prompt.sha,
        "record_view": spec.view_name,
        "reference": cfg.reference,
        "config_hash": cfg.config_hash,
        "config": cfg.as_json(),
        "reference_sha": ref_sha,
        **{k: v for k, v in asdict(result).items() if k != "weighted_confusion"},
        "weighted_confusion": json.dumps(result.weighted_confusion, sort_keys=True),
        "note": result.note(),
        "run_id": run_id,
        "computed_at": now_utc(),
    }
    batch = pa.Table.from_pylist([row], schema=QUALIFICATION_SCHEMA)  # noqa: F841
    with storage.connect() as con:
        con.execute("INSERT INTO teacher_qualification SELECT * FROM batch")


def current_qualification(storage: MetacanStorage, spec: TeacherSpec, cfg: QualificationConfig) -> dict | None:
    """The newest ``teacher_qualification`` row of ``spec``'s configuration under ``cfg``, or None when the
    teacher has not been tested (then its labels decide nothing either)."""
    prompt = load_prompt(spec.prompt_version)
    with storage.connect() as con:
        cur = con.execute(
            """SELECT * FROM teacher_qualification WHERE teacher = ? AND model = ? AND prompt_version = ?
               AND prompt_sha = ? AND record_view = ? AND config_hash = ? ORDER BY computed_at DESC LIMIT 1""",
            [spec.name, spec.model, prompt.version, prompt.sha, spec.view_name, cfg.config_hash],
        )
        row = cur.fetchone()
        return None if row is None else dict(zip([d[0] for d in cur.description], row, strict=True))


def counts(row: dict | None) -> bool:
    """True when a ``teacher_qualification`` row lets the teacher's labels decide."""
    return row is not None and row["status"] == QUALIFIED


def status_note(row: dict | None) -> str:
    """The sentence shown beside the teacher's direct labels."""
    return "teacher not qualified: not tested yet" if row is None else row["note"]


def qualification_notes(storage: MetacanStorage, registry: dict[str, TeacherSpec], cfg: QualificationConfig) -> dict:
    """``{teacher: the sentence shown beside its direct labels}`` for every registry teacher."""
    return {name: status_note(current_qualification(storage, spec, cfg)) for name, spec in registry.items()}


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def qualification_metadata(
    results: dict[str, QualificationResult], works: list[ReferenceWork], cfg: QualificationConfig
) -> dict:
    """The metadata of ``teacher_qualification``: a Markdown table of every teacher's result (``results``, by
    teacher name), the reference set's size, positives and frontier pairwise kappa, the configuration and its
    hash, and each teacher's status and note."""
    table = (
        "| teacher | status | kappa | needed | labelled | reference positives |\n|---|---|---|---|---|---|\n"
        + "".join(
            f"| {name} | {r.status} | {_num(r.kappa)} | {_num(r.needed_kappa)} | {r.labelled} of {r.reference_works} | "
            f"{r.reference_positives} |\n"
            for name, r in results.items()
        )
    )
    return {
        "qualification": dg.MetadataValue.md(table),
        "reference_works": len(works),
        "reference_positives": sum(w.reference for w in works),
        "frontier_pairwise_kappa": dg.MetadataValue.float(round(frontier_kappa(works) or 0.0, 4)),
        "config_hash": cfg.config_hash,
        "config": dg.MetadataValue.json(json.loads(cfg.as_json())),
        **{f"{name}_status": r.status for name, r in results.items()},
        **{f"{name}_note": r.note() for name, r in results.items()},
    }


#: What qualifies a teacher that has not: the step an operator takes (shown beside every "not qualified").
TO_QUALIFY = (
    "qualify the teacher: materialize teacher_qualification with a configuration (model, prompt, view) that passes "
    "the test; its labels decide nothing until then"
)


def qualification_standing(storage: MetacanStorage, spec: TeacherSpec, cfg: QualificationConfig) -> dict:
    """The standing of ``spec``'s current configuration, from its newest ``teacher_qualification`` row under
    ``cfg``: ``qualified`` (bool), ``status`` (a :data:`STATUSES` value, or ``not_tested`` without a row),
    ``kappa`` and ``needed_kappa`` (None when not computed), ``tested_at`` (ISO text, None when not tested) and
    ``note`` (:func:`status_note`)."""
    row = current_qualification(storage, spec, cfg)
    return {
        "qualified": counts(row),
        "status": "not_tested" if row is None else row["status"],
        "kappa": None if row is None or row["kappa"] is None else round(row["kappa"], 4),
        "needed_kappa": None if row is None or row["needed_kappa"] is None else round(row["needed_kappa"], 4),
        "tested_at": None if row is None else row["computed_at"].isoformat(),
        "note": status_note(row),
    }


def qualification_entry(storage: MetacanStorage, spec: TeacherSpec) -> dict:
    """The ``teacher_qualification`` metadata entry of ``direct_labels_<name>``: "qualified" or "not qualified"
    with kappa, the kappa needed and when it was tested (:func:`qualification_standing` under the registry's
    ``[qualification]``), and, when not qualified, what would change it (:data:`TO_QUALIFY`)."""
    s = qualification_standing(storage, spec, load_qualification())
    word = "qualified" if s["qualified"] else "not qualified"
    when = f"tested {s['tested_at']}" if s["tested_at"] else "never tested"
    out = {
        "teacher_qualification": f"{word}: {s['note']}; {when}",
        "teacher_qualification_status": s["status"],
        "teacher_qualification_kappa": dg.MetadataValue.float(s["kappa"]) if s["kappa"] is not None else "n/a",
    }
    if not s["qualified"]:
        out["teacher_qualification_what_changes_it"] = TO_QUALIFY
    return out
