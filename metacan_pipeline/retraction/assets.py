"""The Retraction Watch assets: ``retraction_watch`` (the file read, with ``retraction_watch_quarantine`` and
``retraction_watch_source``) and ``work_retractions`` (its notices joined to the frame). Checks in :mod:`.checks`."""

from collections import Counter
from pathlib import Path

import dagster as dg
import pyarrow as pa

from ..meta import counts_markdown, table_metadata
from ..storage import MetacanStorage
from ..tables.retraction import NOTICES_SCHEMA, QUARANTINE_SCHEMA, SOURCE_SCHEMA, WORK_RETRACTIONS_SCHEMA
from .join import RETRACTION, FrameWithoutPubmedIds, join_frame, work_state
from .notices import RetractionWatchFileError, read_notices
from .source import LOADED, NOT_CONFIGURED, RetractionWatchDownloadError, configured_file

#: What ``retraction_watch`` says when no file is configured (and the records say "not checked").
NOT_CONFIGURED_MESSAGE = (
    "no Retraction Watch file configured: every work is 'not checked' (set METACAN_RETRACTION_WATCH_FILE to a copy "
    "of the Crossref Labs export, or METACAN_RETRACTION_WATCH_URL to download it)"
)

_SPEC = {"group_name": "ingestion", "kinds": {"duckdb", "parquet"}, "owners": ["team:metacan"]}


def _source_row(entry, notices: pa.Table, quarantine: pa.Table) -> dict:
    if entry is None:
        return {"status": NOT_CONFIGURED, "rows": 0, "quarantined": 0}
    dates = [d for d in notices.column("retraction_date").to_pylist() if d]
    return {
        "rw_version": entry.rw_version,
        "status": LOADED,
        "source": entry.source,
        "file": entry.file,
        "sha256": entry.sha256,
        "bytes": entry.bytes,
        "retrieved_at": entry.retrieved_at,
        "file_date": entry.file_date,
        "data_through": max(dates) if dates else None,
        "rows": notices.num_rows,
        "quarantined": quarantine.num_rows,
    }


