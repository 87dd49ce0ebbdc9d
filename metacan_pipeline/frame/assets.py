"""Ingestion assets: ``openalex_api_refresh`` (its own job, never part of the offline graph), ``openalex_inventory``,
``canadian_entities``, ``frame_parts`` (partitioned) and ``frame`` (with ``openalex_quarantine`` and
``frame_build_manifest``) (SPEC section 2). The frame's checks are in :mod:`.checks`.

A frame build reads each input file once into a part (:mod:`metacan_pipeline.frame.parts`):
``frame_parts`` builds the parts of the selected partitions in parallel worker processes and skips the
parts already built; ``frame`` merges every part into the frame (:mod:`metacan_pipeline.frame.merge`:
newest version of a work wins, merged and deleted ids removed, admission filter applied), which takes
seconds. The assets orchestrate; failures, log lines and metadata are built in :mod:`.ingest`.
"""

import datetime as dt
from collections import Counter

import dagster as dg
import pyarrow as pa

from .. import settings
from ..meta import table_metadata
from ..openalex.api import route_filters
from ..openalex.inventory import take_inventory
from ..openalex.reader import Record, iter_records
from ..openalex.remote import RemoteReadError
from ..openalex.windows import completion_marker, read_marker, write_marker
from ..resources import OpenAlexFiles
from ..storage import MetacanStorage
from ..tables.frame import ENTITY_SCHEMA
from ..tables.openalex import INVENTORY_SCHEMA
from . import ingest
from .api_refresh import (
    ApiRefreshConfig,
    archive_root,
    choose_window,
    chosen_to_buy,
    completed_message,
    harvest_window,
    not_chosen_metadata,
    pinned_entity_ids,
    refresh_client,
    refresh_metadata,
)
from .authors import build_author_tables
from .cluster import default_workers
from .entities import EntityLists
from .merge import (
    build_manifest_table,
    frame_build_id,
    merge_parts,
    quarantine_table,
    record_frame_build,
    removed_work_ids,
)
from .partitions import openalex_partitions, sync_partitions
from .parts import part_jobs, quarantine_reasons, readable_parts, reason_class, split_finished
from .routes import AdmissionRule
from .shipped import EntityListError, configured_file, pinned_lists

__all__ = [
    "canadian_entities",
    "frame",
    "frame_authors",
    "frame_parts",
    "openalex_api_refresh",
    "openalex_inventory",
    "openalex_partitions",
]


class IngestConfig(dg.Config):
    """Parallelism of the part builds: worker processes of the local Dask cluster (0 = one per CPU core; 1 = in the
    run's own process). Ignored when ``METACAN_DASK_SCHEDULER`` names a running scheduler: its workers build them."""

    workers: int = 0


class FrameConfig(dg.Config):
    """SPEC section 2 admission settings."""

    year_min: int = 2000
    year_max: int = 2025


#: ``openalex_inventory`` also lists the API archive that ``openalex_api_refresh`` writes: a dependency by key.
API_REFRESH_KEY = dg.AssetKey("openalex_api_refresh")


