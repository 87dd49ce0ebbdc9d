"""Per-work JSON records with the field names of ../shared/seeds/004_*.txt (SPEC section 9).

A record is assembled from the frame row, the direct labels of every teacher, the hybrid prediction
and the machine scores. :func:`ship_violations` is the SPEC section 8 invariant that the blocking
asset check enforces on every record before any page is rendered.

:class:`RecordBatches` turns the rows of :func:`.record_inputs.record_inputs` into ``work_records`` batches (JSON
text and its hash); :mod:`.record_build` builds the table range by range in worker processes and
:mod:`.record_check` checks it.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import fastjsonschema
import pyarrow as pa

from ..openalex.ids import is_work_id
from ..release.layer import ROLLING, UNRELEASED, LayerRule
from ..release.release_layers import FIELD as RELEASE_LAYER
from ..release.release_layers import release_layer
from ..tables.publish import RECORDS_SCHEMA
from ..vocab import LABEL_FIELDS, NO_SCORE_SUFFIX, PREDICTION_STATUS, SCORE_ONLY_REFERENCE
from .cascade_record import FIELD as CASCADE
from .cascade_record import cascade_entries, withhold_cascade
from .human_layer import human_code_entry, validation_entries
from .lineage import lineage_record
from .medline_layer import apply_medline
from .retraction_record import retraction_watch_entry

#: JSON Schema (draft-07) of a published record: the seed 004 fields, route evidence, lineage.
SCHEMA_PATH = Path(__file__).with_name("work_record.schema.json")

DIRECT_LABEL_STATUS = "direct_label_unvalidated"


def _join(values: list[str] | None) -> str:
    return "; ".join(v for v in (values or []) if v)


@lru_cache(maxsize=1)
def record_validator():
    """The compiled validator of ``work_record.schema.json`` (fastjsonschema: about 14,000 records/s here).

    Call it with a record: returns the record, or raises ``fastjsonschema.JsonSchemaValueException``
    whose ``message`` names the first field that breaks the schema (e.g. ``data.routes.ca_aff must be boolean``).
    """
    return fastjsonschema.compile(json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))


def schema_violation(record: dict) -> str | None:
    """The first way ``record`` breaks the JSON Schema, as ``"<id>: schema: <message>"``, or None."""
    try:
        record_validator()(record)
    except fastjsonschema.JsonSchemaValueException as exc:
        return f"{record.get('id') if isinstance(record, dict) else '?'}: schema: {exc.message}"
    return None


def canadian_authors(rows: list[dict] | None) -> list[dict]:
    """The record's ``ca_authors``: the frame's Canadian authorships (``frame.ca_authors``; none for a frame built
    before it had them), each ``{"name", "orcid", "institutions": [{"name", "ror"}]}``."""
    return [
        {
            "name": a["name"],
            "orcid": a.get("orcid"),
            "institutions": [{"name": i["name"], "ror": i.get("ror")} for i in a.get("institutions") or []],
        }
        for a in rows or []
    ]


def direct_label_entry(label: dict, qualification: dict[str, str] | None = None) -> dict:
    """One entry of ``direct_labels``: the label with its source (teacher, model, prompt) and status, and
    ``qualification``: whether its teacher passed the qualification test, the sentence every surface shows
    (``qualification`` maps a teacher to it; a teacher not in the map gets none: an imported screener)."""
    entry = {
        "teacher": label["teacher"],
        "model": label["model"],
        "prompt_version": label["prompt_version"],
        "record_view": label["record_view"],
        "status": label["status"],
        "label_status": DIRECT_LABEL_STATUS if label["status"] == "labelled" else None,
        "source": label.get("source"),
        "error": label.get("error"),
        "call_id": label.get("call_id"),
        "labelled_at": str(label["created_at"]) if label.get("created_at") is not None else None,
        "qualification": (qualification or {}).get(label["teacher"]),
    }
    for k in LABEL_FIELDS:
        entry[k] = label.get(k)
    if entry["categories"] is not None:
        entry["categories"] = list(entry["categories"])
    return entry


def build_record(
    work: dict,
    labels: list[dict],
    prediction: dict | None,
    machine: dict | None,
    lineage: dict,
    qualification: dict[str, str] | None = None,
    human_code: dict | None = None,
    human_validation: list[dict] | None = None,
    reference: dict | None = None,
    retraction_watch: dict | None = None,
    cascade: list[dict] | None = None,
) -> dict:
    """The published record of one frame work (seed 004 fields, plus route evidence and lineage), and the human
    layers (:mod:`.human_layer`) only where they exist: ``human_code`` (a coded work's final human code) and
    ``human_validation`` (the passing heads of its classifier version); ``release_layer``, the protocol's layer
    (:func:`metacan_pipeline.release.release_layers.release_layer`); ``retraction_watch``: the work's
    :func:`.retraction_record.retraction_watch_entry` (None: not checked); ``cascade``: the work's rows of the cascade's
    decisions with their head's thresholds (:func:`.cascade_record.cascade_entries`; the field only where there is one)."""
    pred = None
    if prediction is not None:
        pred = {k: v for k, v in prediction.items() if k not in ("id", "gemma_label_status")}
    ms = None
    if machine is not None:
        ms = {k: v for k, v in machine.items() if k != "id"}
    record = {
        "id": work["id"],
        "doi": work["doi"] or "",
        "title": work["title_text"],
        "year": work["publication_year"],
        "lang": work["language"] or "",
        "type": work["type"] or "",
        "venue": work["venue_name"] or "",
        "topic": work["topic"] or "",
        "field": work["field"] or "",
        "cited_by": work["cited_by_count"] or 0,
        "is_retracted": bool(work["is_retracted"]),
        "has_abstract": bool(work["has_abstract"]),
        "ca_institutions": _join(work["ca_institutions"]),
        "ca_authors": canadian_authors(work.get("ca_authors")),
        "funders": _join(work["funder_names"]),
        "keywords": _join(work["keywords"]),
        "routes": {
            "ca_aff": work["ca_aff"],
            "ca_fund": work["ca_fund"],
            "ca_venue": work["ca_venue"],
            "about_ca": work["about_ca"],
            "invisible_to_affiliation_only": work["invisible_to_affiliation_only"],
        },
        "route_evidence": {
            "ca_aff": list(work["ca_aff_evidence"] or []),
            "ca_fund": list(work["ca_fund_evidence"] or []),
            "ca_venue": list(work["ca_venue_evidence"] or []),
            "about_ca": list(work["about_ca_evidence"] or []),
        },
        "retraction": {"is_retracted": True, "source": "OpenAlex is_retracted"} if work["is_retracted"] else None,
        "retraction_watch": retraction_watch or retraction_watch_entry(None, None, bool(work["is_retracted"])),
        "screen": None,
        "sampling_frame": {
            "in_sampling_frame": work["in_sampling_frame"],
            "exclusion": work["sampling_frame_exclusion"],
        },
        "direct_labels": [
            direct_label_entry(label, qualification) for label in sorted(labels, key=lambda label: label["teacher"])
        ],
        "prediction": pred,
        "machine_scores": ms,
        "lineage": lineage,
        "layer": UNRELEASED,  # set by release.layer.LayerRule.apply (record_row)
        RELEASE_LAYER: None,  # set below, once the human layers are in
    }
    if human_code is not None:
        record["human_code"] = human_code
    if human_validation:
        record["human_validation"] = human_validation
    scores = reference_score_entries(reference)
    if scores:
        record["reference_scores"] = scores
    decisions = cascade_entries(cascade)
    if decisions:
        record[CASCADE] = decisions
    record[RELEASE_LAYER] = release_layer(record)
    return record


def reference_score_entries(reference: dict | None) -> list[dict]:
    """The record's ``reference_scores``: per reference-set head (columns ``<set>__<target>`` of ``reference``, the
    work's row of the reference-set scores) its set, head, score and status :data:`SCORE_ONLY_REFERENCE`, in column
    order; a head that gives no score (its reason in column ``<set>__<target>:no_score``) has score null and
    ``no_score``, the reason; empty without a row."""
    if reference is None:
        return []
    out = []
    for col, value in reference.items():
        if col == "id" or col.endswith(NO_SCORE_SUFFIX):
            continue
        reason = reference.get(col + NO_SCORE_SUFFIX)
        if value is None and reason is None:
            continue
        entry = {"set": col.split("__")[0], "head": col.split("__")[1], "score": value, "status": SCORE_ONLY_REFERENCE}
        if reason is not None:
            entry.update(score=None, no_score=reason)
        out.append(entry)
    return out


def ship_violations(record: dict) -> list[str]:
    """Every way ``record`` breaks SPEC section 8 (empty list = may ship).

    - a ``score_only:*`` machine-score row that carries any category label;
    - a direct label with categories but no teacher (source) or no status;
    - predicted categories without ``prediction_status`` or ``model_version``.
    """
    out: list[str] = []
    wid = record.get("id")
    ms = record.get("machine_scores") or {}
    if str(ms.get("validation_status") or "").startswith("score_only"):
        for key, value in ms.items():
            if "categor" in key and value not in (None, [], ""):
                out.append(f"{wid}: score_only machine scores carry a category label ({key}={value!r})")
    for lab in record.get("direct_labels") or []:
        if lab.get("categories") and (not lab.get("teacher") or not lab.get("status") or not lab.get("label_status")):
            out.append(f"{wid}: direct label categories {lab.get('categories')!r} without source and status")
    pred = record.get("prediction") or {}
    if (pred.get("candidate_categories") or pred.get("consensus_categories")) and (
        pred.get("prediction_status") != PREDICTION_STATUS or not pred.get("model_version")
    ):
        out.append(f"{wid}: predicted categories without prediction_status {PREDICTION_STATUS!r} and model_version")
    return out


def classification_card(record: dict) -> dict[str, Any]:
    """What the Classification card shows, by precedence: direct labels, then consensus, then candidate.

    Returns ``{"kind": "direct"|"consensus"|"candidate"|"no_category"|"none", ...}``: ``labels`` for
    direct, ``categories`` and ``model_version`` for the prediction kinds. ``no_category``: the
    classifier scored the work and called none of the categories on either side (a machine output,
    unvalidated, not a judgement that it is not meta-research).
    An empty category list from a labelled direct label means "not meta-research" (a judgement);
    no label and no prediction at all means "not classified yet" (absence is not a negative).
    """
    labelled = [
        label for label in record.get("direct_labels") or [] if label["status"] == "labelled"
    ]  # teacher calls and rule labels
    if labelled:
        return {"kind": "direct", "labels": labelled}
    pred = record.get("prediction") or {}
    if pred.get("consensus_categories"):
        return {
            "kind": "consensus",
            "categories": pred["consensus_categories"],
            "model_version": pred.get("model_version"),
        }
    if pred.get("candidate_categories"):
        return {
            "kind": "candidate",
            "categories": pred["candidate_categories"],
            "model_version": pred.get("model_version"),
        }
    if record.get("prediction"):
        return {"kind": "no_category", "categories": [], "model_version": pred.get("model_version")}
    return {"kind": "none"}


class RecordInputError(ValueError):
    """A frame work that may not become a record: an id that is not ``^W\\d+$``, or a work seen twice."""


def record_row(
    row: dict,
    qualification: dict[str, str] | None = None,
    passing: dict[str, list[dict]] | None = None,
    layer: LayerRule | None = None,
    medline: dict[tuple[str, str], dict] | None = None,
) -> dict:
    """The ``work_records`` row of one :func:`.record_inputs.record_inputs` row: ``{"id", "record_json", "record_hash"}``,
    the hash being SHA-256 (16 hex) of the JSON text. ``qualification``: teacher -> qualification sentence;
    ``layer``: the release layer rule (:mod:`metacan_pipeline.release.layer`; None: ``unreleased``); ``medline``: the
    MEDLINE gate's verdicts (:func:`.medline_layer.read_medline_verdicts`; None: none)."""
    record = build_record(
        row["work"],
        row["labels"],
        row["pred"],
        row["machine"],
        lineage_record(row["lineage"]),
        qualification,
        human_code_entry(row.get("human")),
        validation_entries(row["pred"], passing or {}),
        row.get("reference"),
        retraction_watch_entry(row.get("rw_notices"), row.get("rw_version"), bool(row["work"]["is_retracted"])),
        row.get("cascade"),
    )
    apply_medline(record, medline)
    if layer is not None:
        layer.apply(record, bool(row.get("in_release")))
        if record["layer"] == ROLLING:
            withhold_cascade(record, lambda version, head: (version, head) in layer.passed)
        record[RELEASE_LAYER] = release_layer(record)  # the record as published: withheld categories claim nothing
    text = json.dumps(record, ensure_ascii=False, default=str)
    return {"id": record["id"], "record_json": text, "record_hash": hashlib.sha256(text.encode()).hexdigest()[:16]}


class RecordBatches:
    """Turns lists of :func:`.record_inputs.record_inputs` rows into ``work_records`` tables, checking the ids on the way.

    ``previous``: ``{id: record_hash}`` of the last materialization (a test's few; the asset counts changes in
    DuckDB instead, :func:`.record_build.count_changed`). After the batches are consumed, ``changed`` counts the records new or
    changed since then and ``preview`` holds the first ten rows.
    Raises :class:`RecordInputError` naming the id when a work id is not ``^W\\d+$`` or a work comes twice
    (rows come ordered by id, so a repeat is a duplicate of the frame or of a table joined to it).
    """

    def __init__(
        self,
        previous: dict[str, str],
        qualification: dict[str, str] | None = None,
        passing: dict[str, list[dict]] | None = None,
        layer: LayerRule | None = None,
        medline: dict[tuple[str, str], dict] | None = None,
    ) -> None:
        self.previous = previous
        self.medline = medline
        self.qualification = qualification
        self.passing = passing
        self.layer = layer
        self.changed = 0
        self.human_coded = 0  # records with a human-coded layer (SPEC section 8: its own count)
        self.human_validated = 0  # records carrying a human_validated:<protocol> status
        self.preview: list[dict] = []
        self._last: str | None = None

    def check_id(self, wid: str) -> None:
        """Raise :class:`RecordInputError` when ``wid`` is not a work id or repeats the previous row's."""
        if not is_work_id(wid):
            raise RecordInputError(
                f"the frame holds the work id {wid!r}, which is not ^W\\d+$: no record is "
                f"written; rebuild the frame (its check frame_ids_unique and the reader refuse such ids)"
            )
        if wid == self._last:
            raise RecordInputError(
                f"work {wid} appears twice among the records' inputs (frame, predictions, "
                f"machine_scores or work_lineage): no record is written; re-materialize the frame "
                f"and the scoring assets so that each holds one row per work"
            )
        self._last = wid

    def table(self, rows: list[dict]) -> pa.Table:
        """The ``work_records`` table (``RECORDS_SCHEMA``) of one list of input rows."""
        out = []
        for row in rows:
            self.check_id(row["work"]["id"])
            out.append(record_row(row, self.qualification, self.passing, self.layer, self.medline))
            self.human_coded += row.get("human") is not None
            self.human_validated += bool(self.passing and (row["pred"] or {}).get("model_version") in self.passing)
            self.changed += self.previous.get(out[-1]["id"]) != out[-1]["record_hash"]
        self.preview.extend(out[: max(0, 10 - len(self.preview))])
        return pa.Table.from_pylist(out, schema=RECORDS_SCHEMA)
