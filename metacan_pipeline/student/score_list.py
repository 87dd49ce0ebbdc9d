"""Scoring any list of works with a published student model version (``metacan score``, ``POST /api/v1/score``).

Input: :mod:`.list_input` (:func:`~.list_input.read_list`: a CSV or JSON Lines of ``id, title`` rows, or OpenAlex
work records in any shape the frame's reader takes), every row an :class:`~.list_input.InputWork` or a
:class:`~.list_input.Reject`, in input order; a frame work reads the same in a list as in the frame.

Output (:class:`ListScorer`): one row per work, in input order, with the columns :attr:`ListScorer.columns`:

- ``id`` (an OpenAlex work id in its short form, ``W123``; any other id as given) and ``title`` (the title the
  scores were computed from, as plain text after the markup-to-text step), so a reader checks the row is the work;
- per source of the model version (``bundle.heads``: the role teachers, and reference sets when the version has
  them) and binary head: ``<source>:<head>`` (the head's score in [0, 1]) and ``<source>:<head>:percentile`` (the
  share of the current frame's works, in per cent, whose ``student_scores`` score of that head is at or below this
  score, to 0.1 point: the highest of 1,001 quantile levels whose frame quantile is at or below it; null when the
  frame's scores are of another model version or absent); both null in every row for a head that gives no score
  (its training labels held one class: :attr:`ListScorer.no_score` says why);
- per source and categorical head: ``<source>:<head>`` (the most probable class) and ``<source>:<head>:probability``;
- ``model_version`` and ``validation_status`` (:func:`validation_status`).

A list work carries scores only: no quota threshold, no decision and no census direct label, so none of the frame's
candidate, consensus or human-validation statuses applies to it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from ..storage import MetacanStorage, sql_literal
from ..tables.cells import defused_table
from ..tables.frame import FRAME_SCHEMA
from ..tables.student import score_list_schema
from ..vocab import CATEGORICAL_TARGETS, PREDICTION_STATUS
from .features import STUDENT_FIELDS, transform
from .list_input import BATCH_SIZE, REJECT_SCHEMA, InputWork, Reject, batches
from .models import ModelVersionError, StudentBundle, load_published
from .scoring import score_column, student_texts

#: Quantile levels of the frame's scores behind a percentile: 0, 0.001, ..., 1.
QUANTILE_LEVELS = np.linspace(0.0, 1.0, 1001)
OUTPUT_FORMATS = (".csv", ".jsonl", ".parquet")


class ScoringUnavailable(RuntimeError):
    """No published model version to score with (no warehouse, no model version, or its file is missing or altered)."""


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
    def no_score(self) -> dict[str, str]:
        """``{<source>:<head>: reason}`` of the binary heads that give no score (null score and percentile in every
        row): heads whose training labels held one class or none, e.g. "no positive direct label to learn from
        (0 positives of 81 labels)" (:attr:`~.heads.BinaryHead.no_score_reason`)."""
        out = {}
        for h in self.heads:
            reason = getattr(self.bundle.heads[h.source][h.head], "no_score_reason", None)
            if not h.categorical and reason is not None:
                out[h.name] = reason
        return out

    def no_score_lines(self) -> list[str]:
        """One line per head of :attr:`no_score`: ``<source>:<head>: no score: <reason>``."""
        return [f"{name}: no score: {reason}" for name, reason in self.no_score.items()]

    @property
    def columns(self) -> list[str]:
        return [
            "id",
            "title",
            *(c for h in self.heads for c in (h.name, h.second)),
            "model_version",
            "validation_status",
        ]

    @property
    def schema(self) -> pa.Schema:
        return score_list_schema([(h.name, h.categorical) for h in self.heads])

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
        cols: dict[str, pa.Array] = {
            "id": pa.array([w.id for w in works], pa.string()),
            "title": pa.array([w.fields.get("title_text") for w in works], pa.string()),
        }
        for h in self.heads:
            s = np.asarray(self.bundle.heads[h.source][h.head].score_samples(X))
            if h.categorical:
                classes = np.array(CATEGORICAL_TARGETS[h.head], dtype=object)
                best = s.argmax(axis=1) if n else np.zeros(0, dtype=int)
                cols[h.name] = pa.array(classes[best].tolist(), pa.string())
                cols[h.second] = pa.array(s[np.arange(n), best] if n else [], pa.float64())
            elif h.name in self.no_score:
                # a head that never saw both classes ranks nothing: no score and no percentile, never its rate
                cols[h.name] = pa.nulls(n, pa.float64())
                cols[h.second] = pa.nulls(n, pa.float64())
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
        elif self.fmt == "parquet":
            self._writer.write_table(table)
        else:  # a spreadsheet opens it: a title starting with "=" stays text (tables.cells)
            self._writer.write(defused_table(table))
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
    """Score ``items`` (:func:`~.list_input.read_list`) into ``out`` batch by batch (memory: one batch), and the rejected rows into
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