@dg.asset(
    group_name="ingestion",
    kinds={"python", "openalex"},
    code_version="1",
    owners=["team:metacan"],
    deps=["canadian_entities"],
    retry_policy=dg.RetryPolicy(max_retries=2, delay=30, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS),
)
def openalex_api_refresh(
    context: dg.AssetExecutionContext, config: ApiRefreshConfig, storage: MetacanStorage, openalex: OpenAlexFiles
) -> dg.MaterializeResult:
    """Harvest the works updated in one window from the OpenAlex API, one query per route, into
    ``<api archive>/window=<from>_<to>/`` (every page archived gzip-compressed; a page already there
    is read back, never bought again).

    Queries (OpenAlex docs, "Filter works"; SPEC section 2): ``authorships.institutions.country_code:ca``,
    ``authorships.countries:ca``, ``funders.id`` and ``awards.funder_id`` over the pinned Canadian funders,
    ``primary_location.source.id`` over the pinned Canadian sources (OR-groups of 100, from the
    ``canadian_entities`` table), each with ``from_updated_date`` and ``to_updated_date``. Paging is by
    cursor (OpenAlex docs, "Paging"); the API key is sent as ``api_key`` (docs, "Rate limits and
    authentication") and never logged, archived or put in metadata.

    The window: the run's config (default: from the last completed window's ``to`` to
    today; an incomplete window is resumed first). When every query is read to its end,
    ``window.json`` (from, to, completed_at, calls made, pages, works, cost_usd) is written atomically:
    without it the window is incomplete and is resumed by the next run.

    Merged and deleted works: the API offers no list of them. A merged-away id answers a single-entity
    GET with a 301 redirect to the id it was merged into (docs, "Get single entities: Merged entity
    IDs") and simply stops appearing in list queries; merged and deleted ids are published only as the
    snapshot's ``merged_ids/works/*.csv.gz`` files, which ``frame`` applies. A work whose newer version
    has lost every Canadian route is removed from the frame only when that version reaches an input
    (a later window or snapshot part): a route query does not return it once it no longer matches.

    Errors (dg.Failure, not retried): the ``canadian_entities`` table is missing (materialize it first);
    no API archive folder is configured; a malformed window; the day's budget is spent (the message
    names the window to resume and how); a non-retryable OpenAlex answer (4xx, cursor loop).
    Transient HTTP errors are retried by the client (tenacity, Retry-After honoured).
    Metadata: window, queries, pages, works, calls made, pages from archive, cost.

    Chosen only: the refresh harvests in a run of the job ``api_refresh`` or a run that materializes it on its own
    (with ``openalex_inventory`` at most). In a run that selects more, such as the lineage view's "Materialize all",
    it buys nothing: it logs a warning saying how to choose it and records ``harvested: false``, and the rest of the
    run goes on with the archive as it was.
    """
    selected = context.job_def.asset_layer.selected_asset_keys  # what this run materializes
    if not chosen_to_buy(context.run.job_name, selected):
        line, metadata = not_chosen_metadata(context.run.run_id, selected)
        context.log.warning(line)
        return dg.MaterializeResult(metadata=metadata)
    api_root = archive_root(openalex)
    funders, sources = pinned_entity_ids(storage)
    window, why = choose_window(api_root, config)
    folder = window.folder(api_root)
    already = read_marker(folder)
    filters = route_filters(funders, sources, window.from_date, window.to_date, window.by)
    context.log.info(
        f"openalex_api_refresh: window {window.name} ({why}){'; already complete, replaying its archive' if already else ''}; "
        f"{len(filters)} queries over {len(funders)} funders and {len(sources)} sources"
    )
    client = refresh_client(folder, api_root, config)
    got = harvest_window(client, window, filters, context.log.info)
    if not already:  # a replay of a complete window leaves its marker as it was
        write_marker(folder, completion_marker(window, client.calls_made, got, len(filters)))
    context.log.info(completed_message(window, got, client))
    return dg.MaterializeResult(metadata=refresh_metadata(window, why, len(filters), got, client, folder))


