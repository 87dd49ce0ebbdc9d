"""Scoring any list of works with a published student model version (``metacan score``, ``POST /api/v1/score``).

Input (:func:`read_list`): a CSV (``.csv``, ``.tsv``, optionally ``.gz``) or JSON Lines (``.jsonl``, ``.ndjson``,
``.gz``) of list rows ``id, title`` with the optional columns ``venue`` (or ``venue_name``), ``topic``, ``field``,
``type``, ``keywords`` (``;``-separated in a CSV, a list of strings in JSON) and ``language``; or OpenAlex work records
in any shape :mod:`metacan_pipeline.openalex.reader` takes (a ``.json`` document, API pages, ``.json.gz``, a tar
archive, a snapshot folder; a JSON Lines object with OpenAlex work fields is read as a record too). A record's fields
come from :func:`metacan_pipeline.openalex.works.student_view`, the extraction the frame's rows are built by, and a
list row's title goes through the same markup-to-text step, so a frame work scores the same in a list as in the frame.

Every input row becomes an :class:`InputWork` or a :class:`Reject` (no id, empty title, not JSON, a field of the
wrong type, a duplicate id, a mix of list columns and OpenAlex fields), in input order: nothing is dropped silently.

Output (:class:`ListScorer`): one row per work, in input order, with the columns :attr:`ListScorer.columns`:

- ``id`` (an OpenAlex work id in its short form, ``W123``; any other id as given);
- per source of the model version (``bundle.heads``: the role teachers, and reference sets when the version has
  them) and binary head: ``<source>:<head>`` (the head's score in [0, 1]) and ``<source>:<head>:percentile`` (the
  share of the current frame's works, in per cent, whose ``student_scores`` score of that head is at or below this
  score, to 0.1 point: the highest of 1,001 quantile levels whose frame quantile is at or below it; null when the
  frame's scores are of another model version or absent);
- per source and categorical head: ``<source>:<head>`` (the most probable class) and ``<source>:<head>:probability``;
- ``model_version`` and ``validation_status`` (:func:`validation_status`).

A list work carries scores only: no quota threshold, no decision and no census direct label, so none of the frame's
candidate, consensus or human-validation statuses applies to it.
"""

from __future__ import annotations

import csv
import gzip
import io
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from ..openalex.abstract import markup_to_text
from ..openalex.ids import short_id
from ..openalex.reader import Quarantined, Record, iter_file, iter_records
from ..openalex.works import student_view, work_types
from ..storage import MetacanStorage, sql_literal
from ..tables.frame import FRAME_SCHEMA
from ..vocab import CATEGORICAL_TARGETS, PREDICTION_STATUS
from .features import STUDENT_FIELDS, transform
from .models import ModelVersionError, StudentBundle, load_published
from .scoring import score_column, student_texts

#: Works per batch: memory holds one batch of input rows, features and scores.
BATCH_SIZE = 50_000
#: Quantile levels of the frame's scores behind a percentile: 0, 0.001, ..., 1.
QUANTILE_LEVELS = np.linspace(0.0, 1.0, 1001)
#: The optional list columns and the frame column each one fills (``title`` fills ``title_text``).
LIST_COLUMNS = {
    "title": "title_text",
    "venue": "venue_name",
    "venue_name": "venue_name",
    "topic": "topic",
    "field": "field",
    "type": "type",
    "keywords": "keywords",
    "language": "language",
}
#: Top-level keys of an OpenAlex work record that a list row never has: a JSON object holding one is a record.
OPENALEX_KEYS = frozenset(
    {
        "display_name",
        "primary_location",
        "host_venue",
        "primary_topic",
        "authorships",
        "publication_year",
        "publication_date",
        "doi",
        "ids",
        "updated_date",
        "abstract_inverted_index",
        "type_crossref",
        "locations",
        "open_access",
        "cited_by_count",
        "topics",
        "concepts",
    }
)
#: List columns an OpenAlex record never has at its top level (a mix of these and :data:`OPENALEX_KEYS` is refused).
LIST_ONLY = frozenset({"venue", "venue_name", "topic", "field"})
#: Suffixes by input kind.
CSV_SUFFIXES = (".csv", ".csv.gz", ".tsv", ".tsv.gz")
LINES_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz", ".gz")
READER_SUFFIXES = (".json", ".json.gz", ".txt", ".tar", ".tar.gz", ".tgz")
INPUT_TYPES = (
    "a CSV (.csv, .tsv, optionally .gz) or JSON Lines (.jsonl, .ndjson, .gz) of id,title rows, or OpenAlex work "
    "records (.json, .json.gz, .jsonl, .gz, a .tar/.tgz of these, or a snapshot folder)"
)
OUTPUT_FORMATS = (".csv", ".jsonl", ".parquet")


