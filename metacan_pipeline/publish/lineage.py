"""Per-work lineage: what produced each number a work's page shows (SPEC section 9, "Per work, lineage").

One row per frame work in the warehouse table ``work_lineage`` (a DuckDB view of the same name), built in
DuckDB from tables the pipeline already keeps:

- the frame build (``frame.frame_build_id``) and the Dagster run that first produced it (``frame_builds``);
- the input the record came from: an input file (a snapshot part, a JSON page) or an archived OpenAlex API
  response (``source_file`` under ``api/``), its locator (line or JSON path), and the ``frame_parts`` run that
  read it (``frame_build_manifest.run_id``);
- the entity-list and lexicon versions the routes were computed with;
- every teacher call behind the work's direct labels (teacher, model, prompt version and SHA-256, the
  request hash, the call time, the call id, the run, the archived reply's file and line), from the
  ``direct_labels_<teacher>`` tables joined to ``teacher_calls``; rule labels (no call) and imported labels
  appear with ``call_id`` null and their ``source``;
- the student ``model_version`` of the prediction and the run that trained it (``model_versions.run_id``);
- the machine-score round shown and the run that computed it (``machine_rounds``).

Run ids name the run that produced the content, not the last run that re-materialized an unchanged asset,
so an unchanged work keeps an unchanged lineage (and its page is not rewritten). Which other runs produced the same
frame build (a re-run over unchanged inputs, such as the sensor's ``frame_build`` run after a ``metacan run``) is
read when the lineage is shown (:func:`build_runs`, from ``frame_build_runs``), never stored in it.

Works are named as ``metacan lineage`` and the ``work_lineage_report`` job take them (:func:`resolve_works`): an
OpenAlex work id (``W2741809807``, ``w2741809807`` or ``https://openalex.org/W2741809807``) or a DOI (``10.x/y``,
``doi:10.x/y`` or ``https://doi.org/10.x/y``, any case), looked up in the frame. A run id links to the run in the
Dagster UI (:func:`run_url`) only when a UI address is configured (``METACAN_DAGSTER_UI_URL``).
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import duckdb

from ..openalex.ids import short_id
from ..storage import MetacanStorage, id_ranges, scratch_path, sql_literal

#: Empty stand-ins for tables an older or partial data folder may not have yet (DuckDB catalog tables).
_OPTIONAL_TABLES = {
    "frame_builds": "frame_build_id VARCHAR, run_id VARCHAR",
    "frame_build_manifest": "source_file VARCHAR, run_id VARCHAR",
    "teacher_calls": "call_id VARCHAR, request_hash VARCHAR, created_at TIMESTAMP, archive_path VARCHAR, archive_line BIGINT",
    "predictions": "id VARCHAR, model_version VARCHAR",
    "model_versions": "model_version VARCHAR, run_id VARCHAR",
    "machine_scores": "id VARCHAR, rounds_run INTEGER, validation_status VARCHAR",
    "machine_rounds": "round INTEGER, run_id VARCHAR",
}
_LABEL_COLUMNS = (
    "work_id, teacher, model, prompt_version, prompt_sha, record_view, status, source, call_id, run_id, created_at"
)


def lineage_sql(present: set[str], label_tables: list[str], within: str = "true") -> tuple[list[str], str]:
    """``(set-up statements, the SELECT that yields LINEAGE_SCHEMA rows ordered by id)``; ``present`` = the
    relations in the catalog (the set-up makes empty stand-ins for the optional ones that are absent); ``within``: a
    condition on ``{key}`` (a range of work ids, :func:`metacan_pipeline.storage.id_ranges`), applied to the frame and
    to the labels."""
    missing = [f"CREATE OR REPLACE TEMP TABLE {t} ({cols})" for t, cols in _OPTIONAL_TABLES.items() if t not in present]
    labels = " UNION ALL ".join(f"SELECT {_LABEL_COLUMNS} FROM {t}" for t in label_tables if t in present)
    if not labels:
        labels = f"SELECT {', '.join('NULL::TIMESTAMP' if c == 'created_at' else 'NULL::VARCHAR' for c in _LABEL_COLUMNS.split(', '))} WHERE false"
    query = f"""
    WITH labels AS ({labels}),
    calls AS (
      SELECT l.work_id, list(struct_pack(
          teacher := l.teacher, model := l.model, prompt_version := l.prompt_version, prompt_sha := l.prompt_sha,
          record_view := l.record_view, label_status := l.status, source := l.source, call_id := l.call_id,
          request_hash := c.request_hash,
          called_at := strftime(coalesce(c.created_at, l.created_at), '%Y-%m-%dT%H:%M:%SZ'),
          run_id := l.run_id,
          archive := CASE WHEN c.archive_path IS NULL THEN NULL ELSE c.archive_path || '#L' || c.archive_line END)
        ORDER BY l.teacher, l.created_at) AS teacher_calls
      FROM labels l LEFT JOIN teacher_calls c ON c.call_id = l.call_id
      WHERE {within.replace("{key}", "l.work_id")}
      GROUP BY l.work_id)
    SELECT f.id, f.frame_build_id, b.run_id AS frame_run_id,
           CASE WHEN f.source_file LIKE 'api/%' THEN 'archived_api_response' ELSE 'input_file' END AS input_kind,
           f.source_file, f.source_locator, m.run_id AS part_run_id, f.entity_list_versions, f.lexicon_version,
           coalesce(k.teacher_calls, []) AS teacher_calls,
           p.model_version, mv.run_id AS student_run_id,
           ms.rounds_run::INTEGER AS machine_round, r.run_id AS machine_scores_run_id, ms.validation_status AS machine_validation_status
    FROM frame f
    LEFT JOIN frame_builds b USING (frame_build_id)
    LEFT JOIN (SELECT source_file, any_value(run_id) AS run_id FROM frame_build_manifest GROUP BY ALL) m USING (source_file)
    LEFT JOIN calls k ON k.work_id = f.id
    LEFT JOIN predictions p ON p.id = f.id
    LEFT JOIN model_versions mv ON mv.model_version = p.model_version
    LEFT JOIN machine_scores ms ON ms.id = f.id
    LEFT JOIN machine_rounds r ON r.round = ms.rounds_run
    WHERE {within.replace("{key}", "f.id")}
    ORDER BY f.id"""
    return missing, query


#: DuckDB's memory for the lineage query, spilling beyond it (the catalog connection has DuckDB's default, 80% of the
#: machine's memory, which a 4.3M-work frame's lineage query would take).
LINEAGE_MEMORY = "1GB"
#: Frame works whose lineage is built at a time: the per-work lists of teacher calls did not fit in LINEAGE_MEMORY
#: for the whole 4.3M-work frame, nor for 500,000 of its works; 100,000 did (4.8 s).
LINEAGE_RANGE_WORKS = 100_000


def build_lineage(storage: MetacanStorage, label_tables: list[str], range_works: int = LINEAGE_RANGE_WORKS) -> int:
    """(Re)write the ``work_lineage`` table from the frame and the tables above; returns its row count.

    ``label_tables`` are the direct-label tables to read (``direct_labels_<teacher>``, absent ones
    skipped). DuckDB streams each range of ``range_works`` ids (:func:`metacan_pipeline.storage.id_ranges`) to its own Parquet file
    (``COPY``), in id order, under :data:`LINEAGE_MEMORY`, and the folder replaces the previous table atomically, so
    memory stays flat on a frame of millions of works. Raises FileNotFoundError when the frame has not been
    materialized.
    """
    storage.require("frame")
    storage.warehouse.mkdir(parents=True, exist_ok=True)
    tmp = scratch_path(storage.warehouse, ".work_lineage.tmp-")
    tmp.mkdir()
    n = 0
    try:
        with storage.connect() as con:
            con.execute(f"SET memory_limit = {sql_literal(LINEAGE_MEMORY)}")  # else 80% of RAM: 17 GB at 4.3M works
            present = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
            setup, _ = lineage_sql(present, label_tables)
            for stmt in setup:
                con.execute(stmt)
            for k, within in enumerate(id_ranges(con, "frame", range_works)):
                _, query = lineage_sql(present, label_tables, within)
                target = sql_literal(str(tmp / f"part-{k:05d}.parquet"))
                n += con.execute(f"COPY ({query}) TO {target} (FORMAT parquet, COMPRESSION zstd)").fetchone()[0]
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    storage.adopt_table("work_lineage", tmp)
    return n


def lineage_of(con: duckdb.DuckDBPyConnection, work_id: str) -> dict[str, Any] | None:
    """The ``work_lineage`` row of one work as a dict (teacher calls as a list of dicts), or None."""
    cur = con.execute("SELECT * FROM work_lineage WHERE id = ?", [work_id])
    row = cur.fetchone()
    if row is None:
        return None
    return dict(zip([d[0] for d in cur.description], row, strict=False))


class LineageNotBuilt(LookupError):
    """The database holds no ``work_lineage`` table yet (``work_records`` was never materialized there)."""


def lineages_with_pages(
    con: duckdb.DuckDBPyConnection, work_ids: list[str]
) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """``(work id, lineage)`` for each of ``work_ids`` in order, one at a time: its :func:`lineage_of` row with, when
    ``page_manifest`` holds the work, its page (``page_path``, ``rendered_at``, ``page_run_id``); None for a work
    that is not in the frame. Raises :class:`LineageNotBuilt` when ``con`` has no ``work_lineage`` table."""
    present = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if "work_lineage" not in present:
        raise LineageNotBuilt("no work_lineage table")
    for wid in work_ids:
        row = lineage_of(con, wid)
        if row is not None and "page_manifest" in present:
            page = con.execute(
                "SELECT page_path, rendered_at, run_id FROM page_manifest WHERE id = ?", [wid]
            ).fetchone()
            if page:
                row.update(page_path=page[0], rendered_at=str(page[1]), page_run_id=page[2])
        yield wid, row


def lineage_record(row: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``lineage`` object of a published record (the row without ``id``, JSON-ready)."""
    if row is None:
        return None
    out = {k: v for k, v in row.items() if k != "id"}
    out["teacher_calls"] = [dict(c) for c in out.get("teacher_calls") or []]
    return json.loads(json.dumps(out, default=str))