@dg.asset(
    group_name="ingestion",
    kinds={"python", "parquet"},
    code_version="1",
    owners=["team:metacan"],
    deps=[API_REFRESH_KEY],
)
def openalex_inventory(
    context: dg.AssetExecutionContext, storage: MetacanStorage, openalex: OpenAlexFiles
) -> dg.MaterializeResult:
    """Every work-bearing file under the OpenAlex input folders and the API archive, by frame
    partition, checked against the snapshot manifests (OpenAlex docs, "Download the snapshot").

    Registers one ``openalex_partitions`` key per snapshot ``updated_date=`` folder present, one per
    API refresh window folder (``window=<from>_<to>``, written by ``openalex_api_refresh``) and
    ``files`` for the other files, and removes keys whose files are gone. A partition whose parts
    are not all listed in its manifest, or whose manifest lists parts that are not here, is
    incomplete: it is still read (nothing is lost) and the ``frame`` check
    ``frame_build_manifest_covers_snapshot`` warns. A listed part whose size is not the manifest's
    ``content_length`` (a cut or replaced download) is logged as a warning and the check warns too. Unsupported files are listed, never skipped
    silently. Output: ``warehouse/openalex_inventory``.
    """
    try:
        folders = openalex.folders
        inv = take_inventory(folders, openalex.api_root)
    except ValueError as exc:  # a folder list whose files' names would be ambiguous
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    except RemoteReadError as exc:  # an s3:// folder the store did not list after every attempt: may pass later
        raise dg.Failure(
            description=f"{exc}: check the network and the endpoint (METACAN_S3_ENDPOINT_URL), then materialize "
            "openalex_inventory again",
            allow_retries=True,
        ) from None
    if not inv.present():  # an empty (or unmounted) folder: fail before any partition key is removed
        raise ingest.no_input_failure(inv, [f.root for f in folders], openalex.api_root)
    rows = inv.table_rows()
    storage.write_table("openalex_inventory", pa.Table.from_pylist(rows, schema=INVENTORY_SCHEMA))
    keys = inv.partition_keys()
    new, gone = sync_partitions(context.instance, keys)
    for line in inv.warnings():
        context.log.warning(line)
    missing = sum(1 for r in inv.rows if r["manifest_status"] == "missing_locally")
    context.log.info(
        f"openalex_inventory: {len(inv.present())} files in {len(keys)} partitions ({len(new)} new, {len(gone)} removed); "
        f"{missing} manifest parts not here; {len(inv.incomplete_partitions())} incomplete partitions"
    )
    return dg.MaterializeResult(metadata=ingest.inventory_metadata(inv, rows, keys, new, gone))


@dg.asset(group_name="ingestion", kinds={"python", "parquet"}, code_version="2", owners=["team:metacan"])
def canadian_entities(
    context: dg.AssetExecutionContext, storage: MetacanStorage, openalex: OpenAlexFiles
) -> dg.MaterializeResult:
    """Pinned lists of Canadian funders, sources and institutions (SPEC section 2).

    Every funder (``F``), source (``S``) and institution (``I``) record under the input folders whose
    ``country_code`` is ``CA``: funder files and archived funder responses, snapshot
    ``data/funders|sources|institutions/updated_date=*/part_*.gz``. A kind the input folders hold no record of
    comes from the shipped list (``frame/shipped.py``: the packaged ``frame/data/ca_entities-<date>.csv.gz``, or the
    file ``METACAN_ENTITY_LIST_FILE`` names), so a frame built from work records alone routes ``ca_fund`` and
    ``ca_venue``. Each list carries a version ``<kind>s@<data date>#<hash of its ids>``; the frame records the
    versions it used. Output: ``warehouse/canadian_entities`` (kind, id, display_name, country_code, updated_date,
    source_file, list_version).

    Raises dg.Failure (not retried) when a kind comes out empty, naming the kind, the route it silences and how to
    get its records, unless ``METACAN_EMPTY_ENTITY_KINDS`` lists it; and for a bad ``METACAN_ENTITY_LIST_FILE``.
    """
    built_on = dt.date.today().isoformat()
    snapshot_dirs = {"funders", "sources", "institutions"}
    records = (
        r
        for f in openalex.folders
        for r in iter_records(f.root, snapshot_dirs, f.prefix)
        if isinstance(r, Record) and r.kind != "W"
    )
    try:
        list_file = configured_file(settings.entity_list_file())
        rows, origin = pinned_lists(records, built_on, list_file, settings.empty_entity_kinds())
    except (EntityListError, ValueError) as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    n = storage.write_table("canadian_entities", pa.Table.from_pylist(rows, schema=ENTITY_SCHEMA))
    by_kind = Counter(r["kind"] for r in rows)
    versions = {r["kind"]: r["list_version"] for r in rows}
    context.log.info(f"canadian_entities: {dict(by_kind)}; from {origin}; versions {versions}")
    for kind, where in origin.items():
        if where == "none":
            context.log.warning(f"no Canadian {kind} records (allowed by METACAN_EMPTY_ENTITY_KINDS)")
        elif where == "shipped":
            context.log.info(f"{kind}s: the input folders hold no {kind} record; using {list_file}")
    return dg.MaterializeResult(
        metadata=table_metadata(
            ENTITY_SCHEMA,
            n,
            rows,
            ["kind", "id", "display_name", "list_version"],
            built_on=built_on,
            funders=by_kind.get("funder", 0),
            sources=by_kind.get("source", 0),
            institutions=by_kind.get("institution", 0),
            list_versions=dg.MetadataValue.json(versions),
            list_origin=dg.MetadataValue.json(origin),
            shipped_list_file=str(list_file) if list_file is not None else "none",
        )
    )