class ListInputError(ValueError):
    """The input as a whole cannot be read (missing file, unsupported type, a CSV without id or title column)."""


class ScoringUnavailable(RuntimeError):
    """No published model version to score with (no warehouse, no model version, or its file is missing or altered)."""


@dataclass(frozen=True)
class InputWork:
    """One usable input row: its 1-based position among the input rows, where it sat, its id and frame fields."""

    row: int
    location: str
    id: str
    fields: dict


@dataclass(frozen=True)
class Reject:
    """One input row that cannot be scored, and why."""

    row: int
    location: str
    id: str | None
    reason: str
    excerpt: str = ""

    def line(self) -> str:
        """The stderr line: ``row N (location): reason``."""
        who = f" id {self.id!r}" if self.id else ""
        return f"row {self.row} ({self.location}){who}: {self.reason}"


REJECT_SCHEMA = pa.schema(
    [
        ("row", pa.int64()),
        ("location", pa.string()),
        ("id", pa.string()),
        ("reason", pa.string()),
        ("excerpt", pa.string()),
    ]
)


# ---- reading ---------------------------------------------------------------------------------------------------------


def _excerpt(value: Any, n: int = 200) -> str:
    raw = value if isinstance(value, bytes) else str(value).encode("utf-8", errors="surrogateescape")
    return raw.decode("utf-8", errors="replace")[:n]


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "a list", bool: "a boolean", int: "a number", float: "a number"}.get(
        type(value), type(value).__name__
    )


def _list_fields(obj: dict) -> tuple[str | None, dict | None, str | None]:
    """``(id, frame fields, reason refused)`` of a list row (a dict of its columns, values str or None; JSON may
    give keywords as a list)."""
    raw_id = obj.get("id")
    if isinstance(raw_id, int) and not isinstance(raw_id, bool):
        raw_id = str(raw_id)
    if raw_id is None or (isinstance(raw_id, str) and not raw_id.strip()):
        return None, None, "no id"
    if not isinstance(raw_id, str):
        return None, None, f"id is {_type_name(raw_id)}, not a string"
    sid = short_id(raw_id.strip())
    wid = sid if sid is not None and sid[0] == "W" else raw_id.strip()
    fields: dict = {}
    for col, target in LIST_COLUMNS.items():
        if col not in obj or (col == "venue_name" and obj.get("venue") is not None):
            continue
        value = obj[col]
        if value is None:
            continue
        if col == "keywords":
            if isinstance(value, str):
                value = [k.strip() for k in value.split(";") if k.strip()]
            elif not (isinstance(value, list) and all(isinstance(k, str) for k in value)):
                return wid, None, f"keywords is {_type_name(value)}, not a string or a list of strings"
            fields[target] = value
            continue
        if not isinstance(value, str):
            return wid, None, f"{col} is {_type_name(value)}, not a string"
        if target == "title_text":
            value = markup_to_text(value).strip()
        elif target == "type":
            value = work_types({"type": value})[0]
        fields[target] = value or None
    if not fields.get("title_text"):
        return wid, None, "empty title" if "title" in obj else "no title"
    return wid, fields, None


def _record_fields(data: dict) -> tuple[str | None, dict | None, str | None]:
    """``(id, frame fields, reason refused)`` of an OpenAlex record (:func:`~metacan_pipeline.openalex.works.student_view`)."""
    sid = short_id(data.get("id"))
    if sid is None:
        return None, None, "no id" if not data.get("id") else f"unrecognised OpenAlex id {str(data.get('id'))[:80]!r}"
    if sid[0] != "W":
        return sid, None, f"an OpenAlex {sid[0]} record, not a work"
    fields = student_view(data)
    if not fields["title_text"]:
        return sid, None, "empty title"
    return sid, fields, None


