"""The frame's authors and institutions (SPEC section 2: names are data): ``work_authors`` (every authorship of every
frame work, from the frame's ``authorships``), and from it ``authors``, ``institutions`` and
``author_institution_years``.

Names, ORCIDs and RORs are copied as OpenAlex gives them; nothing is inferred from a name. An authorship whose
author id is missing or invalid stays in ``work_authors`` with its name and ``author_id_status`` saying so; only
the author tables need an id. ``work_authors`` is written one range of work ids at a time
(:func:`metacan_pipeline.storage.id_ranges`) under :data:`AUTHORS_MEMORY`, so memory stays flat on a frame of
millions of works; the other tables are DuckDB aggregations that spill to disk.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass

import pyarrow as pa

from ..storage import MetacanStorage, id_ranges, scratch_path, sql_literal
from ..tables.frame import (
    AUTHOR_INSTITUTION_YEARS_SCHEMA,
    AUTHORS_SCHEMA,
    INSTITUTIONS_SCHEMA,
    WORK_AUTHORS_SCHEMA,
)
from ..tables.table import SQL_TYPES

#: DuckDB's memory for the author tables (spilling beyond it), as for the lineage.
AUTHORS_MEMORY = "1GB"
#: Frame works whose authorships are unnested at a time.
AUTHORS_RANGE_WORKS = 200_000

_WORK_AUTHORS_SQL = """
SELECT f.id AS work_id, a.position AS author_position, a.author_id, a.author_id_status, a.orcid,
       a.name AS author_name, a.is_canadian,
       list_transform(list_filter(a.institutions, i -> i.id IS NOT NULL), i -> i.id) AS institution_ids,
       f.publication_year
FROM (SELECT id, publication_year, unnest(authorships) AS a FROM frame WHERE {within}) f
ORDER BY work_id, author_position
"""

_AUTHORS_SQL = """
SELECT w.author_id,
       arg_max(w.orcid, (f.updated_date, w.work_id)) FILTER (WHERE w.orcid IS NOT NULL) AS orcid,
       arg_max(w.author_name, (f.updated_date, w.work_id)) AS display_name,
       bool_or(w.is_canadian) AS is_canadian,
       count(DISTINCT w.work_id) AS works_in_frame,
       min(w.publication_year) AS first_year,
       max(w.publication_year) AS last_year
FROM work_authors_new w JOIN frame f ON f.id = w.work_id
WHERE w.author_id IS NOT NULL
GROUP BY w.author_id ORDER BY w.author_id
"""

_INSTITUTIONS_SQL = """
SELECT i.id AS institution_id,
       arg_max(i.ror, (updated_date, work_id)) FILTER (WHERE i.ror IS NOT NULL) AS ror,
       arg_max(i.name, (updated_date, work_id)) AS display_name,
       arg_max(upper(i.country_code), (updated_date, work_id)) FILTER (WHERE i.country_code IS NOT NULL) AS country_code,
       count(DISTINCT work_id) AS works_in_frame,
       min(publication_year) AS first_year,
       max(publication_year) AS last_year
FROM (SELECT id AS work_id, updated_date, publication_year, unnest(flatten(list_transform(authorships, a -> a.institutions))) AS i
      FROM frame)
WHERE i.id IS NOT NULL
GROUP BY i.id ORDER BY i.id
"""

#: A Canadian institution of an authorship: its country code is CA or it is on the pinned list (the authorship's own
#: ``is_canadian`` test, :func:`metacan_pipeline.frame.routes.is_canadian_institution`).
_AUTHOR_INSTITUTION_YEARS_SQL = """
SELECT author_id, i.id AS institution_id, publication_year, count(DISTINCT work_id) AS works_in_frame
FROM (SELECT f.id AS work_id, f.publication_year, a.author_id, unnest(a.institutions) AS i
      FROM (SELECT id, publication_year, unnest(authorships) AS a FROM frame) f
      WHERE a.author_id IS NOT NULL AND a.is_canadian)