@dg.asset(
    group_name="ingestion",
    kinds={"python", "duckdb", "parquet"},
    code_version="1",
    owners=["team:metacan"],
    partitions_def=openalex_partitions,
    backfill_policy=dg.BackfillPolicy.single_run(),
    deps=[openalex_inventory, canadian_entities],
)
def frame_parts(
    context: dg.AssetExecutionContext, config: IngestConfig, storage: MetacanStorage, openalex: OpenAlexFiles
) -> dg.MaterializeResult:
    """The frame's parts for the selected partitions: each input file read once into its routed
    works, its id index, its quarantine rows and its build-manifest row.

    A backfill of many partitions runs as one run whose files are built ``workers`` at a time,
    largest first, by a local Dask cluster started for the run (one worker process per core by default), or by
    the workers of the Dask scheduler that ``METACAN_DASK_SCHEDULER`` names. A worker that dies mid-part loses
    only that part's unfinished folder: the part is built again on another worker and counted once. A part already built with the same build key (file size and mtime, entity-list
    versions, lexicon and code version) is skipped without being read, so an interrupted build
    resumes at the first unfinished part; a part whose file could not be read from object storage (quarantined
    with the reason) is read again. Each part's record count is checked against its snapshot
    manifest entry; a mismatch is logged and recorded (``count_check``), never fatal.
    Output: ``warehouse/frame_parts/<partition>/<part>/``.
    """
    keys = set(context.partition_keys)
    entities = EntityLists.from_table(storage.read_table("canadian_entities"))
    jobs = part_jobs(storage.read_table("openalex_inventory").to_pylist(), openalex.path_of, keys)
    parts_root = ingest.parts_location(storage.table_dir("frame_parts"))
    try:
        skipped, todo = split_finished(jobs, parts_root, entities, retry_failed_reads=True)
    except OSError as exc:  # the object storage of METACAN_PARTS_URL did not answer
        raise ingest.parts_store_failure(exc) from None
    if not jobs:
        context.log.warning(
            f"no input files in partition(s) {sorted(keys)}: materialize openalex_inventory to refresh the partitions"
        )
    try:
        workers, scheduler = default_workers(config.workers), settings.dask_scheduler()
    except ValueError as exc:  # METACAN_DASK_SCHEDULER is not an address
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    context.log.info(
        f"frame_parts: {len(jobs)} files in {len(keys)} partition(s); {len(skipped)} already built, {len(todo)} to build "
        + (f"on the Dask scheduler {scheduler}" if scheduler else f"with {workers} worker(s)")
        + (f"; parts in {parts_root}" if isinstance(parts_root, str) else "")
    )
    built, where = ingest.run_part_builds(
        context.log, todo, parts_root, entities, context.run.run_id, workers, scheduler
    )
    try:
        quarantine = quarantine_reasons(parts_root, built)
    except OSError as exc:
        raise ingest.parts_store_failure(exc) from None
    metadata = ingest.parts_metadata(skipped + built, built, keys, workers, quarantine, where)
    return dg.MaterializeResult(metadata=metadata)