def classify_object(obj: Any) -> tuple[str | None, dict | None, str | None]:
    """``(id, frame fields, reason refused)`` of one JSON value: an OpenAlex work record (it has a key of
    :data:`OPENALEX_KEYS`) or a list row; a JSON value that is not an object, or an object mixing OpenAlex fields
    with list-only columns (:data:`LIST_ONLY`), is refused."""
    if not isinstance(obj, dict):
        return None, None, f"a JSON {_type_name(obj).removeprefix('a ').removeprefix('an ')}, not an object"
    openalex = OPENALEX_KEYS.intersection(obj)
    if openalex:
        mixed = LIST_ONLY.intersection(obj)
        if mixed:
            return (
                None,
                None,
                f"mixes OpenAlex work fields ({', '.join(sorted(openalex)[:3])}) with list columns "
                f"({', '.join(sorted(mixed))}): give an OpenAlex record or an id,title row",
            )
        return _record_fields(obj)
    return _list_fields(obj)


def _open_text(path: Path):
    raw = gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")  # noqa: SIM115
    return io.TextIOWrapper(raw, encoding="utf-8-sig", errors="surrogateescape", newline="")


def _csv_items(path: Path) -> Iterator[tuple[str, Any, str | None]]:
    """``(location, row dict or None, reason)`` per data row of a CSV/TSV (``reason`` set for a row that is not one)."""
    delimiter = "\t" if ".tsv" in path.name.lower() else ","
    with _open_text(path) as fh:
        reader = csv.reader(fh, delimiter=delimiter)
        try:
            header = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise ListInputError(f"{path}: its header line is not CSV ({exc})") from None
        names = [h.strip().lower() for h in header]
        missing = [c for c in ("id", "title") if c not in names]
        if missing:
            raise ListInputError(
                f"{path}: the header {','.join(header)[:200]!r} has no {' and no '.join(missing)} column; a list "
                f"needs the columns id,title (optional: {', '.join(c for c in LIST_COLUMNS if c != 'title')})"
            )
        unknown = [h for h in names if h not in LIST_COLUMNS and h != "id"]
        if unknown:
            print(
                f"metacan score: {path.name}: columns ignored (not list columns): {', '.join(unknown)}", file=sys.stderr
            )
        keep = [(i, n) for i, n in enumerate(names) if n in LIST_COLUMNS or n == "id"]
        while True:
            try:
                values = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                yield f"line {reader.line_num}", None, f"not a CSV row: {exc}"
                continue
            where = f"line {reader.line_num}"
            if not any(v.strip() for v in values):
                continue  # a blank line is no row
            if len(values) != len(names):
                yield where, values, f"has {len(values)} fields, the header has {len(names)}"
                continue
            try:
                "".join(values).encode("utf-8")
            except UnicodeEncodeError:
                yield where, values, "not UTF-8 text"
                continue
            yield where, {n: (values[i] if values[i] != "" else None) for i, n in keep}, None


def _lines_items(path: Path) -> Iterator[tuple[str, Any, str | None]]:
    """``(location, parsed JSON value, reason)`` per non-blank line of a JSON Lines file (plain or gzip); a line
    holding an API page gives its results."""
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    lineno = 0
    try:
        with opener(path, "rb") as fh:
            for lineno, raw in enumerate(fh, start=1):
                if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]
                if not raw.strip():
                    continue
                try:
                    obj = orjson.loads(raw)
                except orjson.JSONDecodeError as exc:
                    yield f"line {lineno}", raw, f"not JSON: {exc}"
                    continue
                if isinstance(obj, dict) and "id" not in obj and isinstance(obj.get("results"), list):
                    for i, item in enumerate(obj["results"]):
                        yield f"line {lineno} results[{i}]", item, None
                    continue
                yield f"line {lineno}", obj, None
    except (EOFError, OSError) as exc:
        yield f"after line {lineno}", b"", f"file unreadable after line {lineno} ({type(exc).__name__}: {exc})"