# ---- naming works: OpenAlex ids and DOIs --------------------------------------------------------------------------

#: A DOI as a reader pastes it: bare (``10.1234/abc``), ``doi:``-prefixed or as a doi.org URL.
_DOI_RE = re.compile(r"(?:doi:\s*|https?://(?:dx\.)?doi\.org/)?(10\.[0-9]{4,9}/\S+)", re.IGNORECASE)
#: The SQL that turns the frame's ``doi`` (OpenAlex's ``https://doi.org/...``) into :func:`doi_of`'s form.
_FRAME_DOI_SQL = r"lower(regexp_replace(doi, '^https?://(dx\.)?doi\.org/', ''))"


def doi_of(value: str) -> str | None:
    """The DOI ``value`` names, lower case (DOIs are case-insensitive): ``"https://doi.org/10.1234/ABC"`` ->
    ``"10.1234/abc"``; None when ``value`` is not a DOI."""
    m = _DOI_RE.fullmatch(value.strip()) if isinstance(value, str) else None
    return m.group(1).lower() if m else None


@dataclass
class ResolvedWorks:
    """What :func:`resolve_works` made of the values given: ``works``, ``(value, work id)`` in the order given (a DOI
    that several frame works carry gives each); ``not_ids``, values that are neither a work id nor a DOI;
    ``not_in_frame``, values whose work is not in the frame."""

    works: list[tuple[str, str]] = field(default_factory=list)
    not_ids: list[str] = field(default_factory=list)
    not_in_frame: list[str] = field(default_factory=list)

    @property
    def unknown(self) -> list[str]:
        """Every value that names no frame work, in the order given."""
        return self.not_ids + self.not_in_frame


