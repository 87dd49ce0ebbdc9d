"""Retraction Watch notices joined to the frame, and the state of a work.

A notice belongs to a frame work when its ``OriginalPaperDOI`` equals the work's DOI (both normalised by
:data:`.notices.DOI_SQL`) or its ``OriginalPaperPubMedID`` equals the work's PubMed id; ``matched_by`` says which
(``doi``, ``pmid``, ``doi+pmid``). The join starts from the frame: a notice of a work outside it is not joined, and
no work enters the frame through Retraction Watch.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import duckdb
import pyarrow as pa

from ..storage import sql_literal
from ..tables.retraction import WORK_RETRACTIONS_SCHEMA
from ..vocab import RETRACTION_NATURES, RETRACTION_NONE
from .notices import doi_sql

RETRACTION = RETRACTION_NATURES["Retraction"]
REINSTATEMENT = RETRACTION_NATURES["Reinstatement"]
EXPRESSION_OF_CONCERN = RETRACTION_NATURES["Expression of concern"]
CORRECTION = RETRACTION_NATURES["Correction"]

_JOIN_SQL = """
WITH f AS (
  SELECT id, {frame_doi} AS doi, pmid, coalesce(is_retracted, false) AS is_retracted FROM frame
), hits AS (
  SELECT f.id, n.rw_record_id, 'doi' AS how FROM f JOIN notices n ON f.doi = n.original_doi
  UNION ALL
  SELECT f.id, n.rw_record_id, 'pmid' AS how FROM f JOIN notices n ON f.pmid = n.original_pmid
), matched AS (
  SELECT id, rw_record_id, string_agg(DISTINCT how, '+' ORDER BY how) AS matched_by FROM hits GROUP BY ALL
)
SELECT m.id, n.rw_record_id, n.retraction_nature, n.retraction_state, n.retraction_reasons, n.retraction_date,
       n.notice_doi, n.notice_pmid, m.matched_by, f.is_retracted,
       n.retraction_state = 'retraction' AND NOT f.is_retracted AS openalex_missed, n.rw_version
FROM matched m JOIN notices n USING (rw_record_id) JOIN f USING (id)
ORDER BY m.id, n.retraction_date NULLS FIRST, n.rw_record_id
"""


class FrameWithoutPubmedIds(ValueError):
    """The frame predates its ``pmid`` column."""


def join_frame(frame_files: str | Path, notice_files: str | Path) -> pa.Table:
    """``work_retractions``: every notice of the Parquet files ``notice_files`` joined to a work of the frame's
    Parquet files ``frame_files`` (globs), in work id order, each work's notices by date (undated first), then
    Record ID. Runs in a private DuckDB (1 GB). Raises :class:`FrameWithoutPubmedIds` for a frame built before it
    kept PubMed ids."""
    con = duckdb.connect(config={"memory_limit": "1GB"})
    try:
        con.execute(f"CREATE VIEW frame AS SELECT * FROM read_parquet({sql_literal(str(frame_files))})")
        if "pmid" not in {d[0] for d in con.execute("SELECT * FROM frame LIMIT 0").description}:
            raise FrameWithoutPubmedIds(
                "the frame was built before it kept PubMed ids (column pmid), so Retraction Watch cannot be joined by "
                "PubMed id: rebuild the frame (`metacan run`, or materialize frame_parts and frame), then "
                "work_retractions"
            )
        con.execute(f"CREATE VIEW notices AS SELECT * FROM read_parquet({sql_literal(str(notice_files))})")
        table = con.execute(_JOIN_SQL.format(frame_doi=doi_sql("doi"))).to_arrow_table()
    finally:
        con.close()
    return table.cast(WORK_RETRACTIONS_SCHEMA)


def work_state(notices: Iterable[dict]) -> str:
    """The state of a work from its notices (each with ``retraction_state``), in date order (undated first): a
    retraction stands unless a later reinstatement lifts it; an expression of concern stands unless a later
    retraction or reinstatement settles it; a correction alone is a correction; no notice is ``none``.

    So the last of its retraction and reinstatement notices decides when it is a retraction; otherwise an
    expression of concern after it (or without one) decides; then a reinstatement; then a correction."""
    states = [n["retraction_state"] for n in notices]
    if not states:
        return RETRACTION_NONE
    settled = [i for i, s in enumerate(states) if s in (RETRACTION, REINSTATEMENT)]
    last = settled[-1] if settled else -1
    if last >= 0 and states[last] == RETRACTION:
        return RETRACTION
    if EXPRESSION_OF_CONCERN in states[last + 1 :]:
        return EXPRESSION_OF_CONCERN
    if last >= 0:
        return REINSTATEMENT
    return CORRECTION