WHERE i.id IS NOT NULL AND (upper(i.country_code) = 'CA' OR i.id IN (SELECT id FROM pinned_institutions))
GROUP BY ALL ORDER BY author_id, institution_id, publication_year
"""


@dataclass(frozen=True)
class AuthorTables:
    """Row counts of the tables written, and the authorships without a valid author id (kept, by name only)."""

    work_authors: int
    authors: int
    institutions: int
    author_institution_years: int
    missing_author_id: int
    invalid_author_id: int


def build_author_tables(
    storage: MetacanStorage, pinned_institutions: list[str], range_works: int = AUTHORS_RANGE_WORKS
) -> AuthorTables:
    """(Re)write ``work_authors``, ``authors``, ``institutions`` and ``author_institution_years`` from the frame.

    ``pinned_institutions``: the short ids of the pinned Canadian institution list (an institution on it is
    Canadian whatever its country code). Each table replaces the previous one atomically. Raises
    FileNotFoundError naming ``frame`` when it has not been materialized.
    """
    storage.require("frame")
    storage.warehouse.mkdir(parents=True, exist_ok=True)
    folders = {name: scratch_path(storage.warehouse, f".{name}.tmp-") for name in _OUTPUTS}
    for folder in folders.values():
        folder.mkdir()
    counts: dict[str, int] = dict.fromkeys(_OUTPUTS, 0)
    try:
        with storage.connect() as con:
            con.execute(f"SET memory_limit = {sql_literal(AUTHORS_MEMORY)}")
            con.register("pinned_institutions", pa.table({"id": pa.array(pinned_institutions, pa.string())}))
            for k, within in enumerate(id_ranges(con, "frame", range_works)):
                query = _WORK_AUTHORS_SQL.format(within=within.format(key="id"))
                counts["work_authors"] += _copy(con, query, folders["work_authors"], k, WORK_AUTHORS_SCHEMA)
            glob = sql_literal(str(folders["work_authors"] / "*.parquet"))
            con.execute(f"CREATE OR REPLACE TEMP VIEW work_authors_new AS SELECT * FROM read_parquet({glob})")
            counts["authors"] = _copy(con, _AUTHORS_SQL, folders["authors"], 0, AUTHORS_SCHEMA)
            counts["institutions"] = _copy(con, _INSTITUTIONS_SQL, folders["institutions"], 0, INSTITUTIONS_SCHEMA)
            counts["author_institution_years"] = _copy(
                con,
                _AUTHOR_INSTITUTION_YEARS_SQL,
                folders["author_institution_years"],
                0,
                AUTHOR_INSTITUTION_YEARS_SCHEMA,
            )
            missing, invalid = con.execute(
                "SELECT count(*) FILTER (WHERE author_id_status = 'missing'), "
                "count(*) FILTER (WHERE author_id_status = 'invalid') FROM work_authors_new"
            ).fetchone()
            con.execute("DROP VIEW work_authors_new")
            con.unregister("pinned_institutions")
    except BaseException:
        for folder in folders.values():
            shutil.rmtree(folder, ignore_errors=True)
        raise
    for name, folder in folders.items():
        storage.adopt_table(name, folder)
    return AuthorTables(**counts, missing_author_id=missing, invalid_author_id=invalid)


_OUTPUTS = ("work_authors", "authors", "institutions", "author_institution_years")


def _copy(con, query: str, folder, k: int, schema) -> int:
    """``COPY`` the rows of ``query``, cast to the catalog's column types in its order, to ``folder/part-<k>``."""
    cols = ", ".join(f"CAST({f.name} AS {SQL_TYPES[f.type]}) AS {f.name}" for f in schema)
    target = sql_literal(str(folder / f"part-{k:05d}.parquet"))
    return con.execute(
        f"COPY (SELECT {cols} FROM ({query})) TO {target} (FORMAT parquet, COMPRESSION zstd)"
    ).fetchone()[0]
