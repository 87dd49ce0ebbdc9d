"""The ``site_database`` asset: the release database the served site reads.

Downstream of ``work_records``, so the blocking check ``records_may_ship`` stops it as it stops ``work_pages``:
nothing the check refused reaches a release. The work is in :mod:`.build.build`.
"""

import dagster as dg

from ..meta import counts_markdown
from ..publish.pages import page_context
from ..release.layer import newest_release
from ..storage import MetacanStorage
from ..teachers.core.registry import load_roles
from ..vocab import SAMPLE_TEACHER
from .build.build import ReleaseInputError, build_release
from .query.stored_counts import write_stored_counts


@dg.asset(
    deps=[
        dg.AssetKey("work_records"),
        dg.AssetKey("student_heads"),
        dg.AssetKey("prevalence"),
        dg.AssetKey("release"),
        dg.AssetKey("filter_recall"),
        dg.AssetKey("venue_known_item_recall"),
    ],
    kinds={"duckdb", "sqlite"},
    group_name="publishing",
    code_version="1",
    owners=["team:metacan"],
)
def site_database(context: dg.AssetExecutionContext, storage: MetacanStorage) -> dg.MaterializeResult:
    """One DuckDB release database per release at ``data/site/releases/<release_id>.duckdb`` (with its SQLite
    FTS5 index ``<release_id>.fts.sqlite`` and the pointer ``current.json``), built from the published records.

    Tables (``metacan_pipeline/tables/site.py``): works with every column a cohort filters on, institutions,
    funders and keywords one row per value, direct labels per teacher with status and qualification, classifier
    decisions per mode with both scores and ``prediction_status``, machine scores with ``validation_status``
    verbatim, the classifier heads' support gates, and ``release_info``; the statistics page's figures, the
    pipeline's ``prevalence`` rows, filter recall and known-item venue recall when they ran, the works per release
    layer, the teachers' disagreements and the typeahead counts (``site/build/figures.py``). No abstract text. The release id is a
    content hash of the records, so an unchanged re-run reuses the files. ``metacan serve`` serves the current one.
    Fails naming the work when the frame's name lists disagree with the records (re-materialize work_records).
    """
    heads = storage.read_table("student_heads").to_pylist() if storage.has_table("student_heads") else []
    newest = newest_release(storage)  # the footer names it; a new release is a new release database
    page_ctx = page_context(heads, load_roles()[SAMPLE_TEACHER]) | {
        "frozen_release": newest.release_version if newest else None
    }
    try:
        built = build_release(storage, page_ctx, write_stored_counts)
    except ReleaseInputError as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    context.log.info(
        f"site_database: release {built.release_id} ({'reused' if built.reused else 'built'}), "
        f"{built.row_counts['works']} works, {built.bytes / 1e6:.1f} MB at {built.database}"
    )
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": built.row_counts["works"],
            "release_id": built.release_id,
            "reused": built.reused,
            "database": dg.MetadataValue.path(str(built.database)),
            "fts_index": dg.MetadataValue.path(str(built.fts_index)),
            "database_bytes": built.database.stat().st_size,
            "fts_index_bytes": built.fts_index.stat().st_size,
            "rows_by_table": counts_markdown(built.row_counts, "table", "rows"),
        }
    )
