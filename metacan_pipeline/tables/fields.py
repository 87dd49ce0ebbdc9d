"""The field dictionary: every column name of the catalog declared once, with its Arrow type and a one-line
description for users.

A table lists its column names (:func:`columns`); its Arrow schema is built from this dictionary, and each
column's description travels in the Arrow field's metadata (key ``description``), so the Dagster UI's column
schema (:func:`metacan_pipeline.meta.column_schema`) and every Parquet file of the warehouse describe their
columns. A column whose type or meaning in one table differs from the dictionary's is declared there with
:func:`column`, an explicit per-table override.

Imports pyarrow, :mod:`metacan_pipeline.vocab` and the metadata key of :mod:`metacan_pipeline.meta` only.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from ..meta import DESCRIPTION
from ..vocab import ABOUT_CA_TARGETS, CATEGORICAL_TARGETS


@dataclass(frozen=True)
class Field:
    """One column of the dictionary: its Arrow type and what a user reads about it."""

    type: pa.DataType
    description: str


_S = pa.string()
_I32 = pa.int32()
_I64 = pa.int64()
_F64 = pa.float64()
_B = pa.bool_()
_TS = pa.timestamp("us")
_LS = pa.list_(pa.string())
_LF = pa.list_(pa.float64())

#: The teacher suffixes of the published student columns (``score_codex``, ``category_scores_gemma``, ...), in
#: column order: the default names of the sample and the census teacher. They stay when the registry's
#: ``[roles]`` name other teachers (:mod:`metacan_pipeline.student.roles`): the columns are published API.
PUBLISHED_TEACHERS = ("codex", "gemma")

INSTITUTION_TYPE = pa.struct([("id", _S), ("name", _S), ("country_code", _S), ("ror", _S)])
#: One authorship as listed (order kept): the author's name and ORCID as OpenAlex gives them, the authorship's
#: countries (upper case), the keys of its institutions in ``institutions`` (short id, or ``unresolved:<name>``),
#: the author's OpenAlex short id (null when the record has none or one that is not an author id) and the record's
#: own ``author.id`` text when it is not a valid author id (null otherwise), so a bad id is said, never lost.
AUTHOR_TYPE = pa.struct(
    [
        ("name", _S),
        ("orcid", _S),
        ("countries", _LS),
        ("institution_keys", _LS),
        ("author_id", _S),
        ("bad_author_id", _S),
    ]
)
#: One authorship of a frame work (order kept, ``position`` 1-based): the author's OpenAlex id (null: missing or
#: invalid, see ``author_id_status``), ORCID and name as OpenAlex gives them, and every institution of the authorship.
AUTHORSHIP_TYPE = pa.struct(
    [
        ("position", _I32),
        ("author_id", _S),
        ("author_id_status", _S),
        ("orcid", _S),
        ("name", _S),
        ("is_canadian", _B),
        ("institutions", pa.list_(INSTITUTION_TYPE)),
    ]
)
FUNDER_TYPE = pa.struct([("id", _S), ("name", _S), ("via", _S)])
LEXICON_HIT_TYPE = pa.struct([("term", _S), ("tier", _S), ("field", _S)])
CA_AUTHOR_TYPE = pa.struct(
    [("name", _S), ("orcid", _S), ("institutions", pa.list_(pa.struct([("name", _S), ("ror", _S)])))]
)
TEACHER_CALL_TYPE = pa.struct(
    [
        ("teacher", _S),
        ("model", _S),
        ("prompt_version", _S),
        ("prompt_sha", _S),
        ("record_view", _S),
        ("label_status", _S),
        ("source", _S),
        ("call_id", _S),
        ("request_hash", _S),
        ("called_at", _S),
        ("run_id", _S),
        ("archive", _S),
    ]
)

FIELDS: dict[str, Field] = {
    # ---- identity and provenance -------------------------------------------------------------------------------
    "id": Field(_S, "OpenAlex short work id (W123...)"),
    "work_id": Field(_S, "OpenAlex short work id (W123...)"),
    "work_key": Field(_I64, "the digits of the work's OpenAlex id as an integer (the full-text index's rowid too)"),
    "other_key": Field(_I64, "the work_key of another OpenAlex work that is the same work"),
    "run_id": Field(_S, "Dagster run id of the run that wrote the row"),
    "source_file": Field(_S, "the input file the record was read from, relative to its input folder"),
    "source_locator": Field(_S, "where the record is in its input file (line number or byte offset)"),
    "partition_key": Field(_S, "the openalex_partitions partition (one input file) the row belongs to"),
    "arrived_in": Field(
        _S,
        "the frame partition a rolling-layer work's newest version was read from: an API refresh window "
        "(window=<from>_<to>, window=published-<from>_<to>), a snapshot folder (updated_date=<date>) or files",
    ),
    "created_at": Field(_TS, "when the row was written (UTC)"),
    "computed_at": Field(_TS, "when the row was computed (UTC)"),
    "note": Field(_S, "free-text remark on the row (null: none)"),
    "norm": Field(_S, "a text value folded as a text filter compares it: lower(strip_accents(value))"),
    "input": Field(_S, "an input table of the stage (an asset it reads)"),
    "fingerprint": Field(
        _S, "sum of DuckDB hash() over the rows, run bookkeeping left out: equal when the content is (same DuckDB)"
    ),
    "reason": Field(_S, "why: free text"),
    "error": Field(_S, "the error message of a failed attempt (null: no error)"),
    "sha256": Field(_S, "SHA-256 (hex) of the file"),
    "file": Field(_S, "path of the file (relative: under the data folder)"),
    "position": Field(_I64, "the row's position in its list, from 0"),
    "kind": Field(_S, "the kind of thing the row describes"),
    "status": Field(_S, "outcome status of the row"),
    "source": Field(_S, "where the row came from"),
    # ---- the input inventory and frame parts -------------------------------------------------------------------
    "present": Field(_B, "the input file is present locally or in object storage"),
    "bytes": Field(_I64, "size of the input file in bytes"),
    "mtime_ns": Field(_I64, "modification time of the input file, in nanoseconds since the epoch"),
    "etag": Field(
        _S, "the version (ETag) of a file read from object storage, in place of mtime_ns (null: a local file)"
    ),
    "manifest_record_count": Field(
        _I64, "the record count the snapshot manifest lists for the file (null: not listed)"
    ),
    "manifest_bytes": Field(
        _I64,
        "the content length the snapshot manifest lists (null: not listed); a present file of another size is cut or replaced",
    ),
    "manifest_status": Field(_S, "listed | not_in_manifest | no_manifest | missing_locally | not_snapshot"),
    "manifest_file": Field(_S, "the snapshot manifest the file was looked up in"),
    "ordinal": Field(_I64, "the record's order in its input file, from 0"),
    "locator": Field(_S, "where the unreadable record is in its input file"),
    "line": Field(_I64, "line number of the unreadable record in its input file"),
    "excerpt": Field(_S, "the first characters of the unreadable record"),
    "build_key": Field(_S, "hash of what the part was built from (file, size, mtime, entity lists, lexicon, code)"),
    "records_read": Field(_I64, "records of any entity read from the file, unreadable lines included"),
    "work_records": Field(_I64, "work records read from the file"),
    "routed": Field(_I64, "work records of the file with at least one route"),
    "quarantined": Field(_I64, "records of the file refused as unreadable"),
    "count_check": Field(_S, "the records read against the manifest: ok | mismatch | not_in_manifest | no_manifest"),
    "read_path": Field(_S, "how the file was read (failed: it could not be read, and the part is not built)"),
    "fallback_reason": Field(_S, "why the file was read another way than the fastest one, or could not be read"),
    "started_at": Field(_S, "when the part's build started (ISO 8601, UTC)"),
    "finished_at": Field(_S, "when the part's build finished (ISO 8601, UTC)"),
    "seconds": Field(_F64, "wall-clock seconds the part took to build"),
    "admitted": Field(_I64, "works of the part admitted to the frame (newest version of a work only)"),
    # ---- Canadian entity lists ---------------------------------------------------------------------------------
    "display_name": Field(_S, "the entity's name as OpenAlex gives it"),
    "country_code": Field(_S, "ISO 3166-1 alpha-2 country code"),
    "list_version": Field(_S, "version of the pinned entity list the row belongs to"),
    # ---- bibliographic columns ---------------------------------------------------------------------------------
    "doi": Field(_S, "the work's DOI (null: none)"),
    "pmid": Field(_S, "the work's PubMed id, digits only (OpenAlex ids.pmid; null: none)"),
    "title": Field(_S, "the work's title as OpenAlex has it, inline markup included"),
    "title_text": Field(_S, "the work's title with its markup reduced to text"),
    "publication_year": Field(_I32, "year of publication"),
    "publication_date": Field(_S, "date of publication (ISO 8601)"),
    "updated_date": Field(_S, "when OpenAlex last updated the record (ISO 8601)"),
    "language": Field(_S, "the work's language (ISO 639-1 code)"),
    "type": Field(_S, "OpenAlex work type (a Crossref-only type is mapped to the nearest OpenAlex one)"),
    "type_crossref": Field(_S, "Crossref's type of the work, when the record gives it"),
    "is_paratext": Field(_B, "OpenAlex marks the work as paratext (front matter, indexes, ...)"),
    "is_retracted": Field(_B, "the work is retracted"),
    "cited_by_count": Field(_I64, "citations OpenAlex counts for the work"),
    "venue_id": Field(_S, "OpenAlex short id of the work's primary source (S123...)"),
    "venue_name": Field(_S, "name of the work's primary source (journal, repository, conference)"),
    "topic": Field(_S, "the work's primary OpenAlex topic"),
    "field": Field(_S, "the field of the work's primary OpenAlex topic"),
    "institutions": Field(pa.list_(INSTITUTION_TYPE), "every institution of the work's authorships, once"),
    "author_countries": Field(_LS, "the countries of the work's authorships (upper case)"),
    "authors": Field(pa.list_(AUTHOR_TYPE), "the authorships in the record's order"),
    "funders": Field(pa.list_(FUNDER_TYPE), "the work's funders, and the record field that named each (via)"),
    "keywords": Field(_LS, "the work's OpenAlex keyword names"),
    "is_authors_truncated": Field(_B, "OpenAlex cut the work's author list"),
    "n_authorships": Field(_I32, "authorships the record lists"),
    "has_abstract": Field(_B, "OpenAlex has an abstract for the work (its text is never stored)"),
    "lexicon_hits": Field(pa.list_(LEXICON_HIT_TYPE), "the about_ca lexicon terms found, with their tier and field"),
    # ---- routes (SPEC section 2) -------------------------------------------------------------------------------
    "ca_aff": Field(_B, "route ca_aff: an authorship is affiliated with Canada"),
    "ca_fund": Field(_B, "route ca_fund: a funder is on the pinned list of Canadian funders"),
    "ca_venue": Field(_B, "route ca_venue: the primary source is on the pinned list of Canadian sources"),
    "about_ca": Field(_B, "route about_ca: the Canadian lexicon fires on the title, abstract words or keywords"),
    "invisible_to_affiliation_only": Field(_B, "in the frame and not ca_aff: a search by affiliation misses it"),
    "ca_aff_evidence": Field(_LS, "what fired the ca_aff route (institutions, countries)"),
    "ca_fund_evidence": Field(_LS, "what fired the ca_fund route (Canadian funder ids)"),
    "ca_venue_evidence": Field(_LS, "what fired the ca_venue route (Canadian source id)"),
    "about_ca_evidence": Field(_LS, "what fired the about_ca route (lexicon terms)"),
    "route_key": Field(_S, "the work's routes joined in display order (its route group)"),
    "in_sampling_frame": Field(_B, "the work is in the sampling frame (not paratext, title over 10 characters)"),
    "sampling_frame_exclusion": Field(_S, "why the work is outside the sampling frame (null: it is in)"),
    "ca_institutions": Field(_LS, "names of the work's Canadian institutions"),
    "funder_names": Field(_LS, "names of the work's funders"),
    "other_institutions": Field(_LS, "names of the work's institutions outside Canada"),
    "ca_funder_names": Field(_LS, "the funders of funder_names on the Canadian funder list"),
    "ca_authors": Field(
        pa.list_(CA_AUTHOR_TYPE),
        "the Canadian authorships in the record's order: name, ORCID, Canadian institutions with their ROR ids",
    ),
    "authorships": Field(
        pa.list_(AUTHORSHIP_TYPE),
        "every authorship in the record's order: position, OpenAlex author id and its status (ok | missing | "
        "invalid), ORCID, name as OpenAlex gives it, whether it is Canadian, and its institutions",
    ),
    # ---- authors and institutions of the frame -----------------------------------------------------------------
    "author_id": Field(_S, "OpenAlex short author id (A123...; null: the authorship has no valid author id)"),
    "author_id_status": Field(
        _S, "ok | missing (the record names no author id) | invalid (the record's author id is not one)"
    ),
    "author_position": Field(_I32, "the authorship's position in the work's author list (1-based, record order)"),
    "author_name": Field(_S, "the author's name exactly as OpenAlex gives it on the work (never inferred)"),
    "orcid": Field(_S, "the author's ORCID as OpenAlex gives it (a URL; null: none)"),
    "is_canadian": Field(_B, "the authorship has a Canadian institution or CA among its countries (SPEC section 2)"),
    "institution_id": Field(_S, "OpenAlex short institution id (I123...)"),
    "institution_ids": Field(_LS, "OpenAlex short ids of the authorship's institutions, in the record's order"),
    "ror": Field(_S, "the institution's ROR id as OpenAlex gives it (a URL; null: none)"),
    "works_in_frame": Field(_I64, "frame works of the author or institution"),
    "first_year": Field(_I32, "earliest publication year of those works"),
    "last_year": Field(_I32, "latest publication year of those works"),
    "entity_list_versions": Field(_S, "versions of the pinned entity lists the row was built with (JSON)"),
    "lexicon_version": Field(_S, "version of the about_ca lexicon the row was built with"),
    "frame_build_id": Field(_S, "id of the frame build (hash of the parts it merged)"),
    "built_at": Field(_TS, "when the build was made (UTC)"),
    "works": Field(_I64, "works in the build"),
    "parts": Field(_I64, "frame parts the build merged"),
    # ---- sample design (SPEC section 5) ------------------------------------------------------------------------
    "stratum": Field(_S, "the work's stratum of the sample design"),
    "stratum_size": Field(_I64, "N_h: works of the sampling frame in the stratum"),
    "stratum_sample_size": Field(_I64, "n_h: works drawn from the stratum"),
    "hash_rank": Field(_I64, "the work's rank in its stratum by salted hash of its id, from 1"),
    "selection_probability": Field(_F64, "pi = n_h / N_h, the work's probability of selection"),
    "design_weight": Field(_F64, "1 / pi, the work's design weight (null: not in the sample)"),
    "in_sample": Field(_B, "the work was drawn"),
    "hash": Field(_S, "the salted hash of the work's id that orders its stratum"),
    "big_n": Field(_I64, "N_h: works of the stratum"),
    "pos": Field(_I64, "the stratum's position in the report order"),
    "pi": Field(_F64, "n_h / N_h, the stratum's selection probability"),
    "weight": Field(_F64, "N_h / n_h, the stratum's design weight (null: excluded)"),
    "sel_prob": Field(_F64, "the work's selection probability in the imported source's design"),
    # ---- teacher calls and direct labels (SPEC sections 3-4) ---------------------------------------------------
    "call_id": Field(_S, "id of the HTTP call to a teacher"),
    "teacher": Field(_S, "name of the teacher (a labeller: endpoint, model, prompt version, record view)"),
    "model": Field(_S, "the teacher's model name"),
    "prompt_version": Field(_S, "version of the prompt sent (teachers/prompts/<version>.md)"),
    "prompt_sha": Field(_S, "first 16 hex digits of the SHA-256 of the prompt file"),
    "record_view": Field(_S, "the record view the teacher was shown (title_only, title_abstract) and its version"),
    "work_ids": Field(_LS, "ids of the works asked about in the call"),
    "n_works": Field(_I64, "works in the release"),
    "request_hash": Field(_S, "SHA-256 of the request body"),
    "http_status": Field(_I32, "HTTP status of the reply (null: no reply)"),
    "latency_s": Field(_F64, "seconds from request to reply"),
    "prompt_tokens": Field(_I64, "prompt tokens the endpoint counted"),
    "completion_tokens": Field(_I64, "completion tokens the endpoint counted"),
    "cost_usd": Field(_F64, "cost of the call in US dollars"),
    "logprob_mean": Field(_F64, "mean log-probability of the reply's tokens (null: not given)"),
    "archive_path": Field(_S, "the gzip call archive holding the request and reply bodies"),
    "archive_line": Field(_I64, "line of the call in its archive"),
    "endpoint": Field(_S, "the endpoint that answered: its base URL without credentials or query, or its name"),
    "label_id": Field(_S, "id of the label: hash of work, teacher, model, prompt version and SHA, view hash"),
    "view_hash": Field(_S, "hash of the record view the teacher was shown"),
    "categories": Field(_LS, "the categories given, in vocabulary order (empty: not meta-research)"),
    "domain": Field(_S, "the meta-research domain (SPEC section 3)"),
    "study_design": Field(_S, "the study design (SPEC section 3)"),
    "genre": Field(_S, "the genre (SPEC section 3)"),
    "about_ca_system": Field(_B, "the Canadian research system itself is studied"),
    "about_ca_topic": Field(_B, "Canada is a substantive subject"),
    "confidence": Field(_S, "the labeller's confidence: high | medium | low"),
    "attempts": Field(_I32, "calls made for the label, retries included"),
    "source_ref": Field(_S, "where an imported label came from in its source (JSON)"),
    "lines": Field(_I64, "lines in the archive"),
    "calls": Field(_I64, "calls in the archive"),
    "labels": Field(_I64, "labels in the archive"),
    "recovered": Field(_B, "the archive was recovered after a run that died"),
    "closed_at": Field(_TS, "when the archive was closed (UTC)"),
    "rows": Field(_I64, "rows the file gave"),
    "imported_at": Field(_TS, "when the file was imported (UTC)"),
    "batch": Field(_S, "name of the batch (a teacher's coverage 'batch:<name>')"),
    "added_at": Field(_TS, "when the work was added to the batch (UTC)"),
    "pair": Field(_S, "the two teacher configurations compared, 'a vs b'"),
    "head": Field(_S, "the label field or target compared (a category, about_ca flag or categorical field)"),
    "n": Field(_I64, "works counted"),
    "agreement": Field(_F64, "raw proportion of agreement"),
    "kappa": Field(_F64, "Cohen's kappa"),
    "n_weighted": Field(_F64, "sum of the design weights of the works counted"),
    "weighted_agreement": Field(_F64, "design-weighted proportion of agreement"),
    "weighted_kappa": Field(_F64, "design-weighted Cohen's kappa"),
    "n_with_weight": Field(_I64, "works counted that carry a design weight"),
    "config_a": Field(_S, "the first teacher configuration of the pair"),
    "config_b": Field(_S, "the second teacher configuration of the pair"),
    "weights": Field(_S, "the design whose weights the weighted statistics use"),
    "value_a": Field(_S, "the first teacher's value"),
    "value_b": Field(_S, "the second teacher's value"),
    "reference": Field(_S, "the frontier reference set the teacher was qualified against"),
    "config_hash": Field(_S, "hash of the qualification configuration"),
    "config": Field(_S, "the qualification configuration (JSON)"),
    "reference_sha": Field(_S, "SHA-256 of the reference set's works and labels"),
    "needed_kappa": Field(_F64, "the kappa the teacher needed to qualify"),
    "frontier_kappa": Field(_F64, "the kappa of the frontier reference against itself"),
    "reference_works": Field(_I64, "works of the reference set"),
    "labelled": Field(_I64, "works of the reference set the teacher labelled"),
    "failed": Field(_I64, "works of the reference set the teacher failed to label"),
    "reference_positives": Field(_I64, "positives of the reference set"),
    "teacher_positives": Field(_I64, "positives the teacher gave"),
    "weighted_confusion": Field(_S, "design-weighted confusion matrix of the teacher against the reference (JSON)"),
    # ---- student, predictions and prevalence (SPEC sections 6-7) -----------------------------------------------
    "model_version": Field(_S, "the student model version (metacan-v<major>-hybrid-<12 hex>)"),
    "target": Field(_S, "the head's target: a category, an about_ca flag or a categorical field"),
    "positives": Field(_I64, "positive labels of the head's teacher"),
    "n_train": Field(_I64, "works the head trained on"),
    "train_positives": Field(_I64, "positives among the works the head trained on"),
    "weighted_rate": Field(_F64, "design-weighted rate of the teacher's positives"),
    "kish_ess_positive": Field(_F64, "Kish effective sample size of the positives' design weights"),
    "holdout_n": Field(_I64, "works of the holdout the head was scored on"),
    "holdout_positives": Field(_I64, "positives of the holdout"),
    "ap": Field(_F64, "average precision on the holdout"),
    "auroc": Field(_F64, "area under the ROC curve on the holdout"),
    "ece": Field(_F64, "expected calibration error on the holdout"),
    "accuracy": Field(_F64, "accuracy on the holdout (categorical heads)"),
    "ap_ci_low": Field(_F64, "lower bound of the 95% bootstrap interval (holdout works) of the average precision"),
    "ap_ci_high": Field(_F64, "upper bound of the 95% bootstrap interval (holdout works) of the average precision"),
    "auroc_ci_low": Field(_F64, "lower bound of the 95% bootstrap interval (holdout works) of the AUROC"),
    "auroc_ci_high": Field(_F64, "upper bound of the 95% bootstrap interval (holdout works) of the AUROC"),
    "ece_ci_low": Field(
        _F64, "lower bound of the 95% bootstrap interval (holdout works) of the expected calibration error"
    ),
    "ece_ci_high": Field(
        _F64, "upper bound of the 95% bootstrap interval (holdout works) of the expected calibration error"
    ),
    "accuracy_ci_low": Field(_F64, "lower bound of the 95% bootstrap interval (holdout works) of the accuracy"),
    "accuracy_ci_high": Field(_F64, "upper bound of the 95% bootstrap interval (holdout works) of the accuracy"),
    "metric_note": Field(_S, "why a holdout metric is missing"),
    "gate_passed": Field(_B, "the head passed the support gate (SPEC section 6): it may decide"),
    "gate_reason": Field(_S, "why the gate passed or failed"),
    "venue_key": Field(_S, "the work's venue key, the group of the grouped cross-validation"),
    "candidate_categories": Field(_LS, "categories of the candidate decision (codex decision OR gemma label)"),
    "consensus_categories": Field(_LS, "categories of the consensus decision (codex decision AND gemma label)"),
    "teacher_disagreement_score": Field(_F64, "max over the binary targets of |codex score - gemma label|"),
    "threshold_uncertainty_score": Field(_F64, "how close the work's scores are to the gated heads' thresholds"),
    "prediction_status": Field(_S, "status of the machine prediction (machine_predicted_unvalidated)"),
    "gemma_label_status": Field(_S, "status of the census teacher's direct label of the work (missing: none)"),
    "rate": Field(_F64, "the rate (proportion of works)"),
    "k": Field(_I64, "works decided positive: round(rate x works scored)"),
    "threshold": Field(_F64, "the score of the k-th work, the head's threshold"),
    "boundary_id": Field(_S, "id of the k-th work"),
    # the cascade (student/cascade_batch.py)
    "precision_target": Field(_F64, "the precision the positive threshold certifies"),
    "npv_target": Field(_F64, "the negative predictive value the negative threshold certifies"),
    "recall_target": Field(_F64, "the recall the negative side must keep (certified); NULL: no cap"),
    "bound_level": Field(_F64, "the one-sided confidence level of the bounds"),
    "bound_method": Field(_S, "the lower bound's method: clopper-pearson or jeffreys (student/cascade.py)"),
    "calibration_n": Field(_I64, "held-out works the teacher labelled on the target (the certificate's works)"),
    "calibration_positives": Field(_I64, "of them, the teacher's positives"),
    "positive_threshold": Field(_F64, "scores at or above it are decided positive; NULL: nothing certified"),
    "positive_bound": Field(_F64, "the lower bound of the precision at that threshold"),
    "negative_threshold": Field(_F64, "scores at or below it are decided negative; NULL: nothing certified"),
    "negative_bound": Field(_F64, "the lower bound of the NPV at that threshold"),
    "negative_vacuous": Field(_B, "the NPV target is met by the base rate alone, whatever the ranking"),
    "works_planned": Field(_I64, "frame works outside the holdout the teacher has not labelled"),
    "decided_positive": Field(_I64, "of them, decided positive by the certified threshold"),
    "decided_negative": Field(_I64, "of them, decided negative by the certified threshold"),
    "sent_to_teacher": Field(_I64, "band works within the call budget"),
    "added_to_batch": Field(_I64, "of them, added to batch cascade by this run (the others were already there)"),
    "unsettled": Field(_I64, "band works beyond the budget: no decision"),
    "decision": Field(_S, "positive | negative (certified student decision) | teacher | unsettled"),
    "population": Field(_S, "the population the rate is of"),
    "estimand": Field(_S, "the protocol's estimand the rate is of (category: the category's rate, every route)"),
    "category": Field(_S, "the category"),
    "method": Field(_S, "the estimation method"),
    "se": Field(_F64, "standard error"),
    "ci_low": Field(_F64, "lower bound of the 95% confidence interval"),
    "ci_high": Field(_F64, "upper bound of the 95% confidence interval"),
    "strata_single": Field(_I64, "strata with one labelled work (they add no variance)"),
    "design": Field(_S, "the sample design whose weights the rate uses"),
    "score_gemma": Field(_F64, "the work's score from the gemma arm of the machine scores"),
    "score_codex": Field(_F64, "the work's score from the codex arm of the machine scores"),
    "score_spread": Field(_F64, "max - min of the work's machine scores over the arms"),
    "validation_status": Field(_S, "score_only:mature | score_only:v0-immature-baseline: scores rank, assert nothing"),
    "provisional": Field(_B, "the scores come from a round that has not passed the maturity gate"),
    "baseline": Field(_B, "the scores are the immature baseline's"),
    "maturity_gate_passed": Field(_B, "the machine scores passed the maturity gate (SPEC section 7)"),
    "rounds_run": Field(_I32, "machine-score rounds run so far"),
    "arm_status": Field(_S, "each arm's head status"),
    "held_out": Field(_B, "the work is in the frozen holdout"),
    "holdout_version": Field(_S, "version of the frozen holdout"),
    "frozen_at": Field(_TS, "when the holdout was frozen (UTC)"),
    "file_sha256": Field(_S, "SHA-256 of the file"),
    "feature_kind": Field(_S, "the feature backend the heads were trained on"),
    "summary": Field(_S, "summary of the model version: heads, metrics, parameters (JSON)"),
    "round": Field(_I32, "number of the machine-score round"),
    "training_signature": Field(_S, "hash of the round's training labels"),
    "training_labels": Field(_S, "the labels the round trained on, per arm (JSON)"),
    "metrics": Field(_S, "the round's holdout metrics per arm (JSON)"),
    "proposed": Field(_I32, "works the round proposed for the next active-learning batch"),
    "arm": Field(_S, "the machine-score arm (one per teacher)"),
    "score": Field(_F64, "the arm's score of the work"),
    # ---- published records, lineage and pages (SPEC sections 8-9) ----------------------------------------------
    "record_json": Field(_S, "the work's published record (JSON, seed 004 shape)"),
    "record_hash": Field(_S, "SHA-256 of the work's record JSON"),
    "frame_run_id": Field(_S, "run id of the frame build"),
    "input_kind": Field(_S, "input_file | archived_api_response: where the work record came from"),
    "part_run_id": Field(_S, "run id that built the work's frame part"),
    "teacher_calls": Field(pa.list_(TEACHER_CALL_TYPE), "the teacher calls behind the work's direct labels"),
    "student_run_id": Field(_S, "run id of the student that scored the work"),
    "machine_round": Field(_I32, "the machine-score round that scored the work"),
    "machine_scores_run_id": Field(_S, "run id of the machine scores"),
    "machine_validation_status": Field(_S, "validation_status of the work's machine scores"),
    "renderer": Field(_S, "version of the page renderer"),
    "page_path": Field(_S, "path of the work's page under the site folder"),
    "render": Field(_B, "the work's page is rendered in this run"),
    "abstract_status": Field(_S, "whether the abstract was fetched for the page, and why not"),
    "rendered_at": Field(pa.timestamp("s"), "when the page was rendered (UTC)"),
    # ---- releases and the release database ---------------------------------------------------------------------
    "release_version": Field(_S, "version of the frozen release"),
    "content_sha256": Field(_S, "SHA-256 of the canonical content the row's id names"),
    "classifier_version": Field(_S, "the student model version under test or shipped"),
    "folder": Field(_S, "the release's folder under data/releases/"),
    "release_json_sha256": Field(_S, "SHA-256 of the release's release.json"),
    "release_id": Field(_S, "id of the release database"),
    "schema_version": Field(_I32, "version of the release database's layout"),
    "records_sha256": Field(_S, "SHA-256 of the work records the release was built from"),
    "frame_build_ids": Field(_LS, "the frame builds of the release's works"),
    "classifier_versions": Field(_LS, "the classifier versions of the release's decisions"),
    "teachers": Field(_LS, "the teachers of the release's direct labels"),
    "score_arms": Field(_LS, "the machine-score arms of the release"),
    "fts_engine": Field(_S, "the full-text search engine of the release"),
    "page_context": Field(_S, "what every page of the served site shows of the release (JSON)"),
    "year": Field(_I32, "year of publication"),
    "venue": Field(_S, "name of the work's primary source"),
    "cited_by": Field(_I64, "citations OpenAlex counts for the work"),
    "classification_kind": Field(_S, "which kind of classification the work's card shows"),
    "release_layer": Field(
        _S, "the original protocol's release layer: human_verified | high_precision | provisional | contested"
    ),
    "name": Field(_S, "the institution's, funder's or keyword's name"),
    "label_status": Field(_S, "the direct label's status as its record publishes it"),
    "qualification": Field(_S, "the teacher's qualification, as a sentence the site shows"),
    "qualified": Field(_B, "the teacher passed qualification: its labels count towards decisions"),
    "mode": Field(_S, "candidate | consensus: the decision rule"),
    "facet": Field(_S, "name of the facet"),
    "code": Field(_I32, "the value's small-integer code within its facet"),
    "value": Field(_F64, "the estimate"),
    "scored": Field(_B, "the work has machine scores"),
    "decided": Field(_B, "the classifier decided a category for the work"),
    "classified": Field(
        _B, "the work's record ships a category: a labelled direct label's category or a classifier decision"
    ),
    "institution": Field(pa.list_(_I32), "facet_codes codes of the work's Canadian institutions"),
    "funder": Field(pa.list_(_I32), "facet_codes codes of the work's funders"),
    "keyword": Field(pa.list_(_I32), "facet_codes codes of the work's keywords"),
    "classifier": Field(pa.list_(_I32), "facet_codes codes of the classifier's decisions for the work"),
    "items": Field(_S, "the rows the site lists (JSON)"),
    "cohort_key": Field(_S, "hash of the cohort's coded filter clauses"),
    "filters": Field(_S, "the cohort's canonical filters (JSON)"),
    "figure": Field(_S, "name of the statistics page's figure"),
    "teacher_a": Field(_S, "the first teacher of the pair"),
    "teacher_b": Field(_S, "the second teacher of the pair"),
    "heads": Field(_LS, "the heads"),
    "direct_labels": Field(_S, "every teacher's direct label of the work as its record publishes it (JSON)"),
    "query_hash": Field(_S, "hash of the cohort's canonical filters: the /q/<hash> link"),
    # ---- the coding store and the audit study (SPEC section 10) ------------------------------------------------
    "coder": Field(_S, "name of the human coder"),
    "token_sha256": Field(_S, "SHA-256 of the coder's sign-in token (never the token)"),
    "revoked_at": Field(_S, "when it was revoked (ISO 8601, UTC; null: in force)"),
    "protocol_id": Field(_S, "id of the locked audit protocol (hash of its canonical JSON)"),
    "evidence_json": Field(_S, "the evidence a coder is shown of the work (JSON; never a machine output)"),
    "evidence_sha256": Field(_S, "SHA-256 of the evidence JSON"),
    "loaded_at": Field(_S, "when it was loaded (ISO 8601, UTC)"),
    "evidence_changed_at": Field(_S, "when the task's evidence last changed (ISO 8601, UTC)"),
    "first_loaded_at": Field(_S, "when the evidence version was first shown (ISO 8601, UTC)"),
    "abstract_sha256": Field(_S, "SHA-256 (hex) of the abstract text a coder was shown, UTF-8 (null: none was shown)"),
    "abstract_text": Field(
        _S, "an abstract as a coder was shown it: its sections, each heading on a line above its text"
    ),
    "abstract_sections": Field(_S, "an abstract's sections as shown: a JSON list of [heading or null, text]"),
    "fetched_at": Field(_S, "when the source gave it (ISO 8601, UTC)"),
    "first_shown_at": Field(_S, "when a coder was first shown it (ISO 8601, UTC)"),
    "claimed_at": Field(_S, "when the coder was handed the task (ISO 8601, UTC)"),
    "answer_id": Field(_S, "id of the answer"),
    "role": Field(_S, "the coder's role"),
    "unresolved": Field(_I64, "works whose code is unresolved"),
    "not_yet_coded": Field(
        _I64, "sampled works with no code yet (never coded, or waiting for a second coder or an adjudication)"
    ),
    "submitted_at": Field(_S, "when the answer was submitted (ISO 8601, UTC)"),
    "provenance": Field(_S, "for an imported answer: file, task, annotation id, completed_by, times (JSON)"),
    "file_name": Field(_S, "name of the imported file"),
    "tasks": Field(_I64, "tasks in the file"),
    "annotations": Field(_I64, "annotations in the file"),
    "appended": Field(_I64, "answers appended"),
    "already_present": Field(_I64, "answers already in the store"),
    "refused": Field(_I64, "annotations refused"),
    "refusals": Field(_S, "every refused annotation with its reason (JSON list)"),
    "instructions_version": Field(_S, "version of the coder instructions the protocol names"),
    "instructions_sha256": Field(_S, "SHA-256 of the coder instructions"),
    "sample_works": Field(_I64, "works in the protocol's audit sample"),
    "added": Field(_I64, "tasks added"),
    "evidence_changed": Field(_I64, "tasks whose evidence changed"),
    "moved": Field(_I64, "tasks whose queue position changed"),
    "unchanged": Field(_I64, "tasks left unchanged"),
    "missing": Field(_I64, "sampled works the frame no longer holds (their tasks stay)"),
    "granted_at": Field(_S, "when the role was granted (ISO 8601, UTC)"),
    "assigned_at": Field(_S, "when the work was assigned to the coder (ISO 8601, UTC)"),
    "session_sha256": Field(_S, "SHA-256 of the session cookie's value (never the value)"),
    "expires_at": Field(_S, "when the session expires (ISO 8601, UTC)"),
    "ended_at": Field(_S, "when the coder signed out (ISO 8601, UTC; null: not signed out)"),
    "adjudicator": Field(_S, "the machine adjudicator, machine-adjudicator:<name>"),
    "verdict": Field(_S, "the adjudicator's own value (e.g. the frame1k tier)"),
    "source_sha256": Field(_S, "SHA-256 of the file the row came from"),
    "recorded_at": Field(_S, "when the row was recorded (ISO 8601, UTC)"),
    "decision_rule": Field(_S, "the classifier decision rule the protocol tests"),
    "protocol_json": Field(_S, "the protocol's canonical JSON, which its id hashes"),
    "materialized_at": Field(_TS, "when audit_protocol was materialized (UTC)"),
    "created": Field(_B, "the run created the protocol (false: it named an existing one)"),
    "trained_on": Field(_B, "the classifier under test trained on the work"),
    "passed": Field(_B, "the head passed the gate"),
    "precision": Field(_F64, "design-weighted precision"),
    "precision_lower": Field(_F64, "lower bound of the precision's 95% interval"),
    "recall": Field(_F64, "design-weighted recall"),
    "recall_lower": Field(_F64, "lower bound of the recall's 95% interval"),
    "coded_positives": Field(_I64, "coded works positive on the head"),
    "n_coded": Field(_I64, "works coded"),
    "code_source": Field(_S, "human (agreed or adjudicated codes) | machine-adjudicator:<name>"),
    "system": Field(_S, "the system judged: a teacher or a classifier decision rule"),
    "group_by": Field(_S, "the grouping (overall, language, route, genre, abstract)"),
    "group": Field(_S, "the group within the grouping"),
    "metric": Field(_S, "precision | recall | f1"),
    "lower": Field(_F64, "lower bound of the 95% interval"),
    "upper": Field(_F64, "upper bound of the 95% interval"),
    "n_effective": Field(_F64, "Kish effective sample size of the design weights"),
    "cell": Field(_S, "the confusion matrix cell: tp | fp | fn | tn"),
    "count": Field(_I64, "works in the cell"),
    "weighted": Field(_F64, "design-weighted works in the cell"),
    "width_ratio": Field(_F64, "the interval's width over the codes-only estimate's"),
    "statistic": Field(_S, "cohen_kappa | krippendorff_alpha"),
    "weighting": Field(_S, "raw | design"),
    "judged": Field(_B, "the gate could judge the head (enough coded positives)"),
    "human_validation": Field(_B, "the row counts towards human_validation (the protocol's rule on human codes)"),
    "basis": Field(_S, "agreed (two coders agreed) | adjudicated"),
    "coders": Field(_LS, "the pseudonyms (coder-<10 hex>, per coder and study) of the coders the code rests on"),
    "answer_ids": Field(_LS, "the released ids (answer-<16 hex>) of the answers the code rests on"),
    # ---- recall without a probability sample (the original protocol's instruments ii and iii) --------------------
    "reference_source": Field(
        _S, "the reference: teacher:<name> (a qualified teacher's direct labels) | human (final human codes) | none"
    ),
    "filter_name": Field(_S, "the filter: route:<route> | lexicon:tier_<a|b|c> | topic:openalex_primary_topic"),
    "filter_kind": Field(_S, "route | lexicon_tier | topic"),
    "filter_definition": Field(_S, "what the filter keeps, in one sentence (the topic filter names its topics)"),
    "kept": Field(_I64, "reference positives the filter keeps"),
    "dropped": Field(_I64, "reference positives the filter drops"),
    "interval_method": Field(_S, "how the 95% interval is computed (clopper-pearson: exact binomial)"),
    "detected": Field(_I64, "reference works the system put in the category"),
    "missed": Field(_I64, "reference works the system decided on and left out of the category"),
    "undecided": Field(_I64, "reference works the system has no decision on (no prediction, no or a failed label)"),
    "estimate_kind": Field(_S, "what the figure is: a non-probability bound, never a design-based estimate"),
    "venue_list_version": Field(_S, "version of the venue reference set (its TOML file's version)"),
    "venue_list_sha256": Field(_S, "SHA-256 of the venue reference set's file"),
    # ---- study design against MEDLINE (tables/medline.py) -------------------------------------------------------
    "answer": Field(_S, "what the archived efetch answers say of the PMID: record | no_record | not_asked"),
    "medline_status": Field(_S, "MedlineCitation Status as NLM gives it"),
    "indexing_method": Field(_S, "MedlineCitation IndexingMethod as NLM gives it (null: absent, indexed by hand)"),
    "indexing": Field(_S, "how NLM indexed the record: hand | curated | automated | not_indexed"),
    "publication_types": Field(_LS, "NLM publication type names, as NLM spells them"),
    "publication_type_uis": Field(_LS, "MeSH unique ids of the publication types, in the same order"),
    "reference_kind": Field(_S, "reference (hand-indexed) | agreement with another machine"),
    "eligible_from": Field(_I64, "the first year a class's NLM publication type could be assigned (null: always)"),
    "true_positive": Field(_I64, "the system and the reference both say the class"),
    "false_positive": Field(_I64, "the system says the class, the reference does not"),
    "false_negative": Field(_I64, "the reference says the class, the system does not"),
    "true_negative": Field(_I64, "neither says the class"),
    "agreement_lower": Field(_F64, "lower bound of agreement's 95% interval"),
    "gate": Field(_S, "why the gate passed or failed, or why nothing is measured"),
    # ---- Retraction Watch -------------------------------------------------------------------------------------
    "rw_record_id": Field(_I64, "Retraction Watch's Record ID of the notice"),
    "rw_version": Field(_S, "version of the Retraction Watch file read: rw-<12 hex of its SHA-256>"),
    "retraction_nature": Field(
        _S,
        "Retraction Watch's RetractionNature, as given (Retraction, Expression of concern, Correction, Reinstatement)",
    ),
    "cascade_decision": Field(
        _S,
        "the cascade's decision on the metaresearch head: positive | negative (certified student decisions, "
        "machine_predicted_unvalidated) | teacher | unsettled | withheld | not_planned",
    ),
    "retraction_state": Field(
        _S,
        "retraction | expression_of_concern | correction | reinstatement (of one notice); for a work, also none "
        "(checked, no notice) or not_checked (no Retraction Watch file)",
    ),
    "retraction_reasons": Field(_LS, "the notice's reasons, each without its leading '+', in the file's order"),
    "retraction_date": Field(_S, "the date of the notice (ISO 8601; null: none given)"),
    "notice_doi": Field(_S, "the DOI of the notice (RetractionDOI), normalised: lower case, no URL prefix"),
    "notice_pmid": Field(_S, "the PubMed id of the notice (RetractionPubMedID; null: none, Retraction Watch's 0)"),
    "original_date": Field(_S, "the publication date of the original paper (ISO 8601; null: none given)"),
    "original_doi": Field(
        _S, "the DOI of the original paper (OriginalPaperDOI), normalised: lower case, no URL prefix"
    ),
    "original_pmid": Field(_S, "the PubMed id of the original paper (OriginalPaperPubMedID; null: none)"),
    "journal": Field(_S, "the journal as Retraction Watch names it"),
    "publisher": Field(_S, "the publisher as Retraction Watch names it"),
    "matched_by": Field(_S, "how the notice was joined to the frame work: doi, pmid or doi+pmid"),
    "openalex_missed": Field(_B, "Retraction Watch says Retraction while OpenAlex's is_retracted is false"),
    "retrieved_at": Field(_S, "when the file was read or downloaded (ISO 8601, UTC)"),
    "file_date": Field(_S, "the file's own date: the server's Last-Modified, else the local file's modification time"),
    "data_through": Field(_S, "the latest notice date in the file (ISO 8601)"),
}

# The student's published per-target columns (SPEC section 6): one set per about_ca flag and categorical field.
for _t in ABOUT_CA_TARGETS:
    FIELDS[f"{_t}_candidate"] = Field(_B, f"candidate decision on {_t} (codex decision OR gemma label)")
    FIELDS[f"{_t}_consensus"] = Field(_B, f"consensus decision on {_t} (codex decision AND gemma label)")
    for _s in PUBLISHED_TEACHERS:
        FIELDS[f"{_t}_score_{_s}"] = Field(_F64, f"score of the student's {_s} head on {_t}")
for _t in CATEGORICAL_TARGETS:
    for _s in PUBLISHED_TEACHERS:
        FIELDS[f"{_t}_scores_{_s}"] = Field(_LF, f"scores of the student's {_s} head on {_t}, in vocabulary order")
        FIELDS[f"{_t}_{_s}"] = Field(_S, f"the {_s} head's {_t} (argmax)")
    FIELDS[f"{_t}_candidate"] = Field(_S, f"candidate {_t}: the gemma label's value")
    FIELDS[f"{_t}_consensus"] = Field(_S, f"consensus {_t}: the gemma value when the codex head's argmax agrees")
for _s in PUBLISHED_TEACHERS:
    FIELDS[f"category_scores_{_s}"] = Field(
        _LF, f"scores of the student's {_s} heads per category, in vocabulary order"
    )


def column(name: str, type: pa.DataType | None = None, description: str | None = None) -> pa.Field:
    """The column ``name`` of one table whose type or meaning there differs from the dictionary's: an explicit
    per-table override (the dictionary's type or description where one is not given)."""
    base = FIELDS.get(name)
    if base is None and (type is None or description is None):
        raise KeyError(f"column {name!r} is not in the field dictionary: give it a type and a description")
    return pa.field(
        name,
        type if type is not None else base.type,
        metadata={DESCRIPTION: (description if description is not None else base.description).encode()},
    )


def columns(*entries: str | pa.Field) -> pa.Schema:
    """An Arrow schema of the dictionary's columns ``entries`` (names), in order, each described in its field
    metadata; an entry that is a ``pa.Field`` (made by :func:`column`, or a described field of another schema)
    is taken as it is. Raises KeyError naming a column missing from the dictionary."""
    fields = []
    for entry in entries:
        if isinstance(entry, pa.Field):
            fields.append(entry)
            continue
        if entry not in FIELDS:
            raise KeyError(f"column {entry!r} is not in the field dictionary (tables/fields.py): declare it there")
        f = FIELDS[entry]
        fields.append(pa.field(entry, f.type, metadata={DESCRIPTION: f.description.encode()}))
    return pa.schema(fields)


def description(field: pa.Field) -> str | None:
    """The description a catalog column carries in its metadata (None for a column built without one)."""
    raw = (field.metadata or {}).get(DESCRIPTION)
    return raw.decode() if raw else None