def resolve_works(con: duckdb.DuckDBPyConnection, values: list[str]) -> ResolvedWorks:
    """The frame works ``values`` name: OpenAlex work ids in any of their forms (:func:`.short_id`; ``W`` ids only)
    and DOIs (:func:`doi_of`), each looked up in ``work_lineage`` (ids) or the frame's ``doi`` column (DOIs; only works
    that ``work_lineage`` holds count as found).
    Raises :class:`LineageNotBuilt` when ``con`` has no ``work_lineage`` table."""
    present = _relations(con)
    if "work_lineage" not in present:
        raise LineageNotBuilt("no work_lineage table")
    out = ResolvedWorks()
    dois: dict[str, list[str]] = {}
    named: list[tuple[str, str, str]] = []  # (value, kind, key)
    for value in values:
        sid = short_id(value)
        if sid is not None and sid.startswith("W"):
            named.append((value, "id", sid))
        elif (doi := doi_of(value)) is not None:
            named.append((value, "doi", doi))
            dois[doi] = []
        else:
            out.not_ids.append(value)
    if dois and "frame" in present:  # a work of a newer frame than work_lineage's has no lineage yet: not found
        rows = con.execute(
            f"SELECT {_FRAME_DOI_SQL} AS d, id FROM frame WHERE doi IS NOT NULL AND d IN (SELECT unnest(?)) "
            "AND id IN (SELECT id FROM work_lineage) ORDER BY id",
            [list(dois)],
        ).fetchall()
        for d, wid in rows:
            dois[d].append(wid)
    ids = [key for _, kind, key in named if kind == "id"]
    known = (
        {r[0] for r in con.execute("SELECT id FROM work_lineage WHERE id IN (SELECT unnest(?))", [ids]).fetchall()}
        if ids
        else set()
    )
    for value, kind, key in named:
        found = [key] if kind == "id" and key in known else dois.get(key, []) if kind == "doi" else []
        if found:
            out.works.extend((value, wid) for wid in found)
        else:
            out.not_in_frame.append(value)
    return out