_FRAME_DEPS = ["frame_parts", "openalex_inventory", "canadian_entities"]
_FRAME_SPEC = {
    "group_name": "ingestion",
    "kinds": {"duckdb", "parquet"},
    "owners": ["team:metacan"],
    "deps": _FRAME_DEPS,
}


@dg.multi_asset(
    specs=[
        dg.AssetSpec("frame", code_version="2", **_FRAME_SPEC),
        dg.AssetSpec(
            "openalex_quarantine",
            code_version="1",
            description="Every input record the frame build refused, with its file, locator, line, excerpt and reason "
            "(written by the frame merge from every part's quarantine), plus one row per unsupported input file.",
            **_FRAME_SPEC,
        ),
        dg.AssetSpec(
            "frame_build_manifest",
            code_version="1",
            description="One row per part the current frame build used: its build key, record counts against the "
            "snapshot manifest (count_check), read path and timing, and how many of its works were admitted.",
            **_FRAME_SPEC,
        ),
    ],
)
def frame(context: dg.AssetExecutionContext, config: FrameConfig, storage: MetacanStorage, openalex: OpenAlexFiles):
    """The frame of Canada-linked works with their routes and evidence (SPEC section 2 in full).

    Merges the parts of every file in the inventory: per work id the newest version wins (newest
    ``updated_date``, then the later file in sort order, then the later record in the file); ids in
    ``merged_ids/works`` (merged, or deleted when ``merge_into_id`` is empty) are removed; a work
    whose newest version has no route leaves the frame; the admission filter (``year_min <=
    publication_year <= year_max``, non-empty title) is applied. One row per admitted work: the four
    routes with their evidence, ``invisible_to_affiliation_only``, the sampling-frame flags,
    ``has_abstract`` (no abstract text), the entity-list and lexicon versions, ``frame_build_id``.
    Also writes ``openalex_quarantine`` (every bad record, file, line, reason) and
    ``frame_build_manifest`` (one row per part, with its admitted count).
    Raises dg.Failure naming the partitions to materialize when a part is not built, and when the
    frame is empty. Output: ``warehouse/frame`` plus the DuckDB view ``frame``.
    """
    entities = EntityLists.from_table(storage.read_table("canadian_entities"))
    rule = AdmissionRule(config.year_min, config.year_max)
    parts_root = ingest.parts_location(storage.table_dir("frame_parts"))
    inventory = storage.read_table("openalex_inventory").to_pylist()
    try:
        manifest, unbuilt = split_finished(part_jobs(inventory, openalex.path_of), parts_root, entities)
    except OSError as exc:
        raise ingest.parts_store_failure(exc) from None
    if unbuilt:
        raise ingest.unbuilt_parts_failure([job for job, _ in unbuilt])
    folders = openalex.folders
    removed, merged_files = removed_work_ids(folders)
    build_id = frame_build_id(manifest, entities.versions, rule, merged_files)
    if not manifest:
        raise ingest.no_parts_failure([f.root for f in folders])
    try:  # parts in object storage are downloaded to a temporary folder for the merge, and checked
        with readable_parts(parts_root, manifest, storage.warehouse) as dirs:
            merged = merge_parts(storage, dirs, removed, rule, build_id)
    except OSError as exc:
        if not isinstance(parts_root, str):
            raise
        raise ingest.parts_store_failure(exc) from None
    quarantine = quarantine_table(merged.quarantine, inventory)
    storage.write_table("openalex_quarantine", quarantine)
    build_manifest = build_manifest_table(manifest, merged.admitted_by_file)
    storage.write_table("frame_build_manifest", build_manifest)
    by_reason = Counter(reason_class(r) for r in quarantine.column("reason").to_pylist())
    if merged.admitted == 0:
        raise ingest.empty_frame_failure(merged, config.year_min, config.year_max)
    summary = record_frame_build(storage, build_id, context.run.run_id, merged.admitted, len(manifest))
    context.log.info(ingest.frame_log_line(merged, summary, len(manifest), by_reason, len(removed)))
    metadata = ingest.frame_metadata(merged, summary, manifest, by_reason, len(removed), entities, build_id)
    # the build id is the frame's data version: two runs that produced the same build show the same version in the UI
    yield dg.MaterializeResult(asset_key="frame", metadata=metadata, data_version=dg.DataVersion(build_id))
    yield from ingest.side_table_results(quarantine, build_manifest)