def _reader_items(path: Path) -> Iterator[tuple[str, Any, str | None]]:
    """``(location, record dict, reason)`` of the OpenAlex reader's records and quarantine rows."""
    items: Iterable[Record | Quarantined] = iter_records(path) if path.is_dir() else iter_file(path, source=path.name)
    for item in items:
        if isinstance(item, Quarantined):
            reason = item.reason
            if reason == "missing id" or reason.startswith("unrecognised id"):
                reason += " (a record here needs an OpenAlex id; id,title rows go in a CSV or JSON Lines file)"
            yield f"{item.source_file} {item.locator}", item.excerpt, reason
        else:
            yield f"{item.source_file} {item.locator}", item.data, None


def input_kind(path: Path) -> str:
    """``csv``, ``lines`` or ``reader`` for an input path; raises ListInputError for a missing or unsupported one."""
    if not path.exists():
        raise ListInputError(f"input {path} does not exist: give {INPUT_TYPES}")
    if path.is_dir():
        return "reader"
    name = path.name.lower()
    if name.endswith(CSV_SUFFIXES):
        return "csv"
    if name.endswith(READER_SUFFIXES):
        return "reader"
    if name.endswith(LINES_SUFFIXES):
        return "lines"
    raise ListInputError(f"input {path}: unsupported type ({path.suffix or 'no suffix'}); give {INPUT_TYPES}")


def iter_objects(objects: Iterable[Any], location: str = "works[{}]") -> Iterator[tuple[str, Any, str | None]]:
    """``(location, value, None)`` per JSON value of an in-memory list (the API's body), for :func:`read_items`."""
    for i, obj in enumerate(objects):
        yield location.format(i), obj, None


def read_items(items: Iterable[tuple[str, Any, str | None]], is_csv: bool = False) -> Iterator[InputWork | Reject]:
    """Every input row as an :class:`InputWork` or a :class:`Reject`, in input order, with duplicate ids refused
    (the first occurrence is kept). The set of ids seen grows with the input (about 100 bytes per work)."""
    seen: dict[str, int] = {}
    for row, (where, value, reason) in enumerate(items, start=1):
        if reason is not None:
            yield Reject(row, where, None, reason, _excerpt(value if not isinstance(value, list) else ",".join(value)))
            continue
        wid, fields, why = _list_fields(value) if is_csv else classify_object(value)
        if why is None and wid in seen:
            why = f"duplicate id (first at row {seen[wid]})"
        if why is not None:
            excerpt = value if isinstance(value, bytes | str) else orjson.dumps(value, default=str)
            yield Reject(row, where, wid, why, _excerpt(excerpt))
            continue
        seen[wid] = row
        yield InputWork(row, where, wid, fields)


def read_list(path: str | Path) -> Iterator[InputWork | Reject]:
    """Every row of the input file or folder ``path`` (module docstring) as an :class:`InputWork` or a
    :class:`Reject`. Raises ListInputError (before yielding) for a missing or unsupported input, or a CSV whose
    header has no id or title column."""
    path = Path(path)
    kind = input_kind(path)
    if kind == "csv":
        items = _csv_items(path)
        first = next(items, None)  # reads the header now: a CSV without id/title fails here, not half-way
        return read_items(_chain(first, items) if first is not None else iter(()), is_csv=True)
    return read_items(_lines_items(path) if kind == "lines" else _reader_items(path))


def _chain(first, rest):
    yield first
    yield from rest


def batches(
    items: Iterable[InputWork | Reject], size: int = BATCH_SIZE
) -> Iterator[tuple[list[InputWork], list[Reject]]]:
    """``(works, rejects)`` of ``size`` input rows at a time (the last batch may be smaller)."""
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield [x for x in chunk if isinstance(x, InputWork)], [x for x in chunk if isinstance(x, Reject)]


# ---- scoring ---------------------------------------------------------------------------------------------------------


def validation_status(bundle: StudentBundle) -> str:
    """The status of a list's scores, verbatim as the pipeline states every student output:
    ``machine_predicted_unvalidated`` (:data:`~metacan_pipeline.vocab.PREDICTION_STATUS`). A list work gets no
    decision (no quota threshold, no direct label), so no head's support gate or human validation lifts it; a
    reference-set or ungated head's scores are machine scores like the others."""
    return PREDICTION_STATUS