def _relations(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}


# ---- runs: which produced the same build, and their address in the Dagster UI -------------------------------------


def build_runs(con: duckdb.DuckDBPyConnection, build_ids: list[str]) -> dict[str, list[str]]:
    """Every run that produced each of ``build_ids`` (a frame build id), the first first: the run ``frame_builds``
    names, then the others of ``frame_build_runs`` in the order they built it. Two runs or more: they produced the same
    build (a build id hashes every input of the merge, :func:`metacan_pipeline.frame.merge.frame_build_id`). A build
    of a data folder older than ``frame_build_runs`` lists its first run only."""
    present = _relations(con)
    wanted = sorted({b for b in build_ids if b})
    runs: dict[str, list[str]] = {b: [] for b in wanted}
    if not wanted:
        return runs
    parts = []
    if "frame_builds" in present:
        parts.append("SELECT frame_build_id, run_id, 0 AS k, built_at FROM frame_builds")
    if "frame_build_runs" in present:
        parts.append("SELECT frame_build_id, run_id, 1 AS k, built_at FROM frame_build_runs")
    if not parts:
        return runs
    rows = con.execute(
        f"SELECT frame_build_id, run_id FROM ({' UNION ALL '.join(parts)}) "
        "WHERE frame_build_id IN (SELECT unnest(?)) AND run_id IS NOT NULL "
        "ORDER BY frame_build_id, k, built_at, run_id",
        [wanted],
    ).fetchall()
    for build, run in rows:
        if run not in runs[build]:
            runs[build].append(run)
    return runs


def same_build_sentence(build_id: str | None, runs: list[str], show: Callable[[str], str] = str) -> str | None:
    """What the lineage says when two runs or more produced the frame build ``build_id`` (None for fewer): which runs,
    that they made one build, and which one the lineage names; ``show`` writes a run id (with its link, say)."""
    if not build_id or len(runs) < 2:
        return None
    shown = [show(r) for r in runs]
    return (
        f"Runs {', '.join(shown[:-1])} and {shown[-1]} produced the same frame build {build_id} (one build id: the "
        f"same parts, entity lists, lexicon, admission rule and merged ids); the lineage names the first, {shown[0]}, "
        f"and the Dagster UI shows each of them materializing frame with data version {build_id}."
    )


#: What a run id must be to become a link: a Dagster run id (a UUID); anything else (a placeholder, a run id of
#: another orchestrator) stays text.
_RUN_ID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def run_url(ui_url: str | None, run_id: str | None) -> str | None:
    """The run's page in the Dagster UI, ``<ui_url>/runs/<run_id>`` (``ui_url``:
    :func:`metacan_pipeline.settings.dagster_ui_url`, or ``""`` for a link relative to the UI's root, used where the
    link is shown inside the UI); None when no UI address is configured (``ui_url`` None) or ``run_id`` is not a
    Dagster run id (a UUID)."""
    if ui_url is None or not isinstance(run_id, str) or not _RUN_ID_RE.fullmatch(run_id):
        return None
    return f"{ui_url.rstrip('/')}/runs/{run_id}"
