"""Streamed exports of a cohort: CSV, JSON Lines and Parquet, and the references of :mod:`.citations` (RIS, BibTeX).

All declare the export (query hash, release, classifier version, filters, cohort count, row cap and whether it cut
the cohort) in the response headers (:func:`export_headers`) and, with ``meta=1``, as a JSON sidecar in place of the
rows (:func:`export_meta`, the same object). The CSV is a header row and the rows, nothing else, so pandas, R and
spreadsheets read it with their defaults; JSON Lines opens with one ``{"_export": ...}`` object; Parquet carries it
in its file metadata (key ``metacan_export``: ``pyarrow.parquet.read_schema(f).metadata[b"metacan_export"]``).
Every row carries the query hash, release id and classifier version. The Parquet file is written by pyarrow's
``ParquetWriter`` one row group per batch of :data:`PARQUET_BATCH_ROWS`, each sent as it is written (the footer
last), so the server holds one row group at a time; its columns are the CSV's, with the category lists as lists of
strings and ``direct_labels`` / ``machine_scores`` as JSON text. Only the CSV, the one format spreadsheets open, defuses
formulas: a text cell starting with ``=``, ``+``, ``-``, ``@``, tab or CR is written with ``'`` before it (OWASP's
advice against CSV injection); JSON Lines, Parquet, RIS and BibTeX carry the text as it is.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...tables.cells import defused, is_text
from ..query.cohort_query import CohortQuery

FORMATS = {
    "csv": "text/csv; charset=utf-8",
    "jsonl": "application/x-ndjson; charset=utf-8",
    "parquet": "application/vnd.apache.parquet",
    "ris": "application/x-research-info-systems; charset=utf-8",
    "bib": "application/x-bibtex; charset=utf-8",
}
#: Rows per Parquet row group (one streamed chunk each).
PARQUET_BATCH_ROWS = 50_000
#: The key of the export's description in the Parquet file's metadata.
PARQUET_META_KEY = b"metacan_export"


def export_meta(query: CohortQuery, count: int, cap: int) -> dict:
    c = query.cohort
    return {
        "query_hash": c.query_hash(),
        "release_id": c.release.release_id,
        "classifier_version": c.classifier_version,
        "filters": c.filters,
        "cohort_count": count,
        "row_cap": cap,
        "rows": min(count, cap),
        "truncated": count > cap,
    }


def export_headers(meta: dict, fmt: str) -> dict[str, str]:
    return {
        "Content-Disposition": f'attachment; filename="metacan-{meta["query_hash"]}.{fmt}"',
        "X-Metacan-Query-Hash": meta["query_hash"],
        "X-Metacan-Release": meta["release_id"],
        "X-Metacan-Classifier-Version": meta["classifier_version"],
        "X-Metacan-Filters": json.dumps(meta["filters"], sort_keys=True, ensure_ascii=True),
        "X-Metacan-Cohort-Count": str(meta["cohort_count"]),
        "X-Metacan-Row-Cap": str(meta["row_cap"]),
        "X-Metacan-Rows": str(meta["rows"]),
        "X-Metacan-Truncated": "true" if meta["truncated"] else "false",
    }


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "; ".join(str(v) for v in value)
    return str(value)


def _cells(column: pa.Array) -> pa.Array:
    """The CSV text of every value of a column, as :func:`_cell` writes one, converted a column at a time
    (strings, integers, booleans and string lists by Arrow's kernels; other types, e.g. doubles, by ``str`` once per
    distinct value of the batch, then spread by Arrow's ``take``: no Python object per row)."""
    t = column.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        out = column
    elif pa.types.is_integer(t):
        out = pc.cast(column, pa.string())
    elif pa.types.is_boolean(t):
        out = pc.if_else(column, "true", "false")
    elif pa.types.is_list(t) and pa.types.is_string(t.value_type):
        out = pc.binary_join(column, "; ")
    else:
        coded = pc.dictionary_encode(column)
        texts = pa.array([_cell(v) for v in coded.dictionary.to_pylist()], pa.string())
        out = pc.take(texts, coded.indices)
    return pc.fill_null(out.cast(pa.string()), "")


def _text_bytes(strings: pa.Array) -> bytes:
    """The UTF-8 bytes of every value of a string array without nulls, one after the other: the slice of the array's
    own data buffer its offsets span (no join, one copy)."""
    if len(strings) == 0:
        return b""
    strings = strings.cast(pa.string())
    _, offsets, data = strings.buffers()
    where = memoryview(offsets).cast("i")
    start, end = where[strings.offset], where[strings.offset + len(strings)]
    return data[start:end].to_pybytes() if data is not None else b""


def _lines(strings: pa.Array) -> bytes:
    """The UTF-8 bytes of every value of a string array without nulls, each followed by ``\n`` (Arrow's kernels: one
    buffer, no Python string per row, as ``"\n".join(strings.to_pylist())`` made)."""
    if len(strings) == 0:
        return b""
    return _text_bytes(pc.binary_join_element_wise(strings.cast(pa.string()), "\n", ""))


#: The bytes that make ``csv.writer`` (QUOTE_MINIMAL) quote a cell.
_STRUCTURAL = (b'"', b",", b"\r", b"\n")


def _may_need_quotes(t: pa.DataType, cells: pa.Array) -> bool:
    """False when no cell of the column can hold a quote, a comma, CR or LF: numbers and booleans (their text never
    does), and a text column whose whole data buffer holds none of them (one ``memchr`` per byte, against a regular
    expression per cell; a sliced column's buffer may extend past the slice, which only costs the check below)."""
    if pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_floating(t):
        return False
    data = cells.buffers()[2]
    if data is None:
        return False
    raw = data.to_pybytes()
    return any(b in raw for b in _STRUCTURAL)


def _csv_lines(batch: pa.RecordBatch) -> bytes:
    """The CSV rows of a batch (UTF-8) as ``csv.writer`` (``QUOTE_MINIMAL``, ``\n``) writes them, made by Arrow's
    kernels a column at a time: a cell holding a comma, a quote, CR or LF is quoted (quotes doubled; only the columns
    where :func:`_may_need_quotes` finds one are searched cell by cell), then each row's cells are joined with commas
    and a newline, and the rows are the joined array's data buffer (:func:`_text_bytes`). About 6x faster than
    ``csv.writer.writerows`` (benchmarks/bench_site.py). A text cell that a spreadsheet would run as a formula is
    defused first (:func:`~metacan_pipeline.tables.cells.defused`); numbers and booleans are written as they are (``-0.5`` stays a number)."""
    if batch.num_rows == 0:
        return b""
    cols = []
    for i in range(batch.num_columns):
        col = _cells(batch.column(i))
        if is_text(batch.column(i).type):
            col = defused(col)
        if _may_need_quotes(batch.column(i).type, col):
            quoted = pc.binary_join_element_wise('"', pc.replace_substring(col, '"', '""'), '"', "")
            col = pc.if_else(pc.match_substring_regex(col, '[",\r\n]'), quoted, col)
        cols.append(col)
    cols[-1] = pc.binary_join_element_wise(cols[-1], "\n", "")
    return _text_bytes(pc.binary_join_element_wise(*cols, ","))


def csv_chunks(query: CohortQuery, meta: dict) -> Iterator[bytes]:
    """The CSV body: the header row (also for an empty cohort), then the rows, one chunk per batch. Closes
    ``query`` at the end."""
    try:
        reader = query.export_reader(meta["row_cap"])
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow(reader.schema.names)
        yield buf.getvalue().encode()
        for batch in reader:
            yield _csv_lines(batch)
    finally:
        query.close()


def jsonl_chunks(query: CohortQuery, meta: dict) -> Iterator[bytes]:
    """The JSON Lines body: ``{"_export": meta}``, then one object per work. Closes ``query`` at the end."""
    try:
        yield (json.dumps({"_export": meta}, ensure_ascii=False) + "\n").encode()
        for batch in query.export_json_lines(meta["row_cap"]):
            yield _lines(batch.column(0))
    finally:
        query.close()


class _Chunks(io.RawIOBase):
    """A write-only file that keeps what is written until :meth:`take` hands it over (the Parquet writer's sink)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.position = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.parts.append(bytes(data))
        self.position += len(data)
        return len(data)

    def tell(self) -> int:
        return self.position

    def take(self) -> bytes:
        out, self.parts = b"".join(self.parts), []
        return out


def parquet_chunks(query: CohortQuery, meta: dict) -> Iterator[bytes]:
    """The Parquet body (module docstring): one chunk per row group, then the footer. Closes ``query`` at the end."""
    try:
        reader = query.export_reader(meta["row_cap"], PARQUET_BATCH_ROWS)
        schema = reader.schema.with_metadata({PARQUET_META_KEY: json.dumps(meta, ensure_ascii=False).encode()})
        sink = _Chunks()
        with pq.ParquetWriter(sink, schema, compression="zstd") as writer:
            for batch in reader:
                writer.write_batch(batch.replace_schema_metadata(schema.metadata))
                if chunk := sink.take():
                    yield chunk
        yield sink.take()
    finally:
        query.close()