_AUTHOR_SPEC = {"group_name": "ingestion", "kinds": {"duckdb", "parquet"}, "owners": ["team:metacan"]}


@dg.multi_asset(
    specs=[
        dg.AssetSpec(
            "work_authors",
            code_version="1",
            deps=["frame", "canadian_entities"],
            description="Every authorship of every frame work in the record's order: OpenAlex author id (or why "
            "there is none: missing or invalid; the authorship is kept by name), ORCID and name as OpenAlex gives "
            "them, whether it is Canadian, its institutions.",
            **_AUTHOR_SPEC,
        ),
        dg.AssetSpec(
            "authors",
            code_version="1",
            deps=["work_authors"],
            description="The frame's OpenAlex authors (authorships with a valid author id): ORCID and name as OpenAlex "
            "gives them on their newest work, whether any authorship is Canadian, works and years.",
            **_AUTHOR_SPEC,
        ),
        dg.AssetSpec(
            "institutions",
            code_version="1",
            deps=["frame"],
            description="The institutions of the frame's authorships that have an OpenAlex id: ROR, name and country as "
            "OpenAlex gives them on their newest work, works and years.",
            **_AUTHOR_SPEC,
        ),
        dg.AssetSpec(
            "author_institution_years",
            code_version="1",
            deps=["frame", "canadian_entities"],
            description="Each author's Canadian institutions (country code CA or pinned) by publication year, from their "
            "Canadian authorships, with the works that list each.",
            **_AUTHOR_SPEC,
        ),
    ],
)
def frame_authors(context: dg.AssetExecutionContext, storage: MetacanStorage):
    """The frame's authors and institutions (:func:`.authors.build_author_tables`): ``work_authors`` (every
    authorship, none dropped), ``authors``, ``institutions`` and ``author_institution_years``. Names are data:
    copied as OpenAlex gives them, never inferred. Logs a warning counting the authorships kept without an author
    id."""
    pinned = storage.read_table("canadian_entities", filters=[("kind", "=", "institution")]).column("id").to_pylist()
    built = build_author_tables(storage, pinned)
    no_id = built.missing_author_id + built.invalid_author_id
    if no_id:
        context.log.warning(
            f"work_authors: {no_id} authorship(s) kept by name only: {built.missing_author_id} without an author id, "
            f"{built.invalid_author_id} with an author id that is not one (author_id_status says which)"
        )
    yield dg.MaterializeResult(
        asset_key="work_authors",
        metadata={
            "dagster/row_count": built.work_authors,
            "missing_author_id": built.missing_author_id,
            "invalid_author_id": built.invalid_author_id,
        },
    )
    yield dg.MaterializeResult(asset_key="authors", metadata={"dagster/row_count": built.authors})
    yield dg.MaterializeResult(asset_key="institutions", metadata={"dagster/row_count": built.institutions})
    yield dg.MaterializeResult(
        asset_key="author_institution_years", metadata={"dagster/row_count": built.author_institution_years}
    )
