"""Reading the Crossref Labs Retraction Watch CSV into notices, and the rows it refuses into a quarantine.

The export (``retraction_watch.csv``, https://gitlab.com/crossref/retraction-watch-data and
``https://api.labs.crossref.org/data/retractionwatch``) has the header of :data:`HEADER`. Its quirks, all read by
DuckDB's ``read_csv`` with declared column types (never by hand):

- dates are ``M/D/YYYY 0:00`` (``8/16/2023 0:00``), read with the format ``%m/%d/%Y %H:%M``;
- ``Reason`` holds ``;``-separated reasons, each starting with ``+`` (``+Concerns/Issues About Data;+Unreliable
  Results;``); list fields (``Subject``, ``ArticleType``, ``URLS``) end with ``;``;
- ``RetractionPubMedID`` and ``OriginalPaperPubMedID`` are ``0`` where there is none; DOIs come in mixed case,
  sometimes with a ``https://doi.org/`` prefix, and ``unavailable`` where there is none;
- quoted cells may hold commas and line breaks.

A row DuckDB cannot read (a date that is no date, a ``RetractionNature`` outside the four, a Record ID that is not
a number, a wrong number of cells, bytes that are not UTF-8) goes to the quarantine with its row number (1 is the
header; a row whose quoted cells span lines counts once) and DuckDB's reason: nothing is dropped silently.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa

from ..storage import sql_literal
from ..tables.retraction import NOTICES_SCHEMA, QUARANTINE_SCHEMA
from ..vocab import RETRACTION_NATURES

#: The header of the Crossref Labs export, in order.
HEADER: tuple[str, ...] = (
    "Record ID",
    "Title",
    "Subject",
    "Institution",
    "Journal",
    "Publisher",
    "Country",
    "Author",
    "URLS",
    "ArticleType",
    "RetractionDate",
    "RetractionDOI",
    "RetractionPubMedID",
    "OriginalPaperDate",
    "OriginalPaperDOI",
    "OriginalPaperPubMedID",
    "RetractionNature",
    "Reason",
    "Paywalled",
    "Notes",
)

#: The columns read with a type other than text: a cell the type refuses sends its row to the quarantine.
_TYPES = {
    "Record ID": "BIGINT",
    "RetractionDate": "TIMESTAMP",
    "RetractionPubMedID": "BIGINT",
    "OriginalPaperDate": "TIMESTAMP",
    "OriginalPaperPubMedID": "BIGINT",
    "RetractionNature": "rw_nature",
}
#: The export's date format (``8/16/2023 0:00``).
DATE_FORMAT = "%m/%d/%Y %H:%M"
#: The longest row DuckDB accepts (a few rows carry long notes).
MAX_LINE_BYTES = 8_000_000

#: A DOI in the form two sources are compared in: lower case, without a ``https://doi.org/``, ``http://dx.doi.org/``
#: or ``doi:`` prefix; NULL unless it starts with ``10.`` and has a ``/`` (``unavailable``, empty cells). DOIs are
#: case-insensitive (DOI Handbook, section 2.4). The frame's side of the join uses the same expression.
DOI_SQL = (
    "CASE WHEN regexp_matches(lower(regexp_replace(trim({x}), '^(https?://(dx[.])?doi[.]org/|doi:[ ]*)', '', 'i')), "
    "'^10[.][^/]+/.') THEN lower(regexp_replace(trim({x}), '^(https?://(dx[.])?doi[.]org/|doi:[ ]*)', '', 'i')) END"
)


class RetractionWatchFileError(ValueError):
    """A file that is not a Retraction Watch export (its header lacks the columns the notices are read from)."""


def doi_sql(expr: str) -> str:
    """:data:`DOI_SQL` over the SQL expression ``expr``."""
    return DOI_SQL.format(x=expr)


def file_columns(path: Path) -> list[str]:
    """The header of the CSV at ``path`` (plain or gzip), read by pandas from its first row alone (DuckDB's sniffer
    would guess the number of columns from the rows, where a malformed row may mislead it); an empty header cell is
    named ``Unnamed: <n>``."""
    import pandas as pd  # imported here: only the Retraction Watch asset reads a header this way

    return [str(c) for c in pd.read_csv(path, nrows=0, dtype=str, encoding_errors="replace").columns]


def read_columns(names: list[str], path: Path) -> dict[str, str]:
    """The ``columns`` argument of ``read_csv`` for a file with the header ``names``: :data:`HEADER`'s columns with
    their types, any further column (an empty trailing header cell) as text. Raises
    :class:`RetractionWatchFileError` naming the file and the missing columns when a column of :data:`HEADER` is
    absent."""
    missing = [c for c in HEADER if c not in names]
    if missing:
        raise RetractionWatchFileError(
            f"{path} is not a Retraction Watch export: its header lacks {', '.join(missing)} (found: "
            f"{', '.join(names[:25])}); give the Crossref Labs CSV (retraction_watch.csv) in "
            "METACAN_RETRACTION_WATCH_FILE or METACAN_RETRACTION_WATCH_URL"
        )
    return {n: _TYPES.get(n, "VARCHAR") for n in names}


def _read_sql(columns: dict[str, str]) -> str:
    # a header name is the file's text: quoted as a SQL string literal (the types are this module's own)
    spec = "{" + ", ".join(f"{sql_literal(name)}: '{typ}'" for name, typ in columns.items()) + "}"
    return (
        "read_csv($path, header=true, auto_detect=false, delim=',', quote='\"', escape='\"', strict_mode=true, "
        f"columns={spec}, timestampformat='{DATE_FORMAT}', store_rejects=true, max_line_size={MAX_LINE_BYTES})"
    )


def read_notices(path: Path, version: str) -> tuple[pa.Table, pa.Table]:
    """The notices of the Retraction Watch CSV at ``path`` (plain or gzip) and its quarantine, as ``retraction_watch``
    (:data:`NOTICES_SCHEMA`, in Record ID order) and ``retraction_watch_quarantine`` (:data:`QUARANTINE_SCHEMA`, in
    row order) tables, each row carrying ``version``. Raises :class:`RetractionWatchFileError` for a file whose
    header is not the export's."""
    con = duckdb.connect()
    try:
        natures = ", ".join("'" + n.replace("'", "''") + "'" for n in RETRACTION_NATURES)
        con.execute(f"CREATE TYPE rw_nature AS ENUM ({natures})")
        columns = read_columns(file_columns(path), path)
        states = " ".join(f"WHEN '{n}' THEN '{s}'" for n, s in RETRACTION_NATURES.items())
        con.execute(
            f"""CREATE TEMP TABLE raw AS SELECT * FROM {_read_sql(columns)}""",
            {"path": str(path)},
        )
        notices = con.execute(
            f"""
            SELECT "Record ID" AS rw_record_id,
                   nullif(trim(Title), '') AS title,
                   nullif(trim(Journal), '') AS journal,
                   nullif(trim(Publisher), '') AS publisher,
                   CAST(RetractionNature AS VARCHAR) AS retraction_nature,
                   CASE CAST(RetractionNature AS VARCHAR) {states} END AS retraction_state,
                   list_filter(list_transform(string_split(coalesce(Reason, ''), ';'),
                                              lambda r: trim(regexp_replace(trim(r), '^[+]', ''))),
                               lambda r: r <> '') AS retraction_reasons,
                   strftime(RetractionDate, '%Y-%m-%d') AS retraction_date,
                   {doi_sql("RetractionDOI")} AS notice_doi,
                   CAST(nullif(RetractionPubMedID, 0) AS VARCHAR) AS notice_pmid,
                   strftime(OriginalPaperDate, '%Y-%m-%d') AS original_date,
                   {doi_sql("OriginalPaperDOI")} AS original_doi,
                   CAST(nullif(OriginalPaperPubMedID, 0) AS VARCHAR) AS original_pmid,
                   $version AS rw_version
            FROM raw ORDER BY rw_record_id
            """,
            {"version": version},
        ).to_arrow_table()
        quarantine = con.execute(
            """
            SELECT line,
                   nullif(trim(split_part(ltrim(csv_line, chr(13) || chr(10)), ',', 1)), '') AS rw_record_id,
                   CASE WHEN column_name IS NULL THEN error_type || ': ' || error_message
                        ELSE column_name || ': ' || error_message END AS reason,
                   left(trim(csv_line, chr(13) || chr(10)), 200) AS excerpt,
                   $version AS rw_version
            FROM reject_errors ORDER BY line, column_idx
            """,
            {"version": version},
        ).to_arrow_table()
    finally:
        con.close()
    return notices.cast(NOTICES_SCHEMA), _one_per_line(quarantine).cast(QUARANTINE_SCHEMA)


def _one_per_line(table: pa.Table) -> pa.Table:
    """One quarantine row per refused row (DuckDB may report several errors of one row): its reasons joined."""
    rows: dict[int, dict] = {}
    for r in table.to_pylist():
        seen = rows.get(r["line"])
        if seen is None:
            rows[r["line"]] = r
        elif r["reason"] not in seen["reason"]:
            seen["reason"] += "; " + r["reason"]
    return pa.Table.from_pylist(list(rows.values()), schema=table.schema)