@dataclass(frozen=True)
class HeadColumn:
    """One head of the model version as list columns: ``<source>:<head>`` and its percentile or probability."""

    source: str
    head: str
    categorical: bool

    @property
    def name(self) -> str:
        return f"{self.source}:{self.head}"

    @property
    def second(self) -> str:
        return f"{self.name}:{'probability' if self.categorical else 'percentile'}"


def scores_model_version(storage: MetacanStorage) -> str | None:
    """The model version the current ``student_scores`` were written with (``predictions``' model version), else
    the one of ``student_heads``, else None."""
    for table in ("predictions", "student_heads"):
        if storage.has_table(table):
            path = sql_literal(str(storage.table_dir(table) / "*.parquet"))
            with duckdb.connect() as con:
                row = con.execute(
                    f"SELECT model_version FROM read_parquet({path}) WHERE model_version IS NOT NULL LIMIT 1"
                ).fetchone()
            if row is not None:
                return row[0]
    return None


def registered_versions(storage: MetacanStorage) -> list[str]:
    """Every model version in ``model_versions``, newest first (none without a catalog)."""
    if not storage.duckdb_path.exists():
        return []
    with storage.connect(read_only=True) as con:
        try:
            return [
                r[0]
                for r in con.execute("SELECT model_version FROM model_versions ORDER BY created_at DESC").fetchall()
            ]
        except duckdb.CatalogException:  # a catalog without the table: nothing registered
            return []


def frame_quantiles(storage: MetacanStorage, heads: list[HeadColumn]) -> dict[str, np.ndarray]:
    """Per binary head column name, the frame's ``student_scores`` quantiles at :data:`QUANTILE_LEVELS`
    (``quantile_disc``: values the frame holds), in one DuckDB pass; heads without a scores column are left out."""
    if not storage.has_table("student_scores"):
        return {}
    path = sql_literal(str(storage.table_dir("student_scores") / "*.parquet"))
    with duckdb.connect(config={"memory_limit": "1GB"}) as con:
        con.execute("SET threads = 2")
        con.execute(f"SET temp_directory = {sql_literal(str(storage.root / 'tmp'))}")
        have = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM read_parquet({path})").fetchall()}
        wanted = [h for h in heads if not h.categorical and score_column(h.source, h.head) in have]
        if not wanted:
            return {}
        levels = "[" + ", ".join(repr(float(q)) for q in QUANTILE_LEVELS) + "]"
        cols = ", ".join(f'quantile_disc("{score_column(h.source, h.head)}", {levels})' for h in wanted)
        row = con.execute(f"SELECT {cols} FROM read_parquet({path})").fetchone()
    return {h.name: np.asarray(q, dtype=np.float64) for h, q in zip(wanted, row, strict=True) if q is not None}