@dg.multi_asset(
    specs=[
        dg.AssetSpec(
            "retraction_watch",
            code_version="1",
            description="The notices of the Crossref Labs Retraction Watch export (retraction, expression of concern, "
            "correction, reinstatement), reasons, dates and DOIs normalised; empty when no file is configured.",
            **_SPEC,
        ),
        dg.AssetSpec(
            "retraction_watch_quarantine",
            code_version="1",
            description="Every row of the Retraction Watch file that could not be read, with its row number and why.",
            **_SPEC,
        ),
        dg.AssetSpec(
            "retraction_watch_source",
            code_version="1",
            description="The Retraction Watch file read: version, source, archived copy, SHA-256, dates, counts "
            "(status not_configured when there is none).",
            **_SPEC,
        ),
    ],
)
def retraction_watch(context: dg.AssetExecutionContext, storage: MetacanStorage):
    """Read the configured Retraction Watch file (``METACAN_RETRACTION_WATCH_FILE``, else a fresh download of
    ``METACAN_RETRACTION_WATCH_URL``), archive it by content hash under ``<data dir>/retraction_watch/``, and write
    its notices, the rows refused and one row saying what was read. With neither set nothing is downloaded: the
    tables are empty, the source row says ``not_configured`` and every record says "not checked".

    Raises dg.Failure naming the variable when the file is not a Retraction Watch export or the URL gives no file."""
    try:
        entry = configured_file(storage.root)
        if entry is None:
            notices, quarantine = NOTICES_SCHEMA.empty_table(), QUARANTINE_SCHEMA.empty_table()
        else:
            notices, quarantine = read_notices(entry.path, entry.rw_version)
    except (RetractionWatchFileError, RetractionWatchDownloadError, ValueError) as exc:
        raise dg.Failure(description=str(exc)) from None
    source = _source_row(entry, notices, quarantine)
    storage.write_table("retraction_watch", notices, schema=NOTICES_SCHEMA)
    storage.write_table("retraction_watch_quarantine", quarantine, schema=QUARANTINE_SCHEMA)
    storage.write_table("retraction_watch_source", pa.Table.from_pylist([source], schema=SOURCE_SCHEMA))
    if entry is None:
        context.log.warning(NOT_CONFIGURED_MESSAGE)
    else:
        context.log.info(
            f"retraction_watch {entry.rw_version}: {notices.num_rows} notices, {quarantine.num_rows} rows quarantined "
            f"(from {entry.source}, archived as {entry.file})"
        )
    natures = Counter(notices.column("retraction_state").to_pylist())
    extra = {"status": source["status"], "rw_version": source.get("rw_version") or "none"}
    if entry is None:
        extra["note"] = NOT_CONFIGURED_MESSAGE
    else:
        extra.update(source=entry.source, sha256=entry.sha256, data_through=source["data_through"] or "none")
    yield dg.MaterializeResult(
        asset_key="retraction_watch",
        metadata=table_metadata(
            NOTICES_SCHEMA,
            notices.num_rows,
            notices.slice(0, 10).to_pylist(),
            ["rw_record_id", "retraction_nature", "retraction_date", "original_doi", "original_pmid"],
            states=counts_markdown(dict(natures), "state"),
            **extra,
        ),
        data_version=dg.DataVersion(source.get("rw_version") or NOT_CONFIGURED),
    )
    yield dg.MaterializeResult(
        asset_key="retraction_watch_quarantine",
        metadata=table_metadata(
            QUARANTINE_SCHEMA, quarantine.num_rows, quarantine.slice(0, 10).to_pylist(), ["line", "reason", "excerpt"]
        ),
    )
    yield dg.MaterializeResult(
        asset_key="retraction_watch_source", metadata=table_metadata(SOURCE_SCHEMA, 1, [source], list(source)[:6])
    )


@dg.asset(
    code_version="1",
    deps=["frame", "retraction_watch"],
    description="Each Retraction Watch notice of a frame work, joined by normalised DOI or PubMed id, with "
    "OpenAlex's is_retracted and whether OpenAlex missed a retraction.",
    **_SPEC,
)
def work_retractions(context: dg.AssetExecutionContext, storage: MetacanStorage) -> dg.MaterializeResult:
    """Join the notices of ``retraction_watch`` to the frame by DOI and PubMed id (:func:`.join.join_frame`): one row
    per (work, notice). A notice of a work outside the frame is not joined; no work enters the frame this way. The
    metadata count works by state (:func:`.join.work_state`) and the works whose state is a retraction that
    OpenAlex's ``is_retracted`` misses."""
    for name in ("frame", "retraction_watch"):
        storage.require(name)
    try:
        table = join_frame(
            Path(storage.table_dir("frame")) / "*.parquet", Path(storage.table_dir("retraction_watch")) / "*.parquet"
        )
    except FrameWithoutPubmedIds as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    n = storage.write_table("work_retractions", table, schema=WORK_RETRACTIONS_SCHEMA)
    by_work: dict[str, list[dict]] = {}
    for r in table.select(["id", "retraction_state", "is_retracted"]).to_pylist():
        by_work.setdefault(r["id"], []).append(r)
    works = len(by_work)
    states = Counter(work_state(notices) for notices in by_work.values())
    missed = sum(work_state(n) == RETRACTION and not n[0]["is_retracted"] for n in by_work.values())
    context.log.info(f"work_retractions: {n} notices of {works} frame works; OpenAlex missed {missed} retractions")
    return dg.MaterializeResult(
        metadata=table_metadata(
            WORK_RETRACTIONS_SCHEMA,
            n,
            table.slice(0, 10).to_pylist(),
            ["id", "rw_record_id", "retraction_state", "matched_by", "openalex_missed"],
            works=works,
            openalex_missed_works=missed,
            work_states=counts_markdown(dict(states), "state"),
        )
    )