def percentiles(quantiles: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Per score, 100 x the highest quantile level whose frame quantile is at or below it (0 below the frame's
    lowest score, 100 at or above its highest), rounded to 0.1."""
    k = np.searchsorted(quantiles, scores, side="right") - 1
    return np.round(np.where(k < 0, 0.0, QUANTILE_LEVELS[np.clip(k, 0, None)] * 100.0), 1)


@dataclass
class ListScorer:
    """Scores lists of works with one published model version (module docstring for the columns).

    ``quantiles``: per binary head column, the frame's score quantiles (empty: percentiles are null);
    ``percentile_note``: why percentiles are null, when they are."""

    bundle: StudentBundle
    quantiles: dict[str, np.ndarray] = field(default_factory=dict)
    percentile_note: str | None = None

    @property
    def model_version(self) -> str:
        return self.bundle.model_version

    @property
    def heads(self) -> list[HeadColumn]:
        return [
            HeadColumn(source, head, head in CATEGORICAL_TARGETS)
            for source, heads in self.bundle.heads.items()
            for head in heads
        ]

    @property
    def columns(self) -> list[str]:
        return ["id", *(c for h in self.heads for c in (h.name, h.second)), "model_version", "validation_status"]

    @property
    def schema(self) -> pa.Schema:
        fields = [pa.field("id", pa.string())]
        for h in self.heads:
            if h.categorical:
                fields += [pa.field(h.name, pa.string()), pa.field(h.second, pa.float64())]
            else:
                fields += [pa.field(h.name, pa.float64()), pa.field(h.second, pa.float64())]
        return pa.schema([*fields, pa.field("model_version", pa.string()), pa.field("validation_status", pa.string())])

    def score(self, works: list[InputWork]) -> pa.Table:
        """The output rows of ``works``, in their order (schema :attr:`schema`)."""
        n = len(works)
        frame = pa.table(
            {
                f: pa.array([w.fields.get(f) for w in works], FRAME_SCHEMA.field(f).type)
                for f in dict.fromkeys(STUDENT_FIELDS)
            }
        )
        X = transform(self.bundle.vectorizer, student_texts(frame) if n else [])
        cols: dict[str, pa.Array] = {"id": pa.array([w.id for w in works], pa.string())}
        for h in self.heads:
            s = np.asarray(self.bundle.heads[h.source][h.head].score_samples(X))
            if h.categorical:
                classes = np.array(CATEGORICAL_TARGETS[h.head], dtype=object)
                best = s.argmax(axis=1) if n else np.zeros(0, dtype=int)
                cols[h.name] = pa.array(classes[best].tolist(), pa.string())
                cols[h.second] = pa.array(s[np.arange(n), best] if n else [], pa.float64())
            else:
                s = s.astype(np.float64)
                cols[h.name] = pa.array(s, pa.float64())
                q = self.quantiles.get(h.name)
                cols[h.second] = pa.array(percentiles(q, s) if q is not None else [None] * n, pa.float64())
        cols["model_version"] = pa.array([self.model_version] * n, pa.string())
        cols["validation_status"] = pa.array([validation_status(self.bundle)] * n, pa.string())
        return pa.table(cols, schema=self.schema)


def open_scorer(storage: MetacanStorage, model_version: str | None = None, with_percentiles: bool = True) -> ListScorer:
    """The :class:`ListScorer` of ``model_version`` (default: :func:`scores_model_version`), its file checked
    against its registered SHA-256 (:func:`~.models.load_published`); percentiles from ``student_scores`` when they
    were written by that version. Raises ScoringUnavailable naming what to run when there is no model to use."""
    if not storage.duckdb_path.exists():
        raise ScoringUnavailable(
            f"no warehouse under {storage.root} (no {storage.duckdb_path.name}): run `make run` (or `metacan run`) "
            f"to train and publish a student model version first, or pass --data-dir (or set METACAN_DATA_DIR) to "
            f"the data folder of a run"
        )
    current = scores_model_version(storage)
    version = model_version or current
    if version is None:
        raise ScoringUnavailable(
            f"no student model version under {storage.root}: the tables student_heads and predictions are missing; "
            f"run `make run` (or `metacan run`) first"
        )
    try:
        bundle = load_published(storage, version)
    except ModelVersionError as exc:
        raise ScoringUnavailable(str(exc)) from None
    if bundle is None:
        known = registered_versions(storage)
        raise ScoringUnavailable(
            f"model version {version!r} is not registered in model_versions under {storage.root}; registered: "
            f"{', '.join(known) or 'none (run `make run` or `metacan run` first)'}"
        )
    scorer = ListScorer(bundle)
    if not with_percentiles:
        scorer.percentile_note = "percentiles not computed"
    elif version != current:
        scorer.percentile_note = (
            f"percentiles are null: the frame's student_scores were written by {current}, not {version}"
        )
    else:
        scorer.quantiles = frame_quantiles(storage, scorer.heads)
        if not scorer.quantiles:
            scorer.percentile_note = "percentiles are null: no student_scores table for this model version"
    return scorer


# ---- writing ---------------------------------------------------------------------------------------------------------


def output_format(path: str | Path) -> str:
    """``csv``, ``jsonl`` or ``parquet`` from ``path``'s suffix; ValueError naming the suffixes otherwise."""
    suffix = Path(path).suffix.lower()
    if suffix not in OUTPUT_FORMATS:
        raise ValueError(f"output {path}: unsupported suffix {suffix or '(none)'}; use {', '.join(OUTPUT_FORMATS)}")
    return suffix[1:]


class TableWriter:
    """Writes record tables of one schema to ``path`` as CSV, JSON Lines or Parquet (by its suffix), into a
    temporary sibling that :meth:`close` renames to ``path`` (:meth:`abort` removes it): a failed run leaves no
    half-written output."""

    def __init__(self, path: str | Path, schema: pa.Schema) -> None:
        self.path = Path(path)
        self.fmt = output_format(self.path)
        self.schema = schema
        self.tmp = self.path.with_name(f".{self.path.name}.tmp")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.rows = 0
        if self.fmt == "parquet":
            self._writer = pq.ParquetWriter(self.tmp, schema, compression="zstd")
        elif self.fmt == "csv":
            self._writer = pacsv.CSVWriter(self.tmp, schema)
        else:
            self._writer = open(self.tmp, "wb")  # noqa: SIM115

    def write(self, table: pa.Table) -> None:
        if self.fmt == "jsonl":
            names = table.column_names
            for values in zip(*(c.to_pylist() for c in table.columns), strict=True):
                self._writer.write(
                    orjson.dumps(dict(zip(names, values, strict=True)), option=orjson.OPT_APPEND_NEWLINE)
                )
        else:
            self._writer.write_table(table) if self.fmt == "parquet" else self._writer.write(table)
        self.rows += table.num_rows

    def close(self) -> None:
        self._writer.close()
        self.tmp.replace(self.path)

    def abort(self) -> None:
        try:
            self._writer.close()
        finally:
            self.tmp.unlink(missing_ok=True)


def rejects_path(out: str | Path) -> Path:
    """Where the rejected rows of ``out`` go: ``<out>.rejects.csv`` beside it."""
    out = Path(out)
    return out.with_name(out.name + ".rejects.csv")


def rejects_table(rejects: list[Reject]) -> pa.Table:
    return pa.Table.from_pylist([r.__dict__ for r in rejects], schema=REJECT_SCHEMA)


@dataclass
class ScoreResult:
    """What :func:`score_file` did: works written, rejected rows, where they went."""

    works: int
    rejects: int
    out: Path
    rejects_file: Path | None
    model_version: str
    percentile_note: str | None


def score_file(
    scorer: ListScorer,
    items: Iterable[InputWork | Reject],
    out: str | Path,
    batch_size: int = BATCH_SIZE,
    on_reject=None,
    progress: bool = True,
) -> ScoreResult:
    """Score ``items`` (:func:`read_list`) into ``out`` batch by batch (memory: one batch), and the rejected rows into
    :func:`rejects_path` (removed when nothing is rejected, so an old file cannot mislead); ``on_reject(reject)`` is
    called for each. When no row is usable ``out`` is not written (``works`` is 0)."""
    from tqdm import tqdm

    writer = TableWriter(out, scorer.schema)
    rej_path = rejects_path(out)
    rej_writer: TableWriter | None = None
    n_rejects = 0
    bar = tqdm(unit="works", desc="metacan score", disable=None if progress else True, mininterval=1.0)
    try:
        for works, rejects in batches(items, batch_size):
            if rejects:
                if rej_writer is None:
                    rej_writer = TableWriter(rej_path, REJECT_SCHEMA)
                rej_writer.write(rejects_table(rejects))
                n_rejects += len(rejects)
                for r in rejects:
                    if on_reject is not None:
                        on_reject(r)
            if works:
                writer.write(scorer.score(works))
            bar.update(len(works) + len(rejects))
    except BaseException:
        writer.abort()
        if rej_writer is not None:
            rej_writer.abort()
        raise
    finally:
        bar.close()
    if writer.rows:
        writer.close()
    else:
        writer.abort()
    if rej_writer is not None:
        rej_writer.close()
    else:
        rej_path.unlink(missing_ok=True)
    return ScoreResult(
        writer.rows,
        n_rejects,
        Path(out),
        rej_path if rej_writer is not None else None,
        scorer.model_version,
        scorer.percentile_note,
    )
